package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// connFlags are etcdctl's connection flags, with etcdctl's names, defaults
// and ETCDCTL_<FLAG> environment variables, so that `corenode lock|elect|
// register` connect wherever `etcdctl` does with the same settings.
type connFlags struct {
	endpoints      string
	dialTimeout    time.Duration
	commandTimeout time.Duration
	cacert         string
	cert, key      string
	insecureSkip   bool
	user, password string
}

// connFlagNames are the flags ETCDCTL_* variables may set.
var connFlagNames = []string{"endpoints", "dial-timeout", "command-timeout", "cacert", "cert", "key",
	"insecure-skip-tls-verify", "user", "password"}

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.endpoints, "endpoints", "127.0.0.1:2379", "comma-separated gRPC endpoints, host:port or https://host:port (ETCDCTL_ENDPOINTS)")
	fs.DurationVar(&c.dialTimeout, "dial-timeout", 2*time.Second, "how long to wait for a member to answer before giving up (ETCDCTL_DIAL_TIMEOUT)")
	fs.DurationVar(&c.commandTimeout, "command-timeout", 5*time.Second, "timeout of each single request: the first check of the cluster, grants, revokes (ETCDCTL_COMMAND_TIMEOUT)")
	fs.StringVar(&c.cacert, "cacert", "", "verify the members' certificates with this CA bundle (ETCDCTL_CACERT)")
	fs.StringVar(&c.cert, "cert", "", "client certificate for members that require one (ETCDCTL_CERT)")
	fs.StringVar(&c.key, "key", "", "key of --cert (ETCDCTL_KEY)")
	fs.BoolVar(&c.insecureSkip, "insecure-skip-tls-verify", false, "do not verify the members' certificates (ETCDCTL_INSECURE_SKIP_TLS_VERIFY)")
	fs.StringVar(&c.user, "user", "", "user name[:password] when auth is on (ETCDCTL_USER)")
	fs.StringVar(&c.password, "password", "", "password of --user, if not after its colon (ETCDCTL_PASSWORD)")
}

// connFromEnv fills every connection flag of fs not given on the command
// line from ETCDCTL_<FLAG>, as etcdctl does; a flag given wins.
func connFromEnv(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	for _, name := range connFlagNames {
		env := "ETCDCTL_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && v != "" && !given[name] {
			if err := fs.Set(name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", env, v, err))
			}
		}
	}
	return errors.Join(errs...)
}

// check validates the flags that can be wrong without a cluster.
func (c *connFlags) check() error {
	if len(splitURLs(c.endpoints)) == 0 {
		return errors.New("--endpoints is empty")
	}
	if c.dialTimeout <= 0 || c.commandTimeout <= 0 {
		return fmt.Errorf("--dial-timeout (%v) and --command-timeout (%v) must be positive", c.dialTimeout, c.commandTimeout)
	}
	if (c.cert == "") != (c.key == "") {
		return errors.New("--cert and --key go together")
	}
	if _, _, err := c.credentials(); err != nil {
		return err
	}
	return nil
}

// credentials is the user and password, from --user name:password or
// --user name with --password, as etcdctl takes them.
func (c *connFlags) credentials() (user, password string, err error) {
	if c.user == "" {
		if c.password != "" {
			return "", "", errors.New("--password needs --user")
		}
		return "", "", nil
	}
	user, password, colon := strings.Cut(c.user, ":")
	switch {
	case user == "":
		return "", "", fmt.Errorf("--user %q has no name", c.user)
	case colon && c.password != "":
		return "", "", errors.New("give the password after --user's colon or with --password, not both")
	case !colon:
		password = c.password
	}
	if password == "" {
		// etcdctl would prompt on a terminal; a supervisor usually has none.
		return "", "", fmt.Errorf("--user %s has no password: give --user %s:PASSWORD, --password or ETCDCTL_PASSWORD", user, user)
	}
	return user, password, nil
}

// tls is the client's TLS configuration: nil for plain endpoints without
// TLS flags, as etcdctl.
func (c *connFlags) tls() (*tls.Config, error) {
	https := false
	for _, ep := range splitURLs(c.endpoints) {
		https = https || strings.HasPrefix(ep, "https://")
	}
	if !https && c.cacert == "" && c.cert == "" && !c.insecureSkip {
		return nil, nil
	}
	info := transport.TLSInfo{CertFile: c.cert, KeyFile: c.key, TrustedCAFile: c.cacert, InsecureSkipVerify: c.insecureSkip}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("TLS (--cacert, --cert, --key): %w", err)
	}
	return cfg, nil
}

// errNoMember is the one-line cause when no endpoint answered in time.
var errNoMember = errors.New("no member answered")

// client connects to the cluster and returns once a member has answered,
// or with an error that says in one line why none did within the dial
// timeout (connection refused, a certificate that does not verify, a
// wrong password).
func (c *connFlags) client() (*clientv3.Client, error) {
	user, password, err := c.credentials()
	if err != nil {
		return nil, err
	}
	tlsCfg, err := c.tls()
	if err != nil {
		return nil, err
	}
	eps := splitURLs(c.endpoints)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: c.dialTimeout,
		TLS:         tlsCfg,
		Username:    user,
		Password:    password,
		Logger:      zap.NewNop(),
		// Block until a connection is up, and say why none came up: the
		// dial is what tells "nobody there" from a slow cluster.
		DialOptions: []grpc.DialOption{grpc.WithBlock(), grpc.WithReturnConnectionError()}, //nolint:staticcheck // still the way to get the reason
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "context deadline exceeded") {
			return nil, fmt.Errorf("%w at %s within %v (--dial-timeout): %s", errNoMember, strings.Join(eps, ","), c.dialTimeout, lastReason(err))
		}
		return nil, fmt.Errorf("connect to %s: %w", strings.Join(eps, ","), err)
	}
	return cli, nil
}

// lastReason is the part of a dial error after gRPC's wrapping, on one line.
func lastReason(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, "desc = "); i >= 0 {
		s = strings.Trim(s[i+len("desc = "):], `"`)
	}
	return strings.Join(strings.Fields(s), " ")
}

// parseCommandLine parses fs's flags, which may come anywhere before "--",
// and returns the other arguments before "--" and the command after it.
// Parse errors are returned, not printed.
func parseCommandLine(fs *flag.FlagSet, args []string) (positional, command []string, err error) {
	fs.SetOutput(io.Discard)
	rest := args
	if i := slices.Index(args, "--"); i >= 0 {
		rest, command = args[:i], args[i+1:]
	}
	for {
		if err := fs.Parse(rest); err != nil {
			return nil, nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		positional, rest = append(positional, fs.Arg(0)), fs.Args()[1:]
	}
	if err := connFromEnv(fs); err != nil {
		return nil, nil, err
	}
	return positional, command, nil
}

// printUsage prints synopsis and fs's flags to stdout, for -h.
func printUsage(fs *flag.FlagSet, synopsis string) {
	fs.SetOutput(os.Stdout)
	fmt.Println("Usage: " + synopsis)
	fmt.Println("\nFlags (etcdctl's connection flags also come from ETCDCTL_<FLAG>, e.g. ETCDCTL_ENDPOINTS; a flag given wins):")
	fs.PrintDefaults()
}

// checkAccess reads prefix once, linearizably, within timeout: it tells at
// once, in one line, a cluster without quorum or a user without permission
// to read what the command is about to use, rather than hanging later.
func checkAccess(cli *clientv3.Client, prefix string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("the cluster did not answer a read of %s within %v (--command-timeout): no quorum?", prefix, timeout)
		}
		return fmt.Errorf("read %s: %w", prefix, err)
	}
	return nil
}
