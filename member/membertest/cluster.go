package membertest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/corenode/corenode/internal/freeport"
	"github.com/corenode/corenode/member"
)

// Cluster is a set of in-process members.
type Cluster struct {
	t       testing.TB
	Members []*member.Member
	cfgs    []member.Config
	peers   []string
	clients []string
	// lns are the listeners of members Prepare made and Start has not
	// started yet, by index (zero for the others).
	lns  []listeners
	opts options
}

type listeners struct{ peer, client net.Listener }

type options struct {
	scheme    string
	clientTLS member.TLSInfo
	peerTLS   member.TLSInfo
	dialTLS   *tls.Config
	configure func(i int, cfg *member.Config)
}

// Option changes how a test cluster is set up.
type Option func(*options)

// WithTLS serves https on client and peer ports with the given certificates;
// Client dials with dial.
func WithTLS(client, peer member.TLSInfo, dial *tls.Config) Option {
	return func(o *options) { o.scheme, o.clientTLS, o.peerTLS, o.dialTLS = "https", client, peer, dial }
}

// WithConfig edits each member's configuration before it starts. Several
// apply in the order given, each on what the ones before it left.
func WithConfig(f func(i int, cfg *member.Config)) Option {
	return func(o *options) {
		prev := o.configure
		o.configure = func(i int, cfg *member.Config) {
			if prev != nil {
				prev(i, cfg)
			}
			f(i, cfg)
		}
	}
}

// ElectionTimeout used by test clusters: short, so failover tests are quick,
// but long enough not to flap under -race on two cores.
const ElectionTimeout = 500 * time.Millisecond

// New starts an n-member cluster and waits for a leader.
func New(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	c := &Cluster{t: t, opts: options{scheme: "http"}}
	for _, o := range opts {
		o(&c.opts)
	}
	var parts []string
	peerLns := make([]net.Listener, n)
	clientLns := make([]net.Listener, n)
	for i := range n {
		peerLns[i] = listen(t)
		clientLns[i] = listen(t)
		peer := c.opts.scheme + "://" + peerLns[i].Addr().String()
		c.peers = append(c.peers, peer)
		c.clients = append(c.clients, c.opts.scheme+"://"+clientLns[i].Addr().String())
		parts = append(parts, fmt.Sprintf("m%d=%s", i, peer))
	}
	dir := t.TempDir()
	for i := range n {
		cfg := member.Config{
			Name:                     fmt.Sprintf("m%d", i),
			DataDir:                  filepath.Join(dir, fmt.Sprintf("m%d", i)),
			ListenClientURLs:         []string{c.clients[i]},
			AdvertiseClientURLs:      []string{c.clients[i]},
			ListenPeerURLs:           []string{c.peers[i]},
			InitialAdvertisePeerURLs: []string{c.peers[i]},
			InitialCluster:           strings.Join(parts, ","),
			InitialClusterState:      "new",
			ElectionTimeout:          ElectionTimeout,
			HeartbeatInterval:        50 * time.Millisecond,
			Logger:                   Logger(),
			RaftLog:                  raftLog(),
			ClientTLS:                c.opts.clientTLS,
			PeerTLS:                  c.opts.peerTLS,
		}
		if c.opts.configure != nil {
			c.opts.configure(i, &cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
		c.lns = append(c.lns, listeners{})
		cfg.PeerListener, cfg.ClientListeners = peerLns[i], []net.Listener{clientLns[i]}
		m, err := member.Start(cfg)
		if err != nil {
			t.Fatalf("start member %d: %v", i, err)
		}
		c.Members = append(c.Members, m)
	}
	t.Cleanup(c.Close)
	c.WaitLeader()
	return c
}

// Logger logs warnings and errors only, unless CORENODE_TEST_LOG=debug.
func Logger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("CORENODE_TEST_LOG") == "debug" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func raftLog() io.Writer {
	if os.Getenv("CORENODE_TEST_LOG") == "debug" {
		return os.Stderr
	}
	return io.Discard
}

// listen chooses a port outside the ephemeral range, where no outgoing
// connection can take it while a stopped member waits to Restart.
func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := freeport.Listen("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// Close stops every running member, the leader first so that it hands
// leadership to a member still running.
func (c *Cluster) Close() {
	for _, m := range c.Members {
		if m != nil && m.Node().IsLeader() {
			m.Close()
		}
	}
	for _, m := range c.Members {
		if m != nil {
			m.Close()
		}
	}
}

// Endpoint is member i's client address.
func (c *Cluster) Endpoint(i int) string {
	_, hp, _ := strings.Cut(c.clients[i], "://")
	return hp
}

// ClientURL is member i's client URL, with its scheme.
func (c *Cluster) ClientURL(i int) string { return c.clients[i] }

// Endpoints are all members' client addresses.
func (c *Cluster) Endpoints() []string {
	var out []string
	for i := range c.clients {
		out = append(out, c.Endpoint(i))
	}
	return out
}

// Client returns a client of the given members (all when none given),
// closed at cleanup.
func (c *Cluster) Client(members ...int) *clientv3.Client {
	c.t.Helper()
	eps := c.Endpoints()
	if len(members) > 0 {
		eps = nil
		for _, i := range members {
			eps = append(eps, c.Endpoint(i))
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: c.opts.dialTLS})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cli.Close() })
	return cli
}

// WaitLeader waits until the running members agree on a leader with a
// ready FSM and returns its index.
func (c *Cluster) WaitLeader() int {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		leader := -1
		agree := true
		for _, m := range c.Members {
			if m == nil {
				continue
			}
			id, _ := m.Node().Leader()
			if id == 0 {
				agree = false
				break
			}
			for j, o := range c.Members {
				if o != nil && o.ID() == id {
					if leader >= 0 && leader != j {
						agree = false
					}
					leader = j
				}
			}
		}
		if agree && leader >= 0 && c.Members[leader] != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := c.Members[leader].Node().ReadBarrier(ctx)
			cancel()
			if err == nil {
				return leader
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("no leader within 15s")
	return -1
}

// Join adds a member through MemberAdd, as an operator does with
// `etcdctl member add`, then starts it with --initial-cluster-state
// existing. It returns the new member's index.
func (c *Cluster) Join() int {
	c.t.Helper()
	i := c.Add(false)
	c.Start(i)
	return i
}

// Add adds a member through MemberAdd (as a learner when learner is set)
// and prepares its configuration to join, without starting it; Start
// starts it. It returns the new member's index.
func (c *Cluster) Add(learner bool) int {
	c.t.Helper()
	i := c.Prepare()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	add := c.Client().MemberAdd
	if learner {
		add = c.Client().MemberAddAsLearner
	}
	if _, err := add(ctx, []string{c.peers[i]}); err != nil {
		c.t.Fatalf("member add: %v", err)
	}
	return i
}

// Prepare makes the configuration of a new member that joins the cluster
// (--initial-cluster-state existing) with fresh listeners, and returns its
// index; nothing asks the cluster to add it.
func (c *Cluster) Prepare() int {
	c.t.Helper()
	i := len(c.Members)
	peerLn, clientLn := listen(c.t), listen(c.t)
	peer := c.opts.scheme + "://" + peerLn.Addr().String()
	client := c.opts.scheme + "://" + clientLn.Addr().String()
	cfg := c.cfgs[0]
	cfg.Name = fmt.Sprintf("m%d", i)
	cfg.DataDir = filepath.Join(filepath.Dir(cfg.DataDir), cfg.Name)
	cfg.ListenClientURLs, cfg.AdvertiseClientURLs = []string{client}, []string{client}
	cfg.ListenPeerURLs, cfg.InitialAdvertisePeerURLs = []string{peer}, []string{peer}
	cfg.InitialCluster += "," + cfg.Name + "=" + peer
	cfg.InitialClusterState = "existing"
	c.peers, c.clients, c.cfgs = append(c.peers, peer), append(c.clients, client), append(c.cfgs, cfg)
	c.Members = append(c.Members, nil)
	c.lns = append(c.lns, listeners{peer: peerLn, client: clientLn})
	return i
}

// Start starts member i, which Add or Prepare made, on the listeners
// they bound.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	cfg := c.cfgs[i]
	cfg.PeerListener, cfg.ClientListeners = c.lns[i].peer, []net.Listener{c.lns[i].client}
	m, err := member.Start(cfg)
	if err != nil {
		c.t.Fatalf("start joining member %d: %v", i, err)
	}
	c.Members[i] = m
}

// StartErr starts member i as Start does and returns the error it fails
// with, closing its listeners; nil when it starts.
func (c *Cluster) StartErr(i int) error {
	c.t.Helper()
	cfg := c.cfgs[i]
	cfg.PeerListener, cfg.ClientListeners = c.lns[i].peer, []net.Listener{c.lns[i].client}
	m, err := member.Start(cfg)
	if err == nil {
		c.Members[i] = m
	}
	return err
}

// Stop stops member i (gracefully: a leader hands over first).
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	if err := c.Members[i].Close(); err != nil {
		c.t.Logf("stop member %d: %v", i, err)
	}
	c.Members[i] = nil
}

// SetConfig replaces member i's configuration, as Start and Restart
// start it.
func (c *Cluster) SetConfig(i int, cfg member.Config) { c.cfgs[i] = cfg }

// Config is member i's configuration as Restart starts it, without
// listeners: a test that starts the member itself binds its own.
func (c *Cluster) Config(i int) member.Config { return c.cfgs[i] }

// Restart starts member i again on its data dir and addresses.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	cfg := c.cfgs[i]
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		var m *member.Member
		m, err = member.Start(cfg)
		if err == nil {
			c.Members[i] = m
			return
		}
		time.Sleep(100 * time.Millisecond) // the old listener may linger briefly
	}
	c.t.Fatalf("restart member %d: %v", i, err)
}

// Eventually waits up to timeout for cond to hold, checking it every few
// milliseconds, and fails the test with msg if it never does. It is for
// the few facts of a real cluster that no channel announces (a watcher
// gone after its client left, say); where a channel can say it happened,
// wait on the channel instead.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// CatchUp waits until every running member has applied what member from
// has applied. A test that saw a change through one member uses it before
// it asserts what the others' local state (alarms, serializable reads)
// says: a follower applies an entry only after it learns the entry is
// committed, so it may trail the member the test asked.
func (c *Cluster) CatchUp(from int) {
	c.t.Helper()
	index := c.Members[from].Node().FSM().Applied()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for i, m := range c.Members {
		if m == nil {
			continue
		}
		if err := m.Node().FSM().WaitApplied(ctx, index); err != nil {
			c.t.Fatalf("member %d catching up to index %d: %v", i, index, err)
		}
	}
}
