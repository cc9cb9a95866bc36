package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/member"
)

// options are a member's settings as the flags give them.
type options struct {
	name, dataDir, walDir                       string
	listenClient, advertiseClient               []string
	listenPeer, advertisePeer                   []string
	initialCluster, initialState, initialToken  string
	heartbeatMS, electionMS, commitNotifyMS     int
	snapshotCount, snapshotCatchUp              int
	maxSnapshots                                int
	logStore                                    string
	maxRequestBytes, maxTxnOps                  int
	maxConcurrentStreams                        int
	keepaliveMinTime                            time.Duration
	keepaliveInterval, keepaliveTimeout         time.Duration
	leaseCheckpointMS, leaseTickMS              int
	leaseBatch                                  int
	clientTLS, peerTLS                          member.TLSInfo
	cipherSuites                                []string
	tlsMinVersion, tlsMaxVersion                string
	enablePprof                                 bool
	watchProgressNotify                         time.Duration
	quotaBackendBytes                           int
	corruptCheck                                time.Duration
	readLease                                   time.Duration
	readLeaseMaxKeys, readLeaseMaxHolders       int
	authToken                                   string
	authTokens                                  auth.TokenKind
	authTokenTTL, bcryptCost                    int
	strictReconfigCheck                         bool
	forceNewCluster, unsafeNoFsync              bool
	selfSignedCertValidity                      int
	maxLearners                                 int
	dns                                         member.DNSConfig
	featureGates                                string
	metrics                                     string
	listenMetrics                               []string
	logger, logLevel, logFormat                 string
	logOutputs                                  []string
	autoCompactionRetention, autoCompactionMode string
	listenClientHTTP, cors, hostWhitelist       []string
	socketOpts                                  member.SocketOpts
	warnUnary, warnApply                        time.Duration
	discoverySRV, discoverySRVName              string
	discovery                                   discoveryConfig
	tracing                                     tracingConfig
	logRotation, initialCorruptCheck            bool
	compactHashCheck, setMemberLocalAddr        bool
	compactHashCheckTime                        time.Duration
	logRotationJSON                             string
	configFile                                  string
	printVersion                                bool
}

// flagValue is a flag.Value over one option (or, for a flag bound to none,
// over a value of its own, so it is checked all the same). It records
// where the flag was set, so the environment and the config file know
// what the command line gave.
type flagValue struct {
	def  *flagDef
	p    any // *string, *bool, *int, *time.Duration or *[]string
	from string
	raw  string
	set  *settings
}

func (v *flagValue) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	switch p := v.p.(type) {
	case *string:
		return *p
	case *bool:
		return strconv.FormatBool(*p)
	case *int:
		return strconv.Itoa(*p)
	case *time.Duration:
		return p.String()
	case *[]string:
		return strings.Join(*p, ",")
	}
	return ""
}

func (v *flagValue) IsBoolFlag() bool { _, ok := v.p.(*bool); return ok }

func (v *flagValue) Set(s string) error {
	if err := setValue(v.p, s); err != nil {
		return err
	}
	v.raw = s
	if v.set != nil {
		v.set.record(v, v.set.origin)
	}
	return nil
}

func setValue(p any, s string) error {
	switch p := p.(type) {
	case *string:
		*p = s
	case *bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return errors.New("not a boolean")
		}
		*p = b
	case *int:
		n, err := strconv.ParseInt(s, 0, 64)
		if err != nil {
			return errors.New("not an integer")
		}
		*p = int(n)
	case *time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("not a duration (such as 500ms, 10s, 1h)")
		}
		*p = d
	case *[]string:
		var out []string
		for _, e := range strings.Split(s, ",") {
			if e = strings.TrimSpace(e); e != "" {
				out = append(out, e)
			}
		}
		*p = out
	default:
		return fmt.Errorf("flag value of type %T", p)
	}
	return nil
}

func newValue(k kind) any {
	switch k {
	case kBool:
		return new(bool)
	case kInt:
		return new(int)
	case kDuration:
		return new(time.Duration)
	case kList:
		return new([]string)
	}
	return new(string)
}

// settings is the flag table bound to one options: every flag's value, and
// where each flag that was set got its value.
type settings struct {
	o      options
	defs   []flagDef
	values map[string]*flagValue // by every spelling
	// origin names where values being set now come from ("--x", "ETCD_X").
	origin string
	// given is, by canonical name, the value set explicitly, last wins.
	given map[string]*flagValue
	// spelled is, by canonical name, the spelling used (an alias, maybe).
	spelled map[string]string
	// warnings are logged once the logger the flags choose exists.
	warnings []warning
}

type warning struct {
	msg   string
	attrs []any
}

func (s *settings) warn(msg string, attrs ...any) {
	s.warnings = append(s.warnings, warning{msg, attrs})
}

func (s *settings) record(v *flagValue, origin string) {
	v.from = origin
	s.given[v.def.name] = v
}

// newSettings binds the table to fresh options holding the defaults.
func newSettings() *settings {
	s := &settings{defs: flagTable(), values: map[string]*flagValue{}, given: map[string]*flagValue{}, spelled: map[string]string{}}
	for i := range s.defs {
		d := &s.defs[i]
		v := &flagValue{def: d}
		if d.bind != nil {
			v.p = d.bind(&s.o)
		} else {
			v.p = newValue(d.kind)
		}
		if err := setValue(v.p, d.def); err != nil {
			panic(fmt.Sprintf("flag table: --%s's default %q: %v", d.name, d.def, err))
		}
		v.set = s
		for _, n := range append([]string{d.name}, d.aliases...) {
			if s.values[n] != nil {
				panic("flag table: --" + n + " twice")
			}
			s.values[n] = v
		}
	}
	return s
}

// flagSet is the command line over s: every name and alias.
func (s *settings) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("corenode", flag.ContinueOnError)
	for i := range s.defs {
		d := &s.defs[i]
		for _, n := range append([]string{d.name}, d.aliases...) {
			fs.Var(spelledValue{s.values[n], s, n}, n, d.help())
		}
	}
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// spelledValue remembers which spelling set a flag, for the deprecation
// warning of etcd's --experimental- names.
type spelledValue struct {
	*flagValue
	s    *settings
	name string
}

func (v spelledValue) Set(str string) error {
	if err := v.flagValue.Set(str); err != nil {
		return err
	}
	v.s.spelled[v.def.name] = v.name
	return nil
}

func (d *flagDef) help() string {
	if d.etcd != "" && d.use == works {
		return d.etcd + " corenode: " + d.does
	}
	if d.etcd == "" {
		return d.does
	}
	return d.etcd + " corenode: " + useWords[d.use] + ": " + d.does
}

var useWords = map[use]string{
	works: "works", own: "corenode's own", fixed: "fixed", noEffect: "no effect",
	notYet: "not yet implemented", refused: "not yet implemented; refused",
}

// envName is the variable that sets flag name under prefix (ETCD, CORENODE).
func envName(prefix, name string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// parseFlags reads the command line, then, as etcd: the config file if one
// is named (and nothing else), or else the environment. CORENODE_<FLAG>
// wins over ETCD_<FLAG>, and the command line over both.
func parseFlags(args []string, environ []string) (*settings, error) {
	s := newSettings()
	fs := s.flagSet()
	s.origin = "command line"
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w (see corenode --help)", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (see corenode --help)", fs.Arg(0))
	}
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	if s.o.printVersion {
		return s, nil
	}
	file := s.o.configFile
	for _, k := range []string{"CORENODE_CONFIG_FILE", "ETCD_CONFIG_FILE"} {
		if file == "" {
			file = env[k]
		}
	}
	if file != "" {
		return fromConfigFile(s, file, env)
	}
	if err := s.fromEnv(env); err != nil {
		return nil, err
	}
	return s, s.check()
}

// fromEnv sets each flag the command line did not from CORENODE_<FLAG> or
// ETCD_<FLAG> (any spelling), and warns, as etcd does, of ETCD_ variables
// that name no flag.
func (s *settings) fromEnv(env map[string]string) error {
	used := map[string]bool{}
	var errs []error
	for i := range s.defs {
		d := &s.defs[i]
		if d.name == "config-file" {
			used["CORENODE_CONFIG_FILE"], used["ETCD_CONFIG_FILE"] = true, true
			continue
		}
		var found []string // variables that set d, CORENODE_ first
		for _, prefix := range []string{"CORENODE", "ETCD"} {
			for _, n := range append([]string{d.name}, d.aliases...) {
				k := envName(prefix, n)
				if v, ok := env[k]; ok {
					used[k] = true
					// As etcd: an empty variable sets nothing.
					if v != "" {
						found = append(found, k)
					}
				}
			}
		}
		if len(found) == 0 {
			continue
		}
		if cmd := s.given[d.name]; cmd != nil {
			s.warn("environment variable is shadowed by the command-line flag", "environment-variable", strings.Join(found, ","), "flag", "--"+d.name)
			continue
		}
		k := found[0]
		if len(found) > 1 {
			s.warn("environment variables set one flag; the first wins", "used", k, "ignored", strings.Join(found[1:], ","), "flag", "--"+d.name)
		}
		s.origin = k
		if err := s.values[d.name].Set(env[k]); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", k, env[k], err))
		}
		if n := strings.ToLower(strings.ReplaceAll(strings.SplitN(k, "_", 2)[1], "_", "-")); n != d.name {
			s.spelled[d.name] = n
		}
	}
	var unknown []string
	for k := range env {
		if strings.HasPrefix(k, "ETCD_") && !used[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		if k == "ETCD_VERSION" || k == "ETCD_UNSUPPORTED_ARCH" {
			s.warn("cannot set special environment variable", "key", k, "value", env[k])
			continue
		}
		s.warn("unrecognized environment variable", "environment-variable", k+"="+env[k])
	}
	return errors.Join(errs...)
}

// check applies --feature-gates, and names every flag that was set but
// cannot do what it asks: one warning for those without effect, one for
// those not yet implemented, an error for those refused.
func (s *settings) check() error {
	gates, err := s.applyGates()
	if err != nil {
		return err
	}
	var none, later []any
	var refusedFlags []string
	for i := range s.defs {
		d := &s.defs[i]
		v := s.given[d.name]
		if v == nil {
			continue
		}
		if sp := s.spelled[d.name]; strings.HasPrefix(sp, "experimental-") && sp != d.name {
			s.warn(fmt.Sprintf("--%s is deprecated in etcd 3.6 and will be decommissioned in 3.7; use --%s", sp, d.name), "from", v.from)
		}
		switch d.use {
		case fixed:
			if !sameValue(v.p, d.only) {
				none = append(none, "--"+d.name+"="+v.String(), d.does)
			}
		case noEffect:
			none = append(none, "--"+d.name, d.does)
		case notYet:
			later = append(later, "--"+d.name, d.does)
		case refused:
			if !sameValue(v.p, d.def) {
				refusedFlags = append(refusedFlags, fmt.Sprintf("--%s (from %s): not yet implemented in corenode; %s", d.name, v.from, d.does))
			}
		}
	}
	for _, g := range gatesWithoutFlag {
		on, ok := gates[g.name]
		switch {
		case !ok:
		case g.use == noEffect, g.use == fixed && strconv.FormatBool(on) != g.only:
			none = append(none, fmt.Sprintf("--feature-gates=%s=%t", g.name, on), g.does)
		}
	}
	if len(none) > 0 {
		s.warn("flags that tune parts of etcd corenode does not have: they have no effect", none...)
	}
	if len(later) > 0 {
		s.warn("flags not yet implemented in corenode: they have no effect", later...)
	}
	if len(refusedFlags) > 0 {
		return errors.New(strings.Join(refusedFlags, "; "))
	}
	return nil
}

func sameValue(p any, s string) bool {
	q := newValue(kString)
	switch p.(type) {
	case *bool:
		q = new(bool)
	case *int:
		q = new(int)
	case *time.Duration:
		q = new(time.Duration)
	case *[]string:
		q = new([]string)
	}
	if setValue(q, s) != nil {
		return false
	}
	return fmt.Sprint(deref(p)) == fmt.Sprint(deref(q))
}

func deref(p any) any {
	switch p := p.(type) {
	case *string:
		return *p
	case *bool:
		return *p
	case *int:
		return *p
	case *time.Duration:
		return *p
	case *[]string:
		return *p
	}
	return p
}

// applyGates sets the flag or option of each gate --feature-gates names.
// As etcd, a gate and its --experimental- flag must not both be given, and
// AllAlpha or AllBeta set every gate at that stage that is not set
// otherwise (named in --feature-gates, or its flag given). It returns the
// gates without a flag that were set, for check's warnings.
func (s *settings) applyGates() (map[string]bool, error) {
	if s.o.featureGates == "" {
		return nil, nil
	}
	from := s.given["feature-gates"].from
	named := map[string]bool{}
	var order []string
	for _, kv := range strings.Split(s.o.featureGates, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--feature-gates: %q is not key=value", kv)
		}
		k = strings.TrimSpace(k)
		b, err := strconv.ParseBool(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("--feature-gates: %s=%q: not a boolean", k, val)
		}
		if _, seen := named[k]; !seen {
			order = append(order, k)
		}
		named[k] = b
	}
	// The gates AllAlpha and AllBeta set, where nothing else sets them.
	for _, all := range []string{"AllAlpha", "AllBeta"} {
		on, ok := named[all]
		if !ok {
			continue
		}
		for _, g := range knownGates() {
			if _, set := named[g]; set || betaGates[g] != (all == "AllBeta") {
				continue
			}
			if i := slices.IndexFunc(s.defs, func(d flagDef) bool { return d.gate == g }); i >= 0 && s.given[s.defs[i].name] != nil {
				continue
			}
			named[g] = on
			order = append(order, g)
		}
	}
	setGates := map[string]bool{}
	for _, k := range order {
		b := named[k]
		if k == "AllAlpha" || k == "AllBeta" {
			continue
		}
		if i := slices.IndexFunc(gatesWithoutFlag, func(g gateDef) bool { return g.name == k }); i >= 0 {
			if g := gatesWithoutFlag[i]; g.set != nil {
				g.set(&s.o, b)
			}
			setGates[k] = b
			continue
		}
		i := slices.IndexFunc(s.defs, func(d flagDef) bool { return d.gate == k })
		if i < 0 {
			return nil, fmt.Errorf("--feature-gates: unrecognized feature gate: %s", k)
		}
		d := &s.defs[i]
		if s.given[d.name] != nil {
			return nil, fmt.Errorf("cannot specify both --%s and --feature-gates=%s", d.name, k)
		}
		s.origin = from + " (--feature-gates)"
		if err := s.values[d.name].Set(strconv.FormatBool(b)); err != nil {
			return nil, err
		}
	}
	return setGates, nil
}

// knownGates are the names of every feature gate corenode takes, but for
// AllAlpha and AllBeta.
func knownGates() []string {
	var names []string
	for _, d := range flagTable() {
		if d.gate != "" {
			names = append(names, d.gate)
		}
	}
	for _, g := range gatesWithoutFlag {
		names = append(names, g.name)
	}
	return names
}

// logWarnings writes the warnings parsing gathered.
func (s *settings) logWarnings(l *slog.Logger) {
	for _, w := range s.warnings {
		l.Warn(w.msg, w.attrs...)
	}
}

// printMemberUsage is corenode --help: the table, grouped by what corenode does.
func printMemberUsage(w io.Writer) {
	fmt.Fprint(w, "Usage: corenode [flags]\n       corenode health [--endpoint URL] [--cacert F --cert F --key F]\n"+
		"       corenode snapshot restore FILE --name N --data-dir D --initial-cluster C --initial-advertise-peer-urls U\n"+
		"       "+holdSynopsis("lock")+"\n       "+holdSynopsis("elect")+"\n       "+registerSynopsis+"\n"+
		"       corenode version | --version\n\n"+
		"corenode takes every flag of etcd "+strings.ReplaceAll(strings.Join(etcdVersionsTested, " and "), "v3", "3")+", by etcd's names. Each can also be set by an\n"+
		"environment variable CORENODE_<FLAG> or ETCD_<FLAG>, e.g. ETCD_DATA_DIR; a flag given on the command line\n"+
		"wins, and CORENODE_ wins over ETCD_. With --config-file (etcd's YAML), other flags and variables are ignored.\n"+
		"A flag marked 'no effect' or 'not yet implemented' is accepted and named in a warning at start.\n\nFlags:\n")
	for _, d := range flagTable() {
		names := "--" + d.name
		for _, a := range d.aliases {
			names += ", --" + a
		}
		fmt.Fprintf(w, "  %s '%s'\n    %s\n", names, d.def, d.help())
	}
	fmt.Fprint(w, "\nFeature gates no flag sets (--feature-gates=NAME=true|false):\n")
	for _, g := range gatesWithoutFlag {
		fmt.Fprintf(w, "  %s '%t'\n    corenode: %s: %s\n", g.name, g.def, useWords[g.use], g.does)
	}
}

// flagDocTable is the table of docs/operations.md: every flag and what
// corenode does with it. TestOperationsDocFlagTable keeps the doc in step.
func flagDocTable() string {
	words := map[use]string{works: "works", own: "corenode's own", fixed: "fixed", noEffect: "no effect, warned",
		notYet: "**not yet**, warned", refused: "**not yet**, refused when set"}
	var b strings.Builder
	b.WriteString("| flag | default | corenode | what corenode does |\n|---|---|---|---|\n")
	for _, d := range flagTable() {
		names := "`--" + d.name + "`"
		for _, a := range d.aliases {
			names += ", `--" + a + "`"
		}
		if d.gate != "" {
			names += ", `--feature-gates=" + d.gate + "=true`"
		}
		def := "`" + d.def + "`"
		if d.def == "" {
			def = ""
		}
		w := words[d.use]
		if d.use == fixed {
			w += " at `" + d.only + "`; another value warned"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", names, strings.ReplaceAll(def, "|", `\|`), w, strings.ReplaceAll(d.does, "|", `\|`))
	}
	for _, g := range gatesWithoutFlag {
		w := words[g.use]
		if g.use == fixed {
			w += " at `" + g.only + "`; another value warned"
		}
		fmt.Fprintf(&b, "| `--feature-gates=%s=true` | `%t` | %s | %s |\n", g.name, g.def, w, strings.ReplaceAll(g.does, "|", `\|`))
	}
	return b.String()
}
