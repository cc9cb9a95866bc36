package member_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/logstore"
	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// startOn starts member i of c on its data dir with listeners of its own
// (the test wants Start's error, not Restart's retries) and cfgs edits.
func startOn(t *testing.T, c *membertest.Cluster, i int, edit func(*member.Config)) (*member.Member, error) {
	t.Helper()
	cfg := c.Config(i)
	var err error
	if cfg.PeerListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	cl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientListeners = []net.Listener{cl}
	if edit != nil {
		edit(&cfg)
	}
	m, err := member.Start(cfg)
	if err != nil {
		cfg.PeerListener.Close()
		cl.Close()
	}
	return m, err
}

// TestDamagedWALStopsMember changes one byte of a stored value inside a
// stopped member's wal segment: the member refuses to start with one line
// that says what is damaged and what to do, instead of serving the changed
// value (or panicking in raft).
func TestDamagedWALStopsMember(t *testing.T) {
	c := membertest.New(t, 3, membertest.WithConfig(func(_ int, cfg *member.Config) { cfg.LogStore = logstore.WAL }))
	cli := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 50 {
		if _, err := cli.Put(ctx, fmt.Sprintf("k%02d", i), fmt.Sprintf("needle-%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	f := (c.WaitLeader() + 1) % 3
	// The follower has every write once a linearizable read through it
	// answers with the last.
	if r, err := c.Client(f).Get(ctx, "k49"); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("read k49 via member %d: %v %v", f, r, err)
	}
	c.Stop(f)

	segs, err := filepath.Glob(filepath.Join(c.Config(f).DataDir, "wal", "*.wal"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("wal segments: %v %v", segs, err)
	}
	data, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	// An early write, far from the last batch (whose damage raft-wal would
	// take for a torn write and drop).
	at := bytes.Index(data, []byte("needle-05"))
	if at < 0 {
		t.Fatalf("needle-05 not in %s", segs[0])
	}
	data[at+len("needle-0")] = '6' // needle-05 -> needle-06
	if err := os.WriteFile(segs[0], data, 0o600); err != nil {
		t.Fatal(err)
	}

	m, err := startOn(t, c, f, nil)
	if err == nil {
		m.Close()
		t.Fatal("member started on a damaged wal")
	}
	assertRefusedDamaged(t, err, "checksum mismatch", c.Config(f).DataDir)

	// The rest of the cluster still has the value as written.
	r, err := c.Client((f+1)%3).Get(ctx, "k05")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "needle-05" {
		t.Fatalf("k05 on the others: %v %v", r, err)
	}
}

// TestLogStoreMismatchIsRefused restarts a member of each store asking for
// the other: the data dir keeps the store it was created with, and the
// error names both and what to do.
func TestLogStoreMismatchIsRefused(t *testing.T) {
	stores := []string{logstore.BoltDB, logstore.WAL, ""}
	c := membertest.New(t, 3, membertest.WithConfig(func(i int, cfg *member.Config) { cfg.LogStore = stores[i] }))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Client().Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	want := []string{logstore.BoltDB, logstore.WAL, logstore.Default}
	for i := range 3 {
		if got := c.Members[i].Node().LogStore(); got != want[i] {
			t.Errorf("member %d asked for %q opened %q, want %q", i, stores[i], got, want[i])
		}
	}
	for _, i := range []int{0, 1} {
		other := map[string]string{logstore.BoltDB: logstore.WAL, logstore.WAL: logstore.BoltDB}[want[i]]
		c.Stop(i)
		m, err := startOn(t, c, i, func(cfg *member.Config) { cfg.LogStore = other })
		if err == nil {
			m.Close()
			t.Fatalf("member %d holding %s started with %s", i, want[i], other)
		}
		var mismatch *logstore.MismatchError
		if !errors.As(err, &mismatch) || mismatch.Holds != want[i] || mismatch.Asked != other {
			t.Fatalf("member %d holding %s started with %s: %v", i, want[i], other, err)
		}
		for _, s := range []string{"--log-store " + want[i], "--log-store " + other, c.Config(i).DataDir} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not say %q", err, s)
			}
		}
		// With its own store named it starts, and has the write.
		c.Restart(i)
	}
	r, err := c.Client(0, 1).Get(ctx, "k")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
		t.Fatalf("k after restarts: %v %v", r, err)
	}
}

// TestLaggingFollowerInstallsSnapshot runs on each log store: a follower
// stopped while the others write and truncate their logs past it gets the
// leader's snapshot when it returns, then keeps appending after it
// (raft-wal refuses an append that leaves a gap in the log it holds).
func TestLaggingFollowerInstallsSnapshot(t *testing.T) {
	for _, store := range []string{logstore.WAL, logstore.BoltDB} {
		t.Run(store, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, put := snapshottingCluster(t, ctx, store)
			put(0, 10)
			f := (c.WaitLeader() + 1) % 3
			c.Stop(f)
			put(10, 200)
			for i, m := range c.Members {
				if i != f {
					if err := m.Node().Raft().Snapshot().Error(); err != nil {
						t.Fatalf("snapshot on member %d: %v", i, err)
					}
				}
			}
			c.Restart(f)
			put(200, 230) // appended after the installed snapshot
			count := func() int64 {
				r, err := c.Client(f).Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithCountOnly())
				if err != nil {
					return -1
				}
				return r.Count
			}
			membertest.Eventually(t, 10*time.Second, func() bool { return count() == 230 }, "the returning follower did not catch up")
			if got := c.Members[f].Node().LogStore(); got != store {
				t.Fatalf("follower runs on %s, want %s", got, store)
			}
		})
	}
}

// TestDeletedSnapshotDirStopsMember deletes the snapshots directory of a
// stopped member whose log was truncated behind its snapshot: the member
// refuses to start with one line that names the missing snapshot and what
// to do (raft itself would panic with "log not found"), on either store.
func TestDeletedSnapshotDirStopsMember(t *testing.T) {
	for _, store := range []string{logstore.WAL, logstore.BoltDB} {
		t.Run(store, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, put := snapshottingCluster(t, ctx, store)
			put(0, 100)
			leader := c.WaitLeader()
			f := (leader + 1) % 3
			c.CatchUp(leader)
			if err := c.Members[f].Node().Raft().Snapshot().Error(); err != nil {
				t.Fatalf("snapshot on member %d: %v", f, err)
			}
			c.Stop(f)
			dir := filepath.Join(c.Config(f).DataDir, "snapshots")
			if metas, _ := filepath.Glob(filepath.Join(dir, "*", "meta.json")); len(metas) == 0 {
				t.Fatalf("no snapshot in %s to delete", dir)
			}
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}

			m, err := startOn(t, c, f, nil)
			if err == nil {
				m.Close()
				t.Fatal("member started without the snapshot its log was truncated behind")
			}
			assertRefusedDamaged(t, err, "no snapshot holds the entries before it", c.Config(f).DataDir)
		})
	}
}

// snapshottingCluster is a 3-member cluster on store that snapshots and
// truncates its log every 20 entries (keeping 20 behind), and put, which
// writes keys k<from>..k<to-1>.
func snapshottingCluster(t *testing.T, ctx context.Context, store string) (*membertest.Cluster, func(from, to int)) {
	c := membertest.New(t, 3, membertest.WithConfig(func(_ int, cfg *member.Config) {
		cfg.LogStore = store
		cfg.SnapshotCount = 20 // also the entries kept behind a snapshot
	}))
	cli := c.Client()
	return c, func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := cli.Put(ctx, fmt.Sprintf("k%03d", i), "v"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// assertRefusedDamaged checks a start refused on a damaged data dir: a
// CorruptLogError in one line that says what is damaged (cause), where
// (dataDir) and the commands that bring the member back.
func assertRefusedDamaged(t *testing.T, err error, cause, dataDir string) {
	t.Helper()
	var corrupt *logstore.CorruptError
	if !errors.As(err, &corrupt) {
		t.Fatalf("start on a damaged data dir: want a CorruptLogError, got %v", err)
	}
	msg := err.Error()
	t.Logf("refused: %s", msg)
	for _, want := range []string{"is damaged", cause, dataDir, "etcdctl member remove", "--initial-cluster-state existing"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error is more than one line: %q", msg)
	}
}

// TestDamagedBoltStopsMember damages, for real, the bolt file of a stopped
// member on each store (raft.db; raft-wal's meta database, which holds the
// wal's segment list and raft's term and vote): bytes changed all over it,
// the file cut to half its length, the file emptied. Each time the member
// refuses to start with one line that names the file and what to do, where
// bbolt would panic (on a goroutine of its own, which would end this test
// binary) or start an empty log with no term or vote. With the file put
// back it starts and serves again.
func TestDamagedBoltStopsMember(t *testing.T) {
	for _, store := range []string{logstore.BoltDB, logstore.WAL} {
		t.Run(store, func(t *testing.T) {
			c := membertest.New(t, 3, membertest.WithConfig(func(_ int, cfg *member.Config) { cfg.LogStore = store }))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cli := c.Client()
			for i := range 50 {
				if _, err := cli.Put(ctx, fmt.Sprintf("k%02d", i), "v"); err != nil {
					t.Fatal(err)
				}
			}
			leader := c.WaitLeader()
			f := (leader + 1) % 3
			c.CatchUp(leader)
			c.Stop(f)
			dataDir := c.Config(f).DataDir
			name := "raft.db"
			if store == logstore.WAL {
				name = "wal/wal-meta.db"
			}
			path := filepath.Join(dataDir, name)
			pristine, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			page := os.Getpagesize()
			if len(pristine) < 4*page {
				t.Fatalf("%s: %d bytes, fewer than bolt's 4 pages", path, len(pristine))
			}
			for _, d := range []struct {
				name, cause string
				damage      func(data []byte) []byte
			}{
				{"changed bytes", name + ": ", func(data []byte) []byte {
					// Every 7th byte past the two meta pages (which bolt keeps
					// two of, and falls back from one to the other).
					for i := 2 * page; i < len(data); i += 7 {
						data[i] ^= 0x5a
					}
					return data
				}},
				{"cut to half", name + ": truncated", func(data []byte) []byte { return data[:len(data)/2] }},
				{"emptied", name + ": empty", func([]byte) []byte { return nil }},
			} {
				if err := os.WriteFile(path, d.damage(append([]byte(nil), pristine...)), 0o600); err != nil {
					t.Fatal(err)
				}
				m, err := startOn(t, c, f, nil)
				if err == nil {
					m.Close()
					t.Fatalf("member started on a %s %s", d.name, name)
				}
				assertRefusedDamaged(t, err, d.cause, dataDir)
			}

			if err := os.WriteFile(path, pristine, 0o600); err != nil {
				t.Fatal(err)
			}
			c.Restart(f)
			if _, err := cli.Put(ctx, "after", "repair"); err != nil {
				t.Fatal(err)
			}
			r, err := c.Client(f).Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil || r.Count != 50 {
				t.Fatalf("keys on the repaired member: %v %v, want 50", r, err)
			}
		})
	}
}
