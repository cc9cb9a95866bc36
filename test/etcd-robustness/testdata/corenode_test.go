// This file is not part of corenode's module. scripts/etcd-robustness adds
// it to etcd's robustness package (go.etcd.io/etcd/tests/v3/robustness, the
// release the script names) with `go test -overlay`, and runs only the test
// below. It drives etcd's own harness — runScenario, the traffic, the
// failpoints, validate.ValidateAndReturnVisualize — and changes these
// things:
//
//   - Which runs. etcd's TestRobustnessExploratory draws one failpoint per
//     scenario at random, most of them gofail's (compiled into etcd's
//     failpoint build only). Here every scenario runs with every failpoint
//     that acts on the process or the network (nonGofail below) and that
//     etcd's own Available check allows for it, plus the regression
//     scenarios that need no gofail. The gofail HTTP port is not configured.
//     BlackholeUntilSnapshot cuts a follower (followerBlackholeUntilSnapshot).
//   - Where the persisted requests come from. etcd's harness reads them from
//     the members' WAL files (report/wal.go). corenode's raft log is another
//     format in another place, so persistedFromClients rebuilds the list from
//     what the clients saw. On etcd (CORENODE_ROBUSTNESS_SYSTEM=etcd) the
//     WAL's list is read as well, and the run fails if the two lists replay
//     to different events.
//   - After a failpoint, every member's gRPC health must say SERVING within
//     servingBound before etcd's single check (awaitServing).
//   - Beside etcd's traffic runs the lease-expiry workload of leases_test.go
//     (short-TTL leases left to expire, checked by jepsen-lite's lease
//     checker), whose writes and expiries join the clients' reports so
//     that etcd's checks explain every revision (runScenarioWithLeases).
//   - What it reports: one JSON line per run (scenario, failpoint, seed, the
//     cluster options drawn, operations and watch events checked, how long
//     until every member said SERVING, pass or fail) to
//     $CORENODE_ROBUSTNESS_RESULTS, and the goroutines of members not
//     SERVING in time to $CORENODE_ROBUSTNESS_DUMPS.
//
// Environment: CORENODE_ROBUSTNESS_PLAN (full or short), _SEED (the base
// seed), _DURATION (repeat the full plan with new seeds until this much time
// has passed), _RUN (a regexp on run names), _SYSTEM (etcd or corenode),
// _RESULTS (the JSON lines file), _BASE_PORT (the first of the members'
// ports, 61100 unless set; etcd's harness uses 20000), _LEASECHECK (the
// lease checker's binary, required), _LEASES (where the lease histories
// go; a temp dir unless set).

package robustness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	clientv3 "go.etcd.io/etcd/client/v3"

	"go.etcd.io/etcd/tests/v3/framework/e2e"
	"go.etcd.io/etcd/tests/v3/robustness/failpoint"
	"go.etcd.io/etcd/tests/v3/robustness/identity"
	"go.etcd.io/etcd/tests/v3/robustness/model"
	"go.etcd.io/etcd/tests/v3/robustness/options"
	"go.etcd.io/etcd/tests/v3/robustness/report"
	"go.etcd.io/etcd/tests/v3/robustness/scenarios"
	"go.etcd.io/etcd/tests/v3/robustness/traffic"
	"go.etcd.io/etcd/tests/v3/robustness/validate"
)

// nonGofail are the failpoints that need nothing compiled into the binary:
// SIGKILL and restart, the peer proxy's blackhole (for a second, or until the
// member is far enough behind to need a snapshot), delay and drop, and
// removing a member, wiping its data and adding it back. MemberDowngrade and
// MemberDowngradeUpgrade need etcd's last release beside the binary and are
// not run.
var nonGofail = []failpoint.Failpoint{
	failpoint.KillFailpoint,
	failpoint.BlackholePeerNetwork,
	followerBlackholeUntilSnapshot{},
	failpoint.DelayPeerNetwork,
	failpoint.DropPeerNetwork,
	failpoint.MemberReplace,
}

func isNonGofail(fp failpoint.Failpoint) bool {
	for _, f := range nonGofail {
		if f == fp {
			return true
		}
	}
	return false
}

// followerBlackholeUntilSnapshot is etcd's BlackholeUntilSnapshot with the
// member picked among the followers. The peer proxy sits in front of each
// member's peer listener, so it black-holes the connections others dial to
// that member. etcd's members receive raft messages on streams they dial
// themselves, so a black-holed leader is cut off too; corenode's (as
// hashicorp/raft's) leader dials its followers, its raft traffic flows
// through their proxies, and it never falls behind: picked as the member to
// cut (a third of the time), the failpoint waited for a lag that never came
// until its minute ran out. A follower is cut off on both systems.
type followerBlackholeUntilSnapshot struct{}

func (followerBlackholeUntilSnapshot) Inject(ctx context.Context, t *testing.T, lg *zap.Logger, clus *e2e.EtcdProcessCluster, baseTime time.Time, ids identity.Provider) ([]report.ClientReport, error) {
	leader := clus.WaitLeader(t)
	i := rand.Intn(len(clus.Procs) - 1)
	if i >= leader {
		i++
	}
	return nil, failpoint.Blackhole(ctx, t, clus.Procs[i], clus, true)
}

func (followerBlackholeUntilSnapshot) Name() string { return "blackholeFollowerUntilSnapshot" }

func (followerBlackholeUntilSnapshot) Available(cfg e2e.EtcdProcessClusterConfig, p e2e.EtcdProcess, profile traffic.Profile) bool {
	return failpoint.BlackholeUntilSnapshot.Available(cfg, p, profile)
}

// servingBound is how long after a failpoint ends every member must say
// SERVING on grpc.health.v1. Most runs take under 1.2 s; the slowest seen,
// 5.04-5.25 s, had a follower cut until it needed a snapshot, whose
// leader's replicator sat in a raft connection's TLS handshake begun
// during the cut until it failed 5 s later (a raft dial was then bounded
// by the transport's 10 s I/O timeout; now by 1 s plus the election
// timeout, as etcd's peer dials), and after failures in a row
// hashicorp/raft waits up to 10.24 s more before it retries (failureWait
// 10 ms doubling to maxFailureScale 12). The bound leaves room for both
// and the catch-up on a slow machine.
const servingBound = 15 * time.Second

// awaitServing runs a failpoint, then waits until every member's gRPC
// health says SERVING, for at most servingBound, before etcd's harness asks
// once (verifyClusterHealth). etcd's health is SERVING whenever the server
// runs; corenode's is SERVING when the member would serve a linearizable
// read (a leader holds a quorum, and this member reaches it), which after a
// network fault takes a moment (about 0.1 s after a blackhole). On etcd it
// waits for nothing.
type awaitServing struct {
	failpoint.Failpoint
	waited *time.Duration
}

func (f awaitServing) Inject(ctx context.Context, t *testing.T, lg *zap.Logger, clus *e2e.EtcdProcessCluster, baseTime time.Time, ids identity.Provider) ([]report.ClientReport, error) {
	r, err := f.Failpoint.Inject(ctx, t, lg, clus, baseTime, ids)
	if err != nil {
		return r, err
	}
	start := time.Now()
	for _, p := range clus.Procs {
		for {
			status, err := healthOf(ctx, p)
			if err == nil && status == healthpb.HealthCheckResponse_SERVING {
				break
			}
			if time.Since(start) > servingBound {
				dumpGoroutines(t, clus)
				return r, fmt.Errorf("member %s not SERVING %v after the failpoint ended: %v %v", p.Config().Name, servingBound, status, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	*f.waited = time.Since(start)
	return r, nil
}

// dumpGoroutines saves every member's goroutines (corenode serves them on
// its client URL with --enable-pprof, which the script's wrapper adds) in
// $CORENODE_ROBUSTNESS_DUMPS, when set.
func dumpGoroutines(t *testing.T, clus *e2e.EtcdProcessCluster) {
	dir := os.Getenv("CORENODE_ROBUSTNESS_DUMPS")
	if dir == "" {
		return
	}
	for _, p := range clus.Procs {
		resp, err := http.Get(p.Config().ClientURL + "/debug/pprof/goroutine?debug=2")
		if err != nil {
			t.Logf("goroutines of %s: %v", p.Config().Name, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		path := filepath.Join(dir, p.Config().Name+".goroutines")
		if err := os.WriteFile(path, body, 0o644); err == nil {
			t.Logf("goroutines of %s in %s", p.Config().Name, path)
		}
	}
}

func healthOf(ctx context.Context, p e2e.EtcdProcess) (healthpb.HealthCheckResponse_ServingStatus, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: p.EndpointsGRPC(), Logger: zap.NewNop(), DialTimeout: time.Second})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(c.ActiveConnection()).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return 0, err
	}
	return resp.Status, nil
}

// shortPlan is --short: every failpoint once, both traffic profiles, 1 and
// 3 members: one member killed under leases and progress notifications and
// under kubernetes traffic, then in 3-member clusters a follower cut until
// it needs a snapshot, a kill, a member cut for a second, a lossy link, a
// slow link and a member replaced.
var shortPlan = []string{
	"Issue15220/Kill",
	"KubernetesHighTraffic/ClusterOfSize1/Kill",
	"Issue15271/blackholeFollowerUntilSnapshot",
	"EtcdTrafficDeleteLeases/ClusterOfSize3/Kill",
	"EtcdHighTraffic/ClusterOfSize3/blackholePeerNetwork",
	"KubernetesHighTraffic/ClusterOfSize3/dropPeerNetwork",
	"KubernetesLowTraffic/ClusterOfSize3/delayPeerNetwork",
	"KubernetesLowTraffic/ClusterOfSize3/MemberReplace",
}

type plannedRun struct {
	regression bool
	scenario   string
	failpoint  failpoint.Failpoint
}

func (p plannedRun) name() string { return p.scenario + "/" + failpointName(p.failpoint) }

func failpointName(fp failpoint.Failpoint) string { return fp.Name() }

type runResult struct {
	Round      int    `json:"round"`
	Run        string `json:"run"`
	Seed       int64  `json:"seed"`
	Members    int    `json:"members"`
	Options    string `json:"options"`
	Operations int    `json:"operations"`
	Events     int    `json:"events"`
	// ServingAfter is how long after the failpoint ended every member said
	// SERVING (awaitServing).
	ServingAfter float64 `json:"serving_after"`
	// The lease-expiry workload (leases_test.go): leases checked, seen
	// gone after a new term began in their life, anomalies that fail the
	// run, and on etcd the leases that outlived the bound (its known
	// behaviour after a leader change).
	Leases          int     `json:"leases"`
	LeasesNewTerm   int     `json:"leases_new_term"`
	LeaseViolations int     `json:"lease_violations"`
	LeasesKnown     int     `json:"leases_known"`
	Passed          bool    `json:"passed"`
	Seconds         float64 `json:"seconds"`
}

func TestCorenodeRobustness(t *testing.T) {
	testRunner.BeforeTest(t)
	system := os.Getenv("CORENODE_ROBUSTNESS_SYSTEM")
	baseSeed := time.Now().UnixNano() % 1_000_000_000
	if s := os.Getenv("CORENODE_ROBUSTNESS_SEED"); s != "" {
		var err error
		baseSeed, err = strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
	}
	var duration time.Duration
	if d := os.Getenv("CORENODE_ROBUSTNESS_DURATION"); d != "" {
		var err error
		duration, err = time.ParseDuration(d)
		require.NoError(t, err)
	}
	var filter *regexp.Regexp
	if f := os.Getenv("CORENODE_ROBUSTNESS_RUN"); f != "" {
		filter = regexp.MustCompile(f)
	}
	var results *os.File
	if path := os.Getenv("CORENODE_ROBUSTNESS_RESULTS"); path != "" {
		var err error
		results, err = os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		require.NoError(t, err)
		defer results.Close()
	}

	plan := fullPlan(t)
	if os.Getenv("CORENODE_ROBUSTNESS_PLAN") == "short" {
		byName := map[string]plannedRun{}
		for _, p := range plan {
			byName[p.name()] = p
		}
		plan = nil
		for _, n := range shortPlan {
			p, ok := byName[n]
			require.Truef(t, ok, "the short plan names %s, which the full plan lacks", n)
			plan = append(plan, p)
		}
	}
	if filter != nil {
		var kept []plannedRun
		for _, p := range plan {
			if filter.MatchString(p.name()) {
				kept = append(kept, p)
			}
		}
		plan = kept
	}
	require.NotEmpty(t, plan, "no run planned")
	t.Logf("base seed %d, %d runs a round", baseSeed, len(plan))

	start := time.Now()
	for round := 1; ; round++ {
		for i, p := range plan {
			seed := baseSeed + int64(round-1)*100_000 + int64(i)*1000
			s, seed, ok := drawScenario(t, p, seed)
			if !ok {
				t.Errorf("%s: no draw of the cluster options in 50 makes %s available", p.scenario, failpointName(p.failpoint))
				continue
			}
			res := runResult{Round: round, Run: p.name(), Seed: seed, Members: s.Cluster.ClusterSize, Options: describeOptions(s.Cluster)}
			began := time.Now()
			res.Passed = t.Run(fmt.Sprintf("r%d/%s", round, p.name()), func(t *testing.T) {
				t.Logf("seed %d, %s", seed, res.Options)
				runOne(t, s, system, &res)
			})
			res.Seconds = time.Since(began).Seconds()
			if results != nil {
				line, _ := json.Marshal(res)
				fmt.Fprintf(results, "%s\n", line)
			}
		}
		if duration == 0 || time.Since(start) >= duration {
			return
		}
	}
}

// fullPlan is every exploratory scenario with every failpoint of nonGofail
// its cluster can take, then the regression scenarios that need no gofail.
func fullPlan(t *testing.T) []plannedRun {
	var plan []plannedRun
	for _, s := range scenarios.Exploratory(t) {
		for _, fp := range nonGofail {
			if availableFor(s, fp, true) {
				plan = append(plan, plannedRun{scenario: s.Name, failpoint: fp})
			}
		}
	}
	for _, s := range scenarios.Regression(t) {
		fp := ours(s.Failpoint)
		if s.Cluster.GoFailEnabled || !isNonGofail(fp) {
			continue
		}
		plan = append(plan, plannedRun{regression: true, scenario: s.Name, failpoint: fp})
	}
	return plan
}

// ours is the failpoint a regression scenario names, or the one of
// nonGofail that stands for it.
func ours(fp failpoint.Failpoint) failpoint.Failpoint {
	if fp == failpoint.BlackholeUntilSnapshot {
		return followerBlackholeUntilSnapshot{}
	}
	return fp
}

// availableFor is etcd's Available rule of each failpoint of nonGofail on the
// scenario's configuration, without starting a cluster. With anyDraw, the
// snapshot rule of BlackholeUntilSnapshot (snapshot count plus catch-up
// entries at most 200) is left to the draw of the options.
func availableFor(s scenarios.TestScenario, fp failpoint.Failpoint, anyDraw bool) bool {
	cfg := s.Cluster
	switch fp {
	case failpoint.KillFailpoint:
		return true
	case failpoint.MemberReplace:
		return cfg.ClusterSize > 1
	case followerBlackholeUntilSnapshot{}:
		if !anyDraw && cfg.ServerConfig.SnapshotCount+cfg.ServerConfig.SnapshotCatchUpEntries > 200 {
			return false
		}
		return cfg.ClusterSize > 1 && cfg.PeerProxy
	default:
		return cfg.ClusterSize > 1 && cfg.PeerProxy
	}
}

// drawScenario seeds math/rand and the options package, and draws the
// scenario's cluster options, again with the next seed while they leave the
// failpoint unavailable.
func drawScenario(t *testing.T, p plannedRun, seed int64) (scenarios.TestScenario, int64, bool) {
	for attempt := 0; attempt < 50; attempt, seed = attempt+1, seed+1 {
		//nolint:staticcheck // rand.Seed acts with GODEBUG=randseednop=0, which the script sets
		rand.Seed(seed)
		options.SeedForCorenode(seed)
		list := scenarios.Exploratory(t)
		if p.regression {
			list = scenarios.Regression(t)
		}
		for _, s := range list {
			if s.Name != p.scenario {
				continue
			}
			if !availableFor(s, p.failpoint, false) {
				break
			}
			s.Failpoint = p.failpoint
			s.Cluster.GoFailEnabled = false
			return s, seed, true
		}
	}
	return scenarios.TestScenario{}, seed, false
}

func describeOptions(c e2e.EtcdProcessClusterConfig) string {
	sc := c.ServerConfig
	return fmt.Sprintf("tick %dms, election %dms, snapshot-count %d, snapshot-catchup-entries %d, compaction-batch-limit %d, peer-tls %v, peer-proxy %v",
		sc.TickMs, sc.ElectionMs, sc.SnapshotCount, sc.SnapshotCatchUpEntries, sc.ExperimentalCompactionBatchLimit, c.IsPeerTLS, c.PeerProxy)
}

// runOne is testRobustness with the persisted requests of persistedFromClients
// and the lease-expiry workload beside the traffic (leases_test.go).
func runOne(t *testing.T, s scenarios.TestScenario, system string, res *runResult) {
	ctx := context.Background()
	lg := zaptest.NewLogger(t)
	s.Cluster.Logger = lg
	// Not etcd's 20000, which etcd's e2e suite (scripts/etcd-e2e) uses, nor
	// within 10000-32767, where corenode's tests pick ports
	// (internal/freeport), nor among the kernel's ephemeral ports: the
	// suites run side by side on one machine, and a client of another test
	// once wrote into a cluster of this one.
	s.Cluster.BasePort = 61100
	if p := os.Getenv("CORENODE_ROBUSTNESS_BASE_PORT"); p != "" {
		port, err := strconv.Atoi(p)
		require.NoError(t, err)
		s.Cluster.BasePort = port
	}
	c, err := e2e.InitEtcdProcessCluster(t, &s.Cluster)
	require.NoError(t, err)
	c, err = e2e.StartEtcdProcessCluster(ctx, t, c, &s.Cluster)
	require.NoError(t, err)
	defer forcestopCluster(c)
	require.NoError(t, failpoint.Validate(c, s.Failpoint, s.Profile))
	var waited time.Duration
	s.Failpoint = awaitServing{Failpoint: s.Failpoint, waited: &waited}
	defer func() { res.ServingAfter = waited.Seconds() }()

	r := report.TestReport{Logger: lg, Cluster: c}
	panicked := true
	defer func() {
		r.Report(t, panicked)
	}()
	var upTo int64
	var leaseHistory func() []leaseRecord
	r.Client, upTo, leaseHistory = runScenarioWithLeases(ctx, t, s, lg, c)
	// The lease-expiry workload's last leases run out while etcd's checks
	// run; its own check comes last, whatever they found.
	defer func() {
		lr, err := checkLeases(t, leaseHistory(), system)
		if err != nil {
			t.Errorf("lease expiry: %v", err)
			return
		}
		res.Leases, res.LeasesNewTerm, res.LeaseViolations, res.LeasesKnown = lr.Leases, lr.NewTerm, len(lr.Violations), len(lr.Known)
		for _, v := range lr.Violations {
			t.Errorf("lease expiry: %s", v)
		}
		if lr.Gone == 0 {
			t.Errorf("lease expiry: no lease seen gone (%d granted): the workload checked nothing", lr.Leases)
		}
	}()
	for _, cr := range r.Client {
		res.Operations += len(cr.KeyValue)
		res.Events += cr.WatchEventCount()
	}
	persisted, guessed, err := persistedFromClients(r.Client)
	require.NoError(t, err, "rebuilding the persisted requests from the clients' view")
	if len(guessed) > 0 {
		t.Logf("revisions no watcher and no read saw, their writes placed in call order: %v", guessed)
	}
	if system == "etcd" {
		fromWAL, err := report.PersistedRequestsCluster(lg, c)
		require.NoError(t, err)
		// The WAL goes on past upTo (the lease-expiry workload's last
		// puts and expiries), where no check of etcd's looked.
		if diff := cmp.Diff(eventsBut(eventsUpTo(model.NewReplay(fromWAL).Events, upTo), guessed), eventsBut(model.NewReplay(persisted).Events, guessed)); diff != "" {
			t.Errorf("the requests rebuilt from the clients' view replay to other events than etcd's WAL (-WAL +clients):\n%s", diff)
		}
	}
	validateConfig := validate.Config{ExpectRevisionUnique: s.Traffic.ExpectUniqueRevision()}
	visualize := validate.ValidateAndReturnVisualize(t, lg, validateConfig, r.Client, persisted, 5*time.Minute)
	// porcupine's visualization panics on an operation that returns before
	// its call, which would end every run after this one.
	r.Visualize = func(path string) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("history.html not written: the visualization panicked: %v", p)
			}
		}()
		return visualize(path)
	}
	panicked = false
}

// eventsUpTo is events up to revision upTo.
func eventsUpTo(events []model.PersistedEvent, upTo int64) []model.PersistedEvent {
	var out []model.PersistedEvent
	for _, e := range events {
		if e.Revision <= upTo {
			out = append(out, e)
		}
	}
	return out
}

// eventsBut is events less those of the revisions in skip.
func eventsBut(events []model.PersistedEvent, skip map[int64]bool) []model.PersistedEvent {
	var out []model.PersistedEvent
	for _, e := range events {
		if !skip[e.Revision] {
			out = append(out, e)
		}
	}
	return out
}

type candidate struct {
	op   porcupine.Operation
	used bool
}

func (c *candidate) request() model.EtcdRequest        { return c.op.Input.(model.EtcdRequest) }
func (c *candidate) response() model.MaybeEtcdResponse { return c.op.Output.(model.MaybeEtcdResponse) }

type eventKey struct {
	typ   model.OperationType
	key   string
	value model.ValueOrHash
}

// persistedFromClients rebuilds, from the clients' operations and watch
// events, the list of requests the cluster persisted, in their order, as
// etcd's harness reads it from the WAL. Revision by revision (from 2, the
// first write, to the highest any response or event names):
//
//  1. the write that made the revision: a write whose response names it and
//     which, replayed on the model at the revision before, makes it with the
//     very response the client got and the events the watchers saw at that
//     revision (a revoke of a lease answered at a revision may make it on the
//     model too, deleting keys, where the real one deleted none after a put
//     made it); failing that, a write whose outcome its client does not know
//     (an error or a timeout) which, replayed there, makes it with exactly
//     the events the watchers saw, or, where no watcher saw the revision,
//     with the values reads saw written at it; where nothing saw it, the
//     first such write by call time (a guess: the revisions are returned,
//     and on etcd left out of the comparison with the WAL);
//  2. then every other request answered at that revision (writes that
//     changed nothing: a failed compare without writes, a delete of nothing,
//     a lease granted or revoked without keys), each checked to leave the
//     revision as it is and to give the response its client got;
//  3. then the compactions of that revision.
//
// A write whose outcome is unknown and which changed no revision is left out
// (etcd's WAL has it; no check depends on it), as are lease grants that
// failed (the client never learnt their ID), and txns answered without
// error that wrote nothing (a failed comparison whose other branch only
// reads), but for the first and last write, which etcd's harness requires
// in the list. Such a txn changes no state, and etcd's patch of the history
// (validate.putReturnTime) takes the puts of a persisted txn's success
// branch as written even when its comparison failed: the kubernetes
// profile's compaction txn, sent again after an error whose first copy had
// applied, then failed its comparison, pulled the patched return time of
// every request persisted before it back to when the first copy was seen,
// earlier than some of their calls; porcupine then answered "Illegal" for
// a history that is linearizable (found on corenode, and etcd's own WAL
// would list both copies the same way). It fails if a revision has no
// write that explains it, or if a write answered successfully finds no place.
func persistedFromClients(reports []report.ClientReport) (persisted []model.EtcdRequest, guessed map[int64]bool, err error) {
	guessed = map[int64]bool{}
	answered := map[int64][]*candidate{}
	compactions := map[int64][]*candidate{}
	var unknown []*candidate
	maxRev := int64(1)
	for _, r := range reports {
		for _, op := range r.KeyValue {
			req := op.Input.(model.EtcdRequest)
			resp := op.Output.(model.MaybeEtcdResponse)
			if req.IsRead() || req.Type == model.Defragment {
				continue
			}
			c := &candidate{op: op}
			switch {
			case resp.Error != "":
				if req.Type == model.Txn || req.Type == model.LeaseRevoke {
					unknown = append(unknown, c)
				}
			case req.Type == model.Compact:
				rev := max(req.Compact.Revision, 1)
				compactions[rev] = append(compactions[rev], c)
			default:
				rev := max(resp.Revision, 1)
				answered[rev] = append(answered[rev], c)
				maxRev = max(maxRev, rev)
			}
		}
	}
	// The first and the last write answered without error, by call time,
	// which etcd's harness requires in the list.
	var first, last *candidate
	for _, cs := range answered {
		for _, c := range cs {
			if first == nil || c.op.Call < first.op.Call {
				first = c
			}
			if last == nil || c.op.Call > last.op.Call {
				last = c
			}
		}
	}
	for _, cs := range compactions {
		for _, c := range cs {
			if first == nil || c.op.Call < first.op.Call {
				first = c
			}
			if last == nil || c.op.Call > last.op.Call {
				last = c
			}
		}
	}
	byCall := func(cs []*candidate) {
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].op.Call < cs[j].op.Call })
	}
	byCall(unknown)
	for _, cs := range answered {
		byCall(cs)
	}
	for _, cs := range compactions {
		byCall(cs)
	}
	// The events of each revision, as the first watcher that saw it saw them.
	events := map[int64]map[eventKey]bool{}
	for _, r := range reports {
		for _, w := range r.Watch {
			seen := map[int64]map[eventKey]bool{}
			for _, resp := range w.Responses {
				for _, e := range resp.Events {
					if seen[e.Revision] == nil {
						seen[e.Revision] = map[eventKey]bool{}
					}
					seen[e.Revision][eventKey{e.Type, e.Key, e.Value}] = true
				}
			}
			for rev, evs := range seen {
				if _, ok := events[rev]; !ok {
					events[rev] = evs
				}
				maxRev = max(maxRev, rev)
			}
		}
	}

	// What reads saw: a key's value and the revision that wrote it. Where no
	// watcher saw a revision (a watcher resumes after a member's restart
	// from the revision a progress notification named, so it may skip some),
	// these name at least part of what it wrote.
	readPuts := map[int64]map[eventKey]bool{}
	noteKVs := func(kvs []model.KeyValue) {
		for _, kv := range kvs {
			if readPuts[kv.ModRevision] == nil {
				readPuts[kv.ModRevision] = map[eventKey]bool{}
			}
			readPuts[kv.ModRevision][eventKey{model.PutOperation, kv.Key, kv.Value}] = true
		}
	}
	for _, r := range reports {
		for _, op := range r.KeyValue {
			resp := op.Output.(model.MaybeEtcdResponse)
			if resp.Error != "" {
				continue
			}
			if resp.Range != nil {
				noteKVs(resp.Range.KVs)
			}
			if resp.Txn != nil {
				for _, res := range resp.Txn.Results {
					noteKVs(res.KVs)
				}
			}
		}
	}

	state, err := model.NewReplay(nil).StateForRevision(1)
	if err != nil {
		return nil, guessed, err
	}
	place := func(c *candidate, next model.EtcdState) {
		c.used = true
		state = next
		persisted = append(persisted, c.request())
	}
	settle := func(rev int64) error {
		for _, c := range answered[rev] {
			if c.used {
				continue
			}
			next, resp := state.Step(c.request())
			if next.Revision != state.Revision {
				return fmt.Errorf("revision %d: %s, answered at revision %d, would make revision %d", rev, describe(c), rev, next.Revision)
			}
			if !model.Match(c.response(), resp) {
				return fmt.Errorf("revision %d: %s was answered %+v, the model answers %+v", rev, describe(c), c.response().EtcdResponse, resp.EtcdResponse)
			}
			if c.request().Type == model.Txn && c != first && c != last {
				// A txn that wrote nothing changed nothing; see above.
				c.used = true
				continue
			}
			place(c, next)
		}
		for _, c := range compactions[rev] {
			next, _ := state.Step(c.request())
			place(c, next)
		}
		return nil
	}
	if err := settle(1); err != nil {
		return nil, guessed, err
	}
	for rev := int64(2); rev <= maxRev; rev++ {
		placed := false
		want, seen := events[rev]
		for _, c := range answered[rev] {
			if c.used {
				continue
			}
			next, resp := state.Step(c.request())
			if next.Revision == rev && model.Match(c.response(), resp) && (!seen || sameEvents(eventsBetween(state, next), want)) {
				place(c, next)
				placed = true
				break
			}
		}
		if !placed {
			for _, c := range unknown {
				if c.used {
					continue
				}
				next, _ := state.Step(c.request())
				if next.Revision != rev {
					continue
				}
				got := eventsBetween(state, next)
				if seen && sameEvents(got, want) || !seen && containsEvents(got, readPuts[rev]) {
					place(c, next)
					placed = true
					if !seen && len(readPuts[rev]) == 0 {
						guessed[rev] = true
					}
					break
				}
			}
			if !placed {
				return nil, guessed, fmt.Errorf("revision %d: no request explains it (answered at it: %d; watch events: %v; read: %v)", rev, len(answered[rev]), want, readPuts[rev])
			}
		}
		if err := settle(rev); err != nil {
			return nil, guessed, err
		}
	}
	for rev, cs := range answered {
		for _, c := range cs {
			if !c.used {
				return nil, guessed, fmt.Errorf("%s was answered at revision %d and finds no place in the history", describe(c), rev)
			}
		}
	}
	return persisted, guessed, nil
}

// eventsBetween is what a watcher of every key sees when state becomes next.
func eventsBetween(state, next model.EtcdState) map[eventKey]bool {
	evs := map[eventKey]bool{}
	for k, v := range next.KeyValues {
		if v.ModRevision == next.Revision && next.Revision != state.Revision {
			evs[eventKey{model.PutOperation, k, v.Value}] = true
		}
	}
	for k := range state.KeyValues {
		if _, ok := next.KeyValues[k]; !ok {
			evs[eventKey{model.DeleteOperation, k, model.ValueOrHash{}}] = true
		}
	}
	return evs
}

// containsEvents reports whether a holds every event of b.
func containsEvents(a, b map[eventKey]bool) bool {
	for k := range b {
		if !a[k] {
			return false
		}
	}
	return true
}

func sameEvents(a, b map[eventKey]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func describe(c *candidate) string {
	data, _ := json.Marshal(c.request())
	return fmt.Sprintf("client %d's request %s (called at %v)", c.op.ClientId, data, time.Duration(c.op.Call))
}
