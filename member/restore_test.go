package member_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/corenode/corenode/logstore"
	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// TestSnapshotRestore saves a snapshot over the Maintenance API, as
// `etcdctl snapshot save` does (in etcd's format), and builds a new
// three-member cluster from it: every key, revision and lease is there,
// under a new cluster ID.
func TestSnapshotRestore(t *testing.T) {
	old := membertest.New(t, 3)
	cli := old.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 50 {
		if _, err := cli.Put(ctx, fmt.Sprintf("key/%02d", i), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Delete(ctx, "key/00"); err != nil {
		t.Fatal(err)
	}
	grant, err := cli.Grant(ctx, 120)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "leased", "x", clientv3.WithLease(grant.ID)); err != nil {
		t.Fatal(err)
	}
	before, err := cli.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	oldStatus, err := cli.Status(ctx, old.Endpoint(1))
	if err != nil {
		t.Fatal(err)
	}
	// Save from a follower: any member's state serves.
	file := filepath.Join(t.TempDir(), "backup.db")
	saveSnapshot(t, ctx, old.Client(1), file)
	old.Close()

	t.Run("damaged file is refused", func(t *testing.T) {
		data, _ := os.ReadFile(file)
		bad := filepath.Join(t.TempDir(), "truncated.db")
		os.WriteFile(bad, data[:len(data)-100], 0o600)
		_, err := member.Restore(member.RestoreConfig{SnapshotFile: bad, Name: "a", DataDir: filepath.Join(t.TempDir(), "a"),
			InitialCluster: "a=http://127.0.0.1:1", InitialAdvertisePeerURLs: []string{"http://127.0.0.1:1"}})
		if err == nil || !strings.Contains(err.Error(), "checksum") {
			t.Fatalf("restore of a truncated file: %v", err)
		}
	})
	t.Run("non-empty data dir is refused", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "raft.db"), []byte("x"), 0o600)
		_, err := member.Restore(member.RestoreConfig{SnapshotFile: file, Name: "a", DataDir: dir,
			InitialCluster: "a=http://127.0.0.1:1", InitialAdvertisePeerURLs: []string{"http://127.0.0.1:1"}})
		if err == nil || !strings.Contains(err.Error(), "not empty") {
			t.Fatalf("restore into a used data dir: %v", err)
		}
	})

	dir := t.TempDir()
	// Each member's data dir is seeded with the log store restore was asked
	// for, and the member started on it (with no store named) keeps it.
	stores := []string{logstore.BoltDB, logstore.WAL, ""}
	held := map[string]string{logstore.BoltDB: "raft.db", logstore.WAL: "wal", "": "wal"}
	restored := membertest.New(t, 3, membertest.WithConfig(func(i int, cfg *member.Config) {
		cfg.DataDir = filepath.Join(dir, cfg.Name)
		stats, err := member.Restore(member.RestoreConfig{SnapshotFile: file, Name: cfg.Name, DataDir: cfg.DataDir,
			InitialCluster: cfg.InitialCluster, InitialAdvertisePeerURLs: cfg.InitialAdvertisePeerURLs, LogStore: stores[i]})
		if err != nil {
			t.Fatalf("restore member %d: %v", i, err)
		}
		if _, err := os.Stat(filepath.Join(cfg.DataDir, held[stores[i]])); err != nil {
			t.Fatalf("restore member %d with log store %q: %v", i, stores[i], err)
		}
		if stats.Format != "etcd" || stats.Keys != len(before.Kvs) || stats.Leases != 1 || stats.Revision != before.Header.Revision {
			t.Fatalf("restore stats %+v, want etcd's format, %d keys, 1 lease, revision %d", stats, len(before.Kvs), before.Header.Revision)
		}
	}))
	for i := range 3 {
		rcli := restored.Client(i)
		after, err := rcli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithSerializable())
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(after.Kvs) != fmt.Sprint(before.Kvs) {
			t.Fatalf("member %d after restore:\n%v\nwant\n%v", i, after.Kvs, before.Kvs)
		}
	}
	rcli := restored.Client()
	ttl, err := rcli.TimeToLive(ctx, grant.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.TTL <= 0 || ttl.TTL > 120 || len(ttl.Keys) != 1 {
		t.Fatalf("restored lease: %+v %v", ttl, err)
	}
	if _, err := rcli.KeepAliveOnce(ctx, grant.ID); err != nil {
		t.Fatalf("keep-alive of the restored lease: %v", err)
	}
	put, err := rcli.Put(ctx, "after", "restore")
	if err != nil {
		t.Fatal(err)
	}
	if put.Header.Revision != before.Header.Revision+1 {
		t.Fatalf("first write after restore at revision %d, want %d", put.Header.Revision, before.Header.Revision+1)
	}
	if put.Header.ClusterId == oldStatus.Header.ClusterId {
		t.Fatal("restored cluster kept the old cluster ID")
	}
	ml, err := rcli.MemberList(ctx)
	if err != nil || len(ml.Members) != 3 {
		t.Fatalf("member list after restore: %v %v", ml, err)
	}
	restored.Close()
	for i, s := range stores {
		entries, _ := os.ReadDir(filepath.Join(dir, fmt.Sprintf("m%d", i)))
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		other := map[string]string{"raft.db": "wal", "wal": "raft.db"}[held[s]]
		if !slices.Contains(names, held[s]) || slices.Contains(names, other) {
			t.Errorf("member %d restored with log store %q: data dir holds %v", i, s, names)
		}
	}
}

func saveSnapshot(t *testing.T, ctx context.Context, cli *clientv3.Client, file string) {
	t.Helper()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatalf("snapshot stream: %v", err)
	}
}

// TestRestoreCorenodeSnapshot restores a file that `etcdctl snapshot save`
// wrote from corenode before its Snapshot RPC streamed etcd's format
// (testdata/corenode-v5.snap: corenode's snapshot format, version 5, and
// its SHA-256): old/2 to old/10 at revisions 3 to 11 (old/1 deleted at
// 12), old/leased at 13 under a 900 s lease, compacted at 5, user root
// (password rootpw), auth on.
func TestRestoreCorenodeSnapshot(t *testing.T) {
	dir := t.TempDir()
	c := membertest.New(t, 1, membertest.WithConfig(func(i int, cfg *member.Config) {
		cfg.DataDir = filepath.Join(dir, cfg.Name)
		stats, err := member.Restore(member.RestoreConfig{SnapshotFile: filepath.Join("testdata", "corenode-v5.snap"), Name: cfg.Name,
			DataDir: cfg.DataDir, InitialCluster: cfg.InitialCluster, InitialAdvertisePeerURLs: cfg.InitialAdvertisePeerURLs})
		if err != nil {
			t.Fatal(err)
		}
		if stats.Format != "corenode" || stats.Keys != 10 || stats.Revision != 13 || stats.Leases != 1 {
			t.Fatalf("restore stats %+v, want corenode's format, 10 keys, revision 13, 1 lease", stats)
		}
	}))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli := loginAs(t, clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}, "root", "rootpw")
	defer cli.Close()
	all, err := cli.Get(ctx, "old/", clientv3.WithPrefix())
	if err != nil || len(all.Kvs) != 10 || all.Header.Revision != 13 {
		t.Fatalf("restored: %v %v, want 10 keys at revision 13", all, err)
	}
	if _, err := cli.Get(ctx, "old/2", clientv3.WithRev(4)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("a read before the compaction at 5: %v", err)
	}
}
