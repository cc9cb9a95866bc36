//go:build linux

package member_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/internal/testenv"
	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
	"github.com/corenode/corenode/node"
)

// The disk-full tests fill a real file system: a tmpfs mounted as one
// member's data dir. It holds the wal's first segment (16 MiB,
// preallocated) and room to spare, which a junk file then takes.
const (
	tmpfsBytes = 40 << 20
	// bigValue is the size of the puts that make a member's wal need its
	// next segment: raft-wal appends into the preallocated segment until it
	// is full, so only then does the full disk show.
	bigValue = 512 << 10
	bigPuts  = 40 // 20 MiB: past the first segment
)

// mountTmpfs mounts a tmpfs of size bytes on dir (created) until the test
// ends; it is unmounted after the cluster stops (cleanups run last first).
func mountTmpfs(t *testing.T, dir string, size int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("cannot mount a tmpfs on %s (run as root on Linux): %v", dir, err))
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// fillDisk writes a junk file in dir until the file system is full, then
// gives back leave bytes of it, and returns its path.
func fillDisk(t *testing.T, dir string, leave int64) string {
	t.Helper()
	path := filepath.Join(dir, "junk")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, chunk := range []int{1 << 20, 4 << 10, 512} {
		buf := make([]byte, chunk)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("fill %s: %v", dir, err)
				}
				break
			}
		}
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	if leave > 0 {
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(fi.Size() - leave); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// memberHealth is member i's /health: status code and body.
func memberHealth(t *testing.T, c *membertest.Cluster, i int) (int, struct{ Health, Reason string }) {
	t.Helper()
	resp, err := http.Get(c.ClientURL(i) + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct{ Health, Reason string }
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatalf("/health of member %d: %v", i, err)
	}
	return resp.StatusCode, h
}

// assertUnhealthyDisk checks that member i says, in /health and
// /metrics, that it cannot persist.
func assertUnhealthyDisk(t *testing.T, c *membertest.Cluster, i int) {
	t.Helper()
	code, h := memberHealth(t, c, i)
	if code != http.StatusServiceUnavailable || h.Health != "false" || !strings.Contains(h.Reason, "cannot persist") {
		t.Errorf("/health of member %d, whose disk is full: %d %+v; want 503, health false, a reason that says it cannot persist", i, code, h)
	}
	if v, ok := scrape(t, c.ClientURL(i))["corenode_disk_writable"]; !ok || v != 0 {
		t.Errorf("member %d, whose disk is full: corenode_disk_writable %v (present %v), want 0", i, v, ok)
	}
}

func assertHealthyDisk(t *testing.T, c *membertest.Cluster, i int) {
	t.Helper()
	if code, h := memberHealth(t, c, i); code != http.StatusOK || h.Health != "true" {
		t.Errorf("/health of member %d: %d %+v, want 200 and health true", i, code, h)
	}
	if v, ok := scrape(t, c.ClientURL(i))["corenode_disk_writable"]; !ok || v != 1 {
		t.Errorf("member %d: corenode_disk_writable %v (present %v), want 1", i, v, ok)
	}
}

// awaitHealthyDisk waits for member i to say it is well again, which it
// does once its probe of the disk succeeds, possibly after it caught up
// (appends can succeed before), and checks /health and the gauge.
func awaitHealthyDisk(t *testing.T, c *membertest.Cluster, i int) {
	t.Helper()
	membertest.Eventually(t, 10*time.Second, func() bool {
		code, _ := memberHealth(t, c, i)
		return code == http.StatusOK
	}, "the member whose disk was freed never said it was healthy again")
	assertHealthyDisk(t, c, i)
}

// assertLeaderKept checks that ln still leads, in term; when says at
// which point of the test.
func assertLeaderKept(t *testing.T, ln *node.Node, term uint64, when string) {
	t.Helper()
	if got := ln.Term(); got != term || !ln.IsLeader() {
		t.Errorf("%s: the leader's term went from %d to %d (still leading: %v)", when, term, got, ln.IsLeader())
	}
}

// The two ways a wal meets a full disk: leave is what fillDisk gives back.
var diskFills = []struct {
	name  string
	leave int64
}{
	// Not a byte left: the append that would close the wal's segment
	// fails, and the next one can try again.
	{"no-room", 0},
	// Room for the append that closes the segment but not for the next
	// segment: raft-wal's rotation fails, and every later append fails
	// with "segment is sealed", even with space back, until the log is
	// opened again.
	{"no-room-for-next-segment", 2 << 20},
}

// TestDiskFullFollower: a follower whose disk fills stays a follower, does
// not disturb the leader (the term does not move while the others keep
// committing), says so in /health and corenode_disk_writable, and once
// space is back catches up by itself, without a restart.
func TestDiskFullFollower(t *testing.T) {
	for _, fill := range diskFills {
		t.Run(fill.name, func(t *testing.T) { testDiskFullFollower(t, fill.leave) })
	}
}

// fullDiskCluster starts n members, each with its own metrics registry,
// member full's data dir on a tmpfs of tmpfsBytes, and returns that dir.
func fullDiskCluster(t *testing.T, n, full int) (*membertest.Cluster, string) {
	var dir string
	c := membertest.New(t, n, membertest.WithConfig(func(i int, cfg *member.Config) {
		cfg.Metrics = prometheus.NewRegistry()
		if i == full {
			dir = cfg.DataDir
			mountTmpfs(t, dir, tmpfsBytes)
		}
	}))
	return c, dir
}

func testDiskFullFollower(t *testing.T, leave int64) {
	const full = 2
	c, dir := fullDiskCluster(t, 3, full)
	ctx := ctxT(t)
	leader := c.WaitLeader()
	if leader == full {
		if _, err := c.Client(leader).MoveLeader(ctx, c.Members[0].ID()); err != nil {
			t.Fatalf("move leadership off the member whose disk will fill: %v", err)
		}
		leader = c.WaitLeader()
	}
	ln := c.Members[leader].Node()
	term := ln.Term()
	cli := c.Client(leader)

	junk := fillDisk(t, dir, leave)
	value := strings.Repeat("v", bigValue)
	for i := range bigPuts {
		if _, err := cli.Put(ctx, "/big", value); err != nil {
			t.Fatalf("put %d of %d KiB with one member's disk full: %v", i, bigValue>>10, err)
		}
	}
	for i := range 20 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/k%d", i), "while-full"); err != nil {
			t.Fatalf("small put %d with one member's disk full: %v", i, err)
		}
	}
	assertStoppedByFullDisk(t, c, full, leader, term)
	// Leadership cannot move to it, and trying leaves the leader in place:
	// the member cannot take the entries it lacks, so the transfer runs out
	// of time (etcd's "leader transfer took too long"); had it caught up,
	// it would refuse the leader's TimeoutNow (etcd's "bad leader
	// transferee") rather than campaign on a disk that cannot store it.
	_, err := cli.MoveLeader(ctx, c.Members[full].ID())
	if err == nil || (!errors.Is(err, rpctypes.ErrGRPCBadLeaderTransferee) && !strings.Contains(err.Error(), "leader transfer took too long")) {
		t.Fatalf("move leadership to member %d with its disk full: %v, want etcd's refusal", full, err)
	}
	assertLeaderKept(t, ln, term, "after a transfer to the full member")
	// raft's leader retries a follower whose appends failed with a backoff
	// of up to about 10 s, so catching up may take that long.
	freeAndCatchUp(ctx, t, c, full, leader, junk, 20*time.Second)
	fc := c.Client(full)
	for key, v := range map[string]string{"/k19": "while-full", "/big": value} {
		resp, err := fc.Get(ctx, key, clientv3.WithSerializable())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != v {
			t.Errorf("serializable read of %s on member %d after it caught up: %d keys, want its value", key, full, len(resp.Kvs))
		}
	}
	assertLeaderKept(t, ln, term, "when the follower recovered")
	awaitHealthyDisk(t, c, full)
}

// TestDiskFullLoneMember: a lone member whose disk fills stops leading and
// does not campaign until space is back (the term stays), answers writes
// with etcd's errors rather than Unknown, and leads again by itself once
// the disk takes writes.
func TestDiskFullLoneMember(t *testing.T) {
	for _, fill := range diskFills {
		t.Run(fill.name, func(t *testing.T) { testDiskFullLoneMember(t, fill.leave) })
	}
}

func testDiskFullLoneMember(t *testing.T, leave int64) {
	c, dir := fullDiskCluster(t, 1, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := c.Members[0].Node()
	// A plain gRPC client: clientv3 would retry what the member answers.
	conn, err := grpc.NewClient(c.Endpoint(0), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	kv := pb.NewKVClient(conn)
	// put sends a Put with a deadline of timeout, or none when it is 0.
	put := func(timeout time.Duration, key, value string) error {
		ctx := context.Background()
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		_, err := kv.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte(value)})
		return err
	}
	// etcdError reports whether err is one of etcd's answers that a client
	// retries or reports as "no leader": never Unknown.
	etcdError := func(err error) bool {
		switch code := status.Code(err); code {
		case codes.DeadlineExceeded:
			return true // the client's deadline ran out before the member's
		case codes.Unknown:
			return false
		}
		for _, e := range []error{rpctypes.ErrGRPCNoLeader, rpctypes.ErrGRPCNotLeader, rpctypes.ErrGRPCTimeout, rpctypes.ErrGRPCLeaderChanged} {
			if status.Code(err) == status.Code(e) && status.Convert(err).Message() == status.Convert(e).Message() {
				return true
			}
		}
		return false
	}

	junk := fillDisk(t, dir, leave)
	value := strings.Repeat("v", bigValue)
	var refused error
	for i := 0; i < 2*bigPuts && refused == nil; i++ {
		refused = put(10*time.Second, "/big", value)
	}
	if refused == nil {
		t.Fatalf("%d puts of %d KiB all succeeded on a full disk: the test did not fault it", 2*bigPuts, bigValue>>10)
	}
	if !etcdError(refused) {
		t.Fatalf("a put the full disk refused: %v (code %v), want one of etcd's errors", refused, status.Code(refused))
	}
	// With no deadline from the client the member answers by its request
	// timeout (a few seconds): etcd's "no leader", as nobody leads.
	if err := put(0, "/small", "v"); !errors.Is(err, rpctypes.ErrGRPCNoLeader) {
		t.Errorf("put without a deadline on a full disk: %v, want %v", err, rpctypes.ErrGRPCNoLeader)
	}
	term := n.Term()
	for i := range 4 {
		if err := put(time.Second, fmt.Sprintf("/k%d", i), "v"); err == nil || !etcdError(err) {
			t.Errorf("put %d on a full disk: %v, want one of etcd's errors", i, err)
		}
	}
	if got := n.Term(); got != term {
		t.Errorf("the term went from %d to %d on a lone member with a full disk: it kept campaigning", term, got)
	}
	if n.IsLeader() {
		t.Errorf("a lone member with a full disk leads")
	}
	assertUnhealthyDisk(t, c, 0)

	if err := os.Remove(junk); err != nil {
		t.Fatal(err)
	}
	cli := c.Client(0)
	if _, err := cli.Put(ctx, "/after", "freed"); err != nil {
		t.Fatalf("put after space was freed: %v", err)
	}
	resp, err := cli.Get(ctx, "/after", clientv3.WithSerializable())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "freed" {
		t.Errorf("read after recovery: %v", resp.Kvs)
	}
	// The campaign that waited for the disk goes on when it is back, and
	// may win at once or first see the election timer raft started before
	// the wait run out (runCandidate, raft.go:352), and try once more.
	if got := n.Term(); got > term+2 {
		t.Errorf("the term went from %d to %d to recover: at most two elections should do", term, got)
	}
	assertHealthyDisk(t, c, 0)
}

// TestDiskFullLeader: the leader's own disk fills. Its failed append steps
// it down and it does not campaign; the other two elect a leader among
// themselves and keep committing, and no acknowledged write is lost. The
// full member says it cannot persist (/health, corenode_disk_writable) and,
// once space is back, catches up by itself, without a restart, to the same
// key space as the leader's, without disturbing the new leader.
func TestDiskFullLeader(t *testing.T) {
	for _, fill := range diskFills {
		t.Run(fill.name, func(t *testing.T) { testDiskFullLeader(t, fill.leave) })
	}
}

func testDiskFullLeader(t *testing.T, leave int64) {
	const full = 0
	c, dir := fullDiskCluster(t, 3, full)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if leader := c.WaitLeader(); leader != full {
		if _, err := c.Client(leader).MoveLeader(ctx, c.Members[full].ID()); err != nil {
			t.Fatalf("move leadership to the member whose disk will fill: %v", err)
		}
		if leader = c.WaitLeader(); leader != full {
			t.Fatalf("member %d leads after leadership moved to member %d", leader, full)
		}
	}
	fn := c.Members[full].Node()
	cli := c.Client() // every member: the client finds whichever leads
	acked := map[string]string{}
	put := func(key, value string) error {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := cli.Put(pctx, key, value)
		if err == nil {
			acked[key] = value
		}
		return err
	}

	junk := fillDisk(t, dir, leave)
	// Big puts fill what is left of the leader's wal segment; the append
	// that needs more fails, and the leader steps down. A put in flight
	// then may fail: it was not acknowledged.
	value := strings.Repeat("v", bigValue)
	var refused []error
	puts := 0
	for ; puts < 3*bigPuts && fn.IsLeader(); puts++ {
		if err := put(fmt.Sprintf("/big%03d", puts), value); err != nil {
			refused = append(refused, err)
		}
	}
	if fn.IsLeader() {
		t.Fatalf("member %d still leads after %d puts of %d KiB on its full disk: the test did not fault it", full, puts, bigValue>>10)
	}
	t.Logf("the leader stepped down after %d big puts; refused: %v", puts, refused)
	leader := c.WaitLeader()
	if leader == full {
		t.Fatalf("member %d leads again with a full disk", full)
	}
	ln := c.Members[leader].Node()
	term := ln.Term()
	for i := range 20 {
		if err := put(fmt.Sprintf("/k%02d", i), "while-full"); err != nil {
			t.Fatalf("small put %d with the old leader's disk full: %v", i, err)
		}
	}
	assertStoppedByFullDisk(t, c, full, leader, term)
	// As for a follower: the leader retries a member whose appends failed
	// with a backoff of up to about 10 s.
	freeAndCatchUp(ctx, t, c, full, leader, junk, 30*time.Second)
	// The same key space: every acknowledged write, and nothing else.
	rev, err := cli.Get(ctx, "/k19")
	if err != nil {
		t.Fatal(err)
	}
	var hashes [2]uint32
	for j, i := range []int{leader, full} {
		h, err := c.Client(i).HashKV(ctx, c.Endpoint(i), rev.Header.Revision)
		if err != nil {
			t.Fatalf("member %d: HashKV(%d): %v", i, rev.Header.Revision, err)
		}
		hashes[j] = h.Hash
	}
	if hashes[0] != hashes[1] {
		t.Errorf("at revision %d the key space hashes to %08x on the leader, %08x on member %d, which caught up", rev.Header.Revision, hashes[0], hashes[1], full)
	}
	lc, fc := c.Client(leader), c.Client(full)
	for key, v := range acked {
		for i, get := range map[int]func() (*clientv3.GetResponse, error){
			leader: func() (*clientv3.GetResponse, error) { return lc.Get(ctx, key) },
			full:   func() (*clientv3.GetResponse, error) { return fc.Get(ctx, key, clientv3.WithSerializable()) },
		} {
			resp, err := get()
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != v {
				t.Errorf("acknowledged %s: %d keys on member %d, want its value", key, len(resp.Kvs), i)
			}
		}
	}
	assertLeaderKept(t, ln, term, "when the old leader recovered")
	awaitHealthyDisk(t, c, full)
}

// assertStoppedByFullDisk checks the cluster while member full's disk is
// full: it fell behind leader, does not lead, says so in /health, and
// leader kept its term and its leadership.
func assertStoppedByFullDisk(t *testing.T, c *membertest.Cluster, full, leader int, term uint64) {
	t.Helper()
	fn, ln := c.Members[full].Node(), c.Members[leader].Node()
	if got, want := fn.FSM().Applied(), ln.FSM().Applied(); got >= want {
		t.Fatalf("member %d applied %d, the leader %d: its full disk did not stop it, the test did not fault it", full, got, want)
	}
	if fn.IsLeader() {
		t.Errorf("member %d leads with a full disk", full)
	}
	assertLeaderKept(t, ln, term, fmt.Sprintf("while member %d's disk was full", full))
	assertUnhealthyDisk(t, c, full)
	assertHealthyDisk(t, c, leader)
}

// freeAndCatchUp removes junk and waits up to within for member full to
// apply everything leader had applied.
func freeAndCatchUp(ctx context.Context, t *testing.T, c *membertest.Cluster, full, leader int, junk string, within time.Duration) {
	t.Helper()
	if err := os.Remove(junk); err != nil {
		t.Fatal(err)
	}
	fn, ln := c.Members[full].Node(), c.Members[leader].Node()
	caught, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	want := ln.FSM().Applied()
	if err := fn.FSM().WaitApplied(caught, want); err != nil {
		t.Fatalf("member %d did not catch up to index %d after space was freed (it has %d): %v", full, want, fn.FSM().Applied(), err)
	}
}
