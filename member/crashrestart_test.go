package member_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// crashImage copies a running member's data dir as kill -9 leaves it:
// every write the member made is in the page cache, which a copy reads,
// and nothing a graceful stop would add (raft's shutdown, a leader's
// hand-over) is there. The member must be idle (no write in flight).
func crashImage(t *testing.T, dataDir string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(dataDir))
	err := filepath.WalkDir(dataDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dataDir, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatalf("copy the data dir as a crash leaves it: %v", err)
	}
	return dst
}

// revisionWatcher polls a member's client port from the first moment it
// accepts, as etcd's robustness harness does after a restart: Status, a
// serializable Range and the JSON gateway's Status, as fast as they
// answer, and records the lowest header revision any carried.
type revisionWatcher struct {
	mu      sync.Mutex
	lowest  int64
	answers int
	gateway int      // of answers, the JSON gateway's
	errs    []string // Status's errors field while catching up, deduplicated
	first   time.Duration
	stop    chan struct{}
	done    chan struct{}
}

func watchRevisions(t *testing.T, addr string) *revisionWatcher {
	w := &revisionWatcher{lowest: -1, stop: make(chan struct{}), done: make(chan struct{})}
	began := time.Now()
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			c, err := net.DialTimeout("tcp", addr, 50*time.Millisecond)
			if err == nil {
				c.Close()
				break
			}
			time.Sleep(time.Millisecond)
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Errorf("dial %s: %v", addr, err)
			return
		}
		defer conn.Close()
		mc, kc := pb.NewMaintenanceClient(conn), pb.NewKVClient(conn)
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := mc.Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(true))
			if err == nil {
				w.saw(st.Header.Revision, began, st.Errors)
			}
			rr, err := kc.Range(ctx, &pb.RangeRequest{Key: []byte("k"), Serializable: true}, grpc.WaitForReady(true))
			if err == nil {
				w.saw(rr.Header.Revision, began, nil)
			}
			if rev, ok := gatewayRevision(ctx, "http://"+addr+"/v3/maintenance/status"); ok {
				w.saw(rev, began, nil)
				w.mu.Lock()
				w.gateway++
				w.mu.Unlock()
			}
			cancel()
		}
	}()
	return w
}

// gatewayRevision is the header revision of the JSON gateway's answer
// to an empty POST at url, if it answered 200.
func gatewayRevision(ctx context.Context, url string) (int64, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
	if err != nil {
		return 0, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var body struct {
		Header struct {
			Revision int64 `json:"revision,string"`
		} `json:"header"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
		return 0, false
	}
	return body.Header.Revision, true
}

func (w *revisionWatcher) saw(rev int64, began time.Time, errs []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.answers == 0 {
		w.first = time.Since(began)
	}
	w.answers++
	if w.lowest < 0 || rev < w.lowest {
		w.lowest = rev
	}
	for _, e := range errs {
		if !strings.Contains(strings.Join(w.errs, "\n"), e) {
			w.errs = append(w.errs, e)
		}
	}
}

func (w *revisionWatcher) close() (lowest int64, answers int, first time.Duration, errs []string) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lowest, w.answers, w.first, w.errs
}

// TestNoAnswerGoesBackAfterCrash is etcd's robustness finding: one member,
// 150 puts, kill -9, restart, and Status polled from the first moment the
// port accepts answered revision 1 for about 0.6 s (the snapshot-less
// start, before raft had applied its log) where etcd answers 151 from its
// first reply.
func TestNoAnswerGoesBackAfterCrash(t *testing.T) {
	c := membertest.New(t, 1)
	cli := c.Client()
	ctx := ctxT(t)
	for range 150 {
		if _, err := cli.Put(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	before, err := cli.Status(ctx, c.Endpoint(0))
	if err != nil {
		t.Fatal(err)
	}
	rev := before.Header.Revision
	cfg := c.Config(0)
	cfg.DataDir = crashImage(t, cfg.DataDir)
	c.Stop(0)

	w := watchRevisions(t, c.Endpoint(0))
	var m *member.Member
	for attempt := 0; ; attempt++ {
		if m, err = member.Start(cfg); err == nil || attempt == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond) // the old listener may linger briefly
	}
	if err != nil {
		w.close()
		t.Fatalf("restart on the crash image: %v", err)
	}
	defer m.Close()
	select {
	case <-m.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the restarted member never became ready")
	}
	// A few answers after ready too: the header must not move back then.
	time.Sleep(200 * time.Millisecond)
	lowest, answers, first, errs := w.close()
	t.Logf("revision %d before the kill; after the restart %d answers, the first %v after the poller began, lowest revision %d; errors seen: %q",
		rev, answers, first.Round(time.Millisecond), lowest, errs)
	if answers == 0 || w.gateway == 0 {
		t.Fatalf("the restarted member answered %d calls, %d of them the gateway's", answers, w.gateway)
	}
	if lowest < rev {
		t.Fatalf("after the restart a reply carried revision %d, lower than the %d answered before the kill", lowest, rev)
	}
}

// TestNoAnswerGoesBackAfterCrashAlone is the same crash for a member of
// three restarted alone: it cannot learn the commit index from anyone, so
// what it replays before serving is what its commit mark names
// (node/replay.go), and Status says it has no leader.
func TestNoAnswerGoesBackAfterCrashAlone(t *testing.T) {
	c := membertest.New(t, 3)
	leader := c.WaitLeader()
	cli := c.Client(leader)
	ctx := ctxT(t)
	for range 150 {
		if _, err := cli.Put(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	c.CatchUp(leader)
	lone := (leader + 1) % 3
	before, err := cli.Status(ctx, c.Endpoint(lone))
	if err != nil {
		t.Fatal(err)
	}
	rev := before.Header.Revision
	cfg := c.Config(lone)
	cfg.DataDir = crashImage(t, cfg.DataDir)
	for i := range c.Members {
		c.Stop(i)
	}

	w := watchRevisions(t, c.Endpoint(lone))
	var m *member.Member
	for attempt := 0; ; attempt++ {
		if m, err = member.Start(cfg); err == nil || attempt == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		w.close()
		t.Fatalf("restart on the crash image: %v", err)
	}
	defer m.Close()
	time.Sleep(time.Second) // no quorum: it never becomes ready
	lowest, answers, first, errs := w.close()
	t.Logf("revision %d before the kill; after the restart %d answers, the first %v after the poller began, lowest revision %d; errors seen: %q",
		rev, answers, first.Round(time.Millisecond), lowest, errs)
	if answers == 0 || w.gateway == 0 {
		t.Fatalf("the restarted member answered %d calls, %d of them the gateway's", answers, w.gateway)
	}
	if lowest < rev {
		t.Fatalf("after the restart a reply carried revision %d, lower than the %d answered before the kill", lowest, rev)
	}
	if !slices.Contains(errs, "etcdserver: no leader") {
		t.Errorf("Status of a member alone: errors %q, want etcdserver: no leader", errs)
	}
}

// TestJoinerAnswersNoRevisionBehindTheCluster is etcd's robustness suite's
// MemberReplace: a member removed, its data wiped, added back and started
// empty. Status is exempt from the catch-up wait, and the joiner answered
// it with revision 1 while the cluster was at 150: the suite's compaction
// loop, which compacts at a revision drawn below the one Status names,
// panicked. etcd serves no client before its member has applied what the
// cluster had committed.
func TestJoinerAnswersNoRevisionBehindTheCluster(t *testing.T) {
	c := membertest.New(t, 3)
	cli := c.Client()
	ctx := ctxT(t)
	for range 150 {
		if _, err := cli.Put(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	before, err := cli.Status(ctx, c.Endpoint(c.WaitLeader()))
	if err != nil {
		t.Fatal(err)
	}
	rev := before.Header.Revision
	i := c.Add(false)
	w := watchRevisions(t, c.Endpoint(i))
	c.Start(i)
	select {
	case <-c.Members[i].Ready():
	case <-time.After(10 * time.Second):
		w.close()
		t.Fatal("the joiner never became ready")
	}
	time.Sleep(200 * time.Millisecond)
	lowest, answers, first, errs := w.close()
	t.Logf("revision %d before the join; the joiner answered %d calls, the first %v after the poller began, lowest revision %d; errors seen: %q",
		rev, answers, first.Round(time.Millisecond), lowest, errs)
	if answers == 0 {
		t.Fatal("the joiner answered nothing")
	}
	if lowest < rev {
		t.Fatalf("the joiner answered revision %d, lower than the cluster's %d before it joined", lowest, rev)
	}
}
