package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestCluster runs three corenode processes and drives them with etcdctl.
// The subtests share the cluster and run in order: each leaves the cluster
// healthy for the next, and the crash tests come last.
func TestCluster(t *testing.T) {
	requireEtcdctl(t)
	bin := buildBinary(t)
	begin := time.Now()
	c := startCluster(t, bin)
	t.Logf("3 members healthy %v after the first start", time.Since(begin).Round(time.Millisecond))
	eps := c.endpoints()

	t.Run("Health", func(t *testing.T) { testHealth(t, c, eps) })
	t.Run("PutGetDelete", func(t *testing.T) { testPutGetDelete(t, eps) })
	t.Run("Watch", func(t *testing.T) { testWatch(t, eps) })
	t.Run("Txn", func(t *testing.T) { testTxn(t, eps) })
	t.Run("Compaction", func(t *testing.T) { testCompaction(t, eps) })
	t.Run("MemberList", func(t *testing.T) { testMemberList(t, c, eps) })
	t.Run("EndpointStatus", func(t *testing.T) { testEndpointStatus(t, c, eps) })
	t.Run("MoveLeader", func(t *testing.T) { testMoveLeader(t, c, eps) })
	t.Run("MemberAddRemove", func(t *testing.T) { testMemberAddRemove(t, c) })
	t.Run("SnapshotSaveRestore", func(t *testing.T) { testSnapshotSaveRestore(t, c) })
	t.Run("SIGTERMHandsOver", func(t *testing.T) { testSIGTERMHandsOver(t, c) })
	t.Run("Failover", func(t *testing.T) { testFailover(t, c) })
	t.Run("LeaseExpiryWhileLeaderKilled", func(t *testing.T) { testLeaseExpiryWhileLeaderKilled(t, c) })
	t.Run("Durability", func(t *testing.T) {
		requireLogStore(t, c, "wal")
		testDurability(t, c)
	})
}

// TestDurabilityBoltDB is TestCluster's kill -9 check on the other log
// store: every member killed while writes are in flight, every
// acknowledged write on every member after the restart.
func TestDurabilityBoltDB(t *testing.T) {
	requireEtcdctl(t)
	if os.Getenv(binaryEnv) != "" {
		t.Skipf("%s names another server; --log-store is corenode's own", binaryEnv)
	}
	c := startCluster(t, buildBinary(t), "--log-store", "boltdb")
	requireLogStore(t, c, "boltdb")
	testDurability(t, c)
}

// requireLogStore fails unless every member's data dir holds the log store
// kind (corenode's --log-store), and only it.
func requireLogStore(t *testing.T, c *cluster, kind string) {
	t.Helper()
	if os.Getenv(binaryEnv) != "" {
		return
	}
	paths := map[string]string{"wal": "wal", "boltdb": "raft.db"}
	for _, m := range c.members {
		for k, p := range paths {
			_, err := os.Stat(filepath.Join(m.dataDir, p))
			if held := err == nil; held != (k == kind) {
				t.Fatalf("%s's data dir %s: holds %s: %v; want only the %s log store", m.name, m.dataDir, p, held, kind)
			}
		}
	}
}

func testHealth(t *testing.T, c *cluster, eps []string) {
	// etcdctl 3.4 prints the health lines on stderr.
	res := ctl(eps, "", "endpoint", "health")
	if n := strings.Count(res.stdout+res.stderr, "is healthy"); res.err != nil || n != len(eps) {
		t.Errorf("endpoint health: want %d healthy endpoints, got %d: %v", len(eps), n, res)
	}
	if os.Getenv(binaryEnv) != "" {
		return // `health` is corenode's own subcommand
	}
	for _, m := range c.members {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, c.bin, "health", "--endpoint", m.clientURL).CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("corenode health --endpoint %s: %v\n%s", m.clientURL, err, out)
		}
	}
}

func testPutGetDelete(t *testing.T, eps []string) {
	for _, kv := range [][2]string{{"/kv/a", "1"}, {"/kv/b", "2"}, {"/kv/c", "3"}, {"/kw", "outside the prefix"}} {
		if out := mustCtl(t, eps, "put", kv[0], kv[1]); out != "OK" {
			t.Fatalf("put %s %s: want OK, got %q", kv[0], kv[1], out)
		}
	}
	expectOutput(t, eps, "1", "get", "/kv/a", "--print-value-only")
	expectOutput(t, eps, "/kv/a\n1\n/kv/b\n2\n/kv/c\n3", "get", "/kv/", "--prefix")
	expectOutput(t, eps, "", "get", "/kv/missing")

	r := decodeJSON[rangeResponse](t, "get --prefix", mustCtl(t, eps, "get", "/kv/", "--prefix", "-w", "json"))
	if r.Count != 3 || len(r.KVs) != 3 {
		t.Fatalf("get /kv/ --prefix: want 3 kvs, got count=%d kvs=%d", r.Count, len(r.KVs))
	}
	for i, kv := range r.KVs {
		if want := fmt.Sprintf("/kv/%c", 'a'+i); string(kv.Key) != want || kv.Version != 1 || kv.CreateRevision != kv.ModRevision {
			t.Errorf("kv %d: want key %s version 1 create==mod revision, got %+v", i, want, kv)
		}
		if i > 0 && kv.ModRevision <= r.KVs[i-1].ModRevision {
			t.Errorf("puts made in order got revisions %d then %d", r.KVs[i-1].ModRevision, kv.ModRevision)
		}
	}
	if last := r.KVs[2].ModRevision; r.Header.Revision <= last {
		t.Errorf("header revision %d not after the last put's %d (the /kw put came later)", r.Header.Revision, last)
	}

	limited := decodeJSON[rangeResponse](t, "get --limit", mustCtl(t, eps, "get", "/kv/", "--prefix", "--limit=1", "-w", "json"))
	if len(limited.KVs) != 1 || !limited.More || limited.Count != 3 {
		t.Errorf("get --prefix --limit=1: want 1 kv, more, count 3; got %d kvs more=%v count=%d", len(limited.KVs), limited.More, limited.Count)
	}

	mustCtl(t, eps, "put", "/kv/a", "1b")
	r = decodeJSON[rangeResponse](t, "get after overwrite", mustCtl(t, eps, "get", "/kv/a", "-w", "json"))
	if len(r.KVs) != 1 || string(r.KVs[0].Value) != "1b" || r.KVs[0].Version != 2 {
		t.Errorf("overwritten /kv/a: want value 1b version 2, got %+v", r.KVs)
	}

	expectOutput(t, eps, "1", "del", "/kv/b")
	expectOutput(t, eps, "0", "del", "/kv/b")
	expectOutput(t, eps, "/kv/a\n1b\n/kv/c\n3", "get", "/kv/", "--prefix")
	expectOutput(t, eps, "2", "del", "/kv/", "--prefix")
	expectOutput(t, eps, "", "get", "/kv/", "--prefix")
	expectOutput(t, eps, "outside the prefix", "get", "/kw", "--print-value-only")
}

func testWatch(t *testing.T, eps []string) {
	// Watch through one member while writing through another, so events
	// must cross the cluster. Starting at the next revision makes the test
	// independent of when the watch stream is established.
	from := currentRevision(t, eps) + 1
	w := startBackgroundCtl(t, eps[2:3], "watch", "--prefix", "/w/", "--rev", fmt.Sprint(from), "-w", "json")
	writer := eps[0:1]

	mustCtl(t, writer, "put", "/w/1", "a")
	waitWatchEvents(t, w, []string{"PUT /w/1=a"})
	// The watcher has seen an event, so it is live: the rest arrive by streaming.
	mustCtl(t, writer, "put", "/w/2", "b")
	mustCtl(t, writer, "put", "/elsewhere", "not watched")
	mustCtl(t, writer, "del", "/w/1")
	mustCtl(t, writer, "put", "/w/2", "c")
	waitWatchEvents(t, w, []string{"PUT /w/1=a", "PUT /w/2=b", "DELETE /w/1", "PUT /w/2=c"})
}

func waitWatchEvents(t *testing.T, w *backgroundCtl, want []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := watchEvents(w.stdout())
		if err == nil && len(got) >= len(want) {
			if !slices.Equal(got, want) {
				t.Fatalf("watch saw\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			return
		}
		if time.Now().After(deadline) || w.exited() {
			t.Fatalf("watch saw %q (decode error %v), want %q within 10s; etcdctl exited=%v stderr:\n%s",
				got, err, want, w.exited(), w.stderr())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func testTxn(t *testing.T, eps []string) {
	mustCtl(t, eps, "put", "/t/k", "v1")
	// etcdctl txn reads compares, then success ops, then failure ops, each
	// block ended by an empty line.
	txn := `value("/t/k") = "v1"
version("/t/absent") = "0"

put /t/k "v2"
get /t/k

put /t/failed "yes"

`
	out := mustCtlStdin(t, eps, txn, "txn")
	if want := "SUCCESS\n\nOK\n\n/t/k\nv2"; out != want {
		t.Errorf("txn whose compares hold: want output %q, got %q", want, out)
	}
	expectOutput(t, eps, "v2", "get", "/t/k", "--print-value-only")
	expectOutput(t, eps, "", "get", "/t/failed")

	// The same txn again: /t/k is now v2, so the failure branch runs.
	out = mustCtlStdin(t, eps, txn, "txn")
	if want := "FAILURE\n\nOK"; out != want {
		t.Errorf("txn whose compare fails: want output %q, got %q", want, out)
	}
	expectOutput(t, eps, "v2", "get", "/t/k", "--print-value-only")
	expectOutput(t, eps, "yes", "get", "/t/failed", "--print-value-only")

	// Both compares must hold: one false compare sends the txn to failure.
	mixed := "value(\"/t/k\") = \"v2\"\nversion(\"/t/failed\") = \"0\"\n\nput /t/k \"v3\"\n\ndel /t/failed\n\n"
	out = mustCtlStdin(t, eps, mixed, "txn")
	if want := "FAILURE\n\n1"; out != want {
		t.Errorf("txn with one false compare: want output %q, got %q", want, out)
	}
	expectOutput(t, eps, "v2", "get", "/t/k", "--print-value-only")
	expectOutput(t, eps, "", "get", "/t/failed")
}

func testCompaction(t *testing.T, eps []string) {
	r1 := putRevision(t, eps, "/c/k", "v1")
	r2 := putRevision(t, eps, "/c/k", "v2")
	r3 := putRevision(t, eps, "/c/k", "v3")
	if !(r1 < r2 && r2 < r3) {
		t.Fatalf("put revisions not increasing: %d %d %d", r1, r2, r3)
	}
	expectOutput(t, eps, "v1", "get", "/c/k", "--print-value-only", "--rev", fmt.Sprint(r1))
	expectOutput(t, eps, "v2", "get", "/c/k", "--print-value-only", "--rev", fmt.Sprint(r2))

	expectOutput(t, eps, fmt.Sprintf("compacted revision %d", r2), "compaction", fmt.Sprint(r2))

	res := ctl(eps, "", "get", "/c/k", "--print-value-only", "--rev", fmt.Sprint(r1))
	if res.err == nil || !strings.Contains(res.stderr, "required revision has been compacted") {
		t.Errorf("get --rev %d below compaction %d: want failure with 'required revision has been compacted', got %v", r1, r2, res)
	}
	// Compacting at r2 keeps r2 itself readable, as in etcd.
	expectOutput(t, eps, "v2", "get", "/c/k", "--print-value-only", "--rev", fmt.Sprint(r2))
	expectOutput(t, eps, "v3", "get", "/c/k", "--print-value-only")
}

func testMemberList(t *testing.T, c *cluster, eps []string) {
	ids := c.memberIDs(t)
	// A member publishes its client URLs through raft after it starts, so
	// give that a bounded moment rather than racing it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		problems := memberListProblems(t, c, ids, mustCtl(t, eps, "member", "list", "-w", "json"))
		if len(problems) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("member list -w json:\n%s", strings.Join(problems, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	simple := mustCtl(t, eps, "member", "list")
	for _, m := range c.members {
		want := fmt.Sprintf("%x, started, %s, %s, %s, false", ids[m], m.name, m.peerURL, m.clientURL)
		if !strings.Contains(simple, want) {
			t.Errorf("member list: no line %q in\n%s", want, simple)
		}
	}
}

func memberListProblems(t *testing.T, c *cluster, ids map[*member]uint64, out string) []string {
	ml := decodeJSON[memberListResponse](t, "member list", out)
	var problems []string
	if len(ml.Members) != len(c.members) {
		problems = append(problems, fmt.Sprintf("want %d members, got %d: %s", len(c.members), len(ml.Members), out))
	}
	for _, m := range c.members {
		found := false
		for _, got := range ml.Members {
			if got.Name != m.name {
				continue
			}
			found = true
			if got.ID != ids[m] {
				problems = append(problems, fmt.Sprintf("%s: ID %x, but its endpoint reports member_id %x", m.name, got.ID, ids[m]))
			}
			if !slices.Equal(got.ClientURLs, []string{m.clientURL}) || !slices.Equal(got.PeerURLs, []string{m.peerURL}) {
				problems = append(problems, fmt.Sprintf("%s: want client %s peer %s, got client %v peer %v",
					m.name, m.clientURL, m.peerURL, got.ClientURLs, got.PeerURLs))
			}
			if got.IsLearner {
				problems = append(problems, m.name+" is a learner")
			}
		}
		if !found {
			problems = append(problems, fmt.Sprintf("no member named %s in %s", m.name, out))
		}
	}
	return problems
}

func testEndpointStatus(t *testing.T, c *cluster, eps []string) {
	st := c.status(t, eps)
	for _, s := range st {
		if len(s.Status.Errors) > 0 || s.Status.Version == "" || s.Status.RaftTerm == 0 || s.Status.RaftIndex == 0 {
			t.Errorf("%s: want no errors, a version, a raft term and index; got %+v", s.Endpoint, s.Status)
		}
		if s.Status.Header.ClusterID != st[0].Status.Header.ClusterID {
			t.Errorf("%s reports cluster ID %x, %s reports %x", s.Endpoint, s.Status.Header.ClusterID, st[0].Endpoint, st[0].Status.Header.ClusterID)
		}
	}
	leaderID, leader, err := leaderOf(c, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leader is %s (%x)", leader.name, leaderID)
}

func testMoveLeader(t *testing.T, c *cluster, eps []string) {
	ids := c.memberIDs(t)
	fromID, from := c.leader(t, eps)
	var to *member
	for _, m := range c.members {
		if m != from {
			to = m
			break
		}
	}
	out := mustCtl(t, eps, "move-leader", fmt.Sprintf("%x", ids[to]))
	if want := fmt.Sprintf("Leadership transferred from %x to %x", fromID, ids[to]); !strings.Contains(out, want) {
		t.Errorf("move-leader: want %q, got %q", want, out)
	}
	c.waitLeader(t, eps, to, 10*time.Second)
}

func testFailover(t *testing.T, c *cluster) {
	_, old := c.leader(t, c.endpoints())
	var survivors []string
	for _, m := range c.members {
		if m != old {
			survivors = append(survivors, m.clientURL)
		}
	}
	value := "written while " + old.name + " was down"

	c.kill(old)
	killed := time.Now()
	deadline := killed.Add(5 * time.Second)
	for attempt := 1; ; attempt++ {
		res := ctl(survivors, "", "--command-timeout=1s", "put", "/failover", value)
		if res.err == nil {
			t.Logf("failover: put through the survivors succeeded %v after SIGKILL of leader %s (attempt %d)",
				time.Since(killed).Round(time.Millisecond), old.name, attempt)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no put succeeded within 5s of killing leader %s; last attempt: %v", old.name, res)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if err := c.start(old); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	// A serializable get is answered from the member's own state, so it
	// shows whether the restarted member itself caught up.
	deadline = restarted.Add(15 * time.Second)
	for {
		res := ctl([]string{old.clientURL}, "", "--command-timeout=1s", "get", "/failover", "--consistency=s", "--print-value-only")
		if res.err == nil && strings.TrimRight(res.stdout, "\n") == value {
			t.Logf("restarted %s served the write made while it was down %v after restart",
				old.name, time.Since(restarted).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) || !old.running() {
			t.Fatalf("restarted %s did not catch up within 15s (running=%v); last serializable get: %v", old.name, old.running(), res)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := c.waitHealthy(c.members, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// testLeaseExpiryWhileLeaderKilled: a key under a 4 s lease with no
// keep-alive survives a SIGKILL of the leader until its TTL has passed, and
// is gone soon after, decided by the new leader.
func testLeaseExpiryWhileLeaderKilled(t *testing.T, c *cluster) {
	const ttl = 4 * time.Second
	eps := c.endpoints()
	start := time.Now() // the lease's deadline is no earlier than start+ttl
	out := mustCtl(t, eps, "lease", "grant", "4")
	var id string
	if _, err := fmt.Sscanf(out, "lease %s granted", &id); err != nil {
		t.Fatalf("lease grant printed %q", out)
	}
	mustCtl(t, eps, "put", "--lease="+id, "/svc/ephemeral", "10.0.0.9")
	_, old := c.leader(t, eps)
	c.kill(old)
	var survivors []string
	for _, m := range c.members {
		if m != old {
			survivors = append(survivors, m.clientURL)
		}
	}
	var gone time.Time
	for deadline := start.Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		asked := time.Now()
		res := ctl(survivors, "", "--command-timeout=1s", "get", "/svc/ephemeral", "--print-value-only")
		if res.err != nil {
			continue // no leader yet
		}
		if strings.TrimSpace(res.stdout) == "" {
			gone = time.Now()
			break
		}
		if asked.Sub(start) > 9*time.Second {
			t.Fatalf("key still present %v after grant (TTL %v)", asked.Sub(start), ttl)
		}
	}
	if gone.IsZero() {
		t.Fatal("the lease never expired after the leader was killed")
	}
	// The read that saw it gone began at most 1 s before gone.
	if gone.Sub(start) < ttl {
		t.Fatalf("key deleted %v after grant, before its TTL %v", gone.Sub(start), ttl)
	}
	t.Logf("leased key gone %v after grant with the leader killed at once", gone.Sub(start).Round(time.Millisecond))
	if err := c.start(old); err != nil {
		t.Fatal(err)
	}
	if err := c.waitHealthy(c.members, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// testDurability: writes flow through every member from 8 clients while
// the leader is killed (SIGKILL) and restarted, then a follower, then every
// member at once; after the last restart every acknowledged write is on
// every member. The leader sends new entries to its followers while it
// writes them itself (node/early.go), so a killed leader may have sent an
// entry it never stored, and a killed follower may have stored one the
// leader had not yet: neither may cost an acknowledged write.
func testDurability(t *testing.T, c *cluster) {
	w := startWriters(t, c, "/dur/")
	defer w.stop()

	w.waitAcked(t, 100)
	_, leader := c.leader(t, c.endpoints())
	c.kill(leader)
	n := w.waitAcked(t, 100)
	t.Logf("durability: %d writes acknowledged after SIGKILL of leader %s", n, leader.name)
	if err := c.start(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.waitHealthy(c.members, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	w.waitAcked(t, 50)
	_, leader = c.leader(t, c.endpoints())
	var follower *member
	for _, m := range c.members {
		if m != leader {
			follower = m
			break
		}
	}
	c.kill(follower)
	n = w.waitAcked(t, 100)
	t.Logf("durability: %d writes acknowledged after SIGKILL of follower %s", n, follower.name)
	if err := c.start(follower); err != nil {
		t.Fatal(err)
	}
	if err := c.waitHealthy(c.members, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	w.waitAcked(t, 100)
	c.killAll()
	acked, attempted := w.stop()
	t.Logf("durability: %d writes acknowledged of %d attempted before all members were killed", len(acked), attempted)

	if err := c.startAll(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	if err := c.waitHealthy(c.members, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("durability: cluster healthy %v after restarting all members", time.Since(restarted).Round(time.Millisecond))

	// Linearizable through the cluster, then serializable on each member:
	// every member's own copy must hold every acknowledged write.
	checkAcked(t, "linearizable via all endpoints", c.endpoints(), "/dur/", acked, false, 10*time.Second)
	for _, m := range c.members {
		checkAcked(t, "serializable on "+m.name, []string{m.clientURL}, "/dur/", acked, true, 10*time.Second)
	}
}

// writers are 8 clients putting unique keys under a prefix, through every
// member, until stopped; they keep what was acknowledged.
type writers struct {
	cli     *clientv3.Client
	mu      sync.Mutex
	acked   map[string]string
	changed chan struct{} // closed and replaced at each acknowledgement
	next    atomic.Int64
	cut     context.CancelFunc
	wg      sync.WaitGroup
	stopped bool
}

func startWriters(t *testing.T, c *cluster, prefix string) *writers {
	t.Helper()
	ctx, cut := context.WithCancel(context.Background())
	w := &writers{cli: newClient(t, c.endpoints()), acked: map[string]string{}, changed: make(chan struct{}), cut: cut}
	for range 8 {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for ctx.Err() == nil {
				i := w.next.Add(1) - 1
				key, val := fmt.Sprintf("%s%05d", prefix, i), fmt.Sprintf("value-%d", i)
				pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				_, err := w.cli.Put(pctx, key, val)
				cancel()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				w.mu.Lock()
				w.acked[key] = val
				close(w.changed)
				w.changed = make(chan struct{})
				w.mu.Unlock()
			}
		}()
	}
	return w
}

// waitAcked waits until n more writes than now are acknowledged, and
// returns how many there are then.
func (w *writers) waitAcked(t *testing.T, n int) int {
	t.Helper()
	w.mu.Lock()
	want := len(w.acked) + n
	w.mu.Unlock()
	deadline := time.After(30 * time.Second)
	for {
		w.mu.Lock()
		got, changed := len(w.acked), w.changed
		w.mu.Unlock()
		if got >= want {
			return got
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("only %d of %d writes acknowledged within 30s", got, want)
		}
	}
}

// stop ends the writers and returns the acknowledged writes and how many
// were attempted.
func (w *writers) stop() (map[string]string, int64) {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return w.acked, w.next.Load()
	}
	w.stopped = true
	w.mu.Unlock()
	w.cut()
	w.wg.Wait()
	w.cli.Close()
	return w.acked, w.next.Load()
}

func checkAcked(t *testing.T, how string, eps []string, prefix string, acked map[string]string, serializable bool, wait time.Duration) {
	t.Helper()
	cli := newClient(t, eps)
	defer cli.Close()
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := cli.Get(ctx, prefix, opts...)
		cancel()
		var missing []string
		if err == nil {
			got := map[string]string{}
			for _, kv := range resp.Kvs {
				got[string(kv.Key)] = string(kv.Value)
			}
			for k, v := range acked {
				if got[k] != v {
					missing = append(missing, fmt.Sprintf("%s (want %q, got %q)", k, v, got[k]))
				}
			}
			if len(missing) == 0 {
				t.Logf("durability (%s): all %d acknowledged keys present, %d keys in all", how, len(acked), len(resp.Kvs))
				return
			}
		}
		if time.Now().After(deadline) {
			slices.Sort(missing)
			if len(missing) > 10 {
				missing = append(missing[:10], "...")
			}
			t.Fatalf("durability (%s): err=%v, %d acknowledged keys missing or wrong: %s", how, err, len(missing), strings.Join(missing, ", "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func newClient(t *testing.T, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

func expectOutput(t *testing.T, eps []string, want string, args ...string) {
	t.Helper()
	if got := mustCtl(t, eps, args...); got != want {
		t.Errorf("etcdctl %s: want %q, got %q", strings.Join(args, " "), want, got)
	}
}

func currentRevision(t *testing.T, eps []string) int64 {
	t.Helper()
	return decodeJSON[rangeResponse](t, "get", mustCtl(t, eps, "get", "/", "--limit=1", "-w", "json")).Header.Revision
}

func putRevision(t *testing.T, eps []string, key, value string) int64 {
	t.Helper()
	return decodeJSON[putResponse](t, "put", mustCtl(t, eps, "put", key, value, "-w", "json")).Header.Revision
}

func (c *cluster) leader(t *testing.T, eps []string) (uint64, *member) {
	t.Helper()
	id, m, err := leaderOf(c, c.status(t, eps))
	if err != nil {
		t.Fatal(err)
	}
	return id, m
}

func (c *cluster) waitLeader(t *testing.T, eps []string, want *member, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var err error
		st, serr := c.statusOf(eps)
		if serr != nil {
			err = serr
		} else if _, got, lerr := leaderOf(c, st); lerr != nil {
			err = lerr
		} else if got != want {
			err = fmt.Errorf("leader is %s", got.name)
		} else {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not become the leader within %v: %v", want.name, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// backgroundCtl is an etcdctl that runs until the test ends (etcdctl watch).
type backgroundCtl struct {
	cmd      *exec.Cmd
	out, err syncBuffer
	done     chan struct{}
}

func startBackgroundCtl(t *testing.T, eps []string, args ...string) *backgroundCtl {
	t.Helper()
	full := append([]string{"--endpoints=" + strings.Join(eps, ","), "--dial-timeout=2s"}, args...)
	b := &backgroundCtl{cmd: exec.Command("etcdctl", full...), done: make(chan struct{})}
	b.cmd.Env = append(envWithout("ETCDCTL_"), "ETCDCTL_API=3")
	b.cmd.Stdout = &b.out
	b.cmd.Stderr = &b.err
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		b.cmd.Wait()
		close(b.done)
	}()
	t.Cleanup(func() {
		b.cmd.Process.Kill()
		<-b.done
	})
	return b
}

func (b *backgroundCtl) stdout() string { return b.out.String() }
func (b *backgroundCtl) stderr() string { return b.err.String() }

func (b *backgroundCtl) exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
