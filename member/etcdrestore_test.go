package member_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// etcdSnapshot is what `etcdctl snapshot save` wrote from etcd 3.6.16
// after etcddb/testdata/make-snapshots' writes: 22 keys at revision 27,
// compacted at 23, a lease of 600 s with the key "leased", users root
// (password rootpw) and svc (svcpw, readwrite on svc/), auth on.
var etcdSnapshot = filepath.Join("..", "etcddb", "testdata", "etcd-3.6.db")

// TestRestoreEtcdSnapshot seeds a three-member cluster from etcd's
// snapshot file: every member serves etcd's keys with their revisions,
// the compaction, the lease with its whole TTL and its key, and etcd's
// users and roles with auth on; the next write gets the next revision.
func TestRestoreEtcdSnapshot(t *testing.T) {
	t.Run("damaged file is refused", func(t *testing.T) {
		data, err := os.ReadFile(etcdSnapshot)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 1
		bad := filepath.Join(t.TempDir(), "damaged.db")
		os.WriteFile(bad, data, 0o600)
		dataDir := filepath.Join(t.TempDir(), "a")
		_, err = member.Restore(member.RestoreConfig{SnapshotFile: bad, Name: "a", DataDir: dataDir,
			InitialCluster: "a=http://127.0.0.1:1", InitialAdvertisePeerURLs: []string{"http://127.0.0.1:1"}})
		if err == nil || !strings.Contains(err.Error(), "checksum mismatch") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("restore of a damaged file: %v; want one line saying the checksum does not match", err)
		}
		if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
			t.Errorf("a refused restore left its data dir behind: %v", err)
		}
	})

	t.Run("a db file without its SHA-256 needs --skip-hash-check", func(t *testing.T) {
		data, err := os.ReadFile(etcdSnapshot)
		if err != nil {
			t.Fatal(err)
		}
		db := filepath.Join(t.TempDir(), "db")
		os.WriteFile(db, data[:len(data)-sha256.Size], 0o600)
		cfg := member.RestoreConfig{SnapshotFile: db, Name: "a", DataDir: filepath.Join(t.TempDir(), "a"),
			InitialCluster: "a=http://127.0.0.1:1", InitialAdvertisePeerURLs: []string{"http://127.0.0.1:1"}}
		if _, err := member.Restore(cfg); err == nil || !strings.Contains(err.Error(), "--skip-hash-check") {
			t.Fatalf("restore of a file without its SHA-256: %v; want a pointer to --skip-hash-check", err)
		}
		cfg.SkipHashCheck = true
		if stats, err := member.Restore(cfg); err != nil || stats.Keys != 22 || stats.Revision != 27 {
			t.Fatalf("restore with --skip-hash-check: %+v %v", stats, err)
		}
	})

	dir := t.TempDir()
	c := membertest.New(t, 3, membertest.WithConfig(func(i int, cfg *member.Config) {
		cfg.DataDir = filepath.Join(dir, cfg.Name)
		stats, err := member.Restore(member.RestoreConfig{SnapshotFile: etcdSnapshot, Name: cfg.Name, DataDir: cfg.DataDir,
			InitialCluster: cfg.InitialCluster, InitialAdvertisePeerURLs: cfg.InitialAdvertisePeerURLs})
		if err != nil {
			t.Fatalf("restore member %d: %v", i, err)
		}
		if stats.Format != "etcd" || stats.StorageVersion != "3.6.0" || stats.Keys != 22 || stats.Revision != 27 || stats.Leases != 1 {
			t.Fatalf("restore stats %+v, want etcd's 3.6.0 file: 22 keys, revision 27, 1 lease", stats)
		}
	}))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	root := loginAs(t, cfg, "root", "rootpw")
	defer root.Close()

	for i := range 3 {
		cfg := cfg
		cfg.Endpoints = []string{c.Endpoint(i)}
		cli := loginAs(t, cfg, "root", "rootpw")
		all, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithSerializable())
		cli.Close()
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		if len(all.Kvs) != 22 || all.Header.Revision != 27 {
			t.Fatalf("member %d: %d keys at revision %d, want 22 at 27", i, len(all.Kvs), all.Header.Revision)
		}
	}
	k5, err := root.Get(ctx, "k/05")
	if err != nil || len(k5.Kvs) != 1 || fmt.Sprintf("%s %d %d %d", k5.Kvs[0].Value, k5.Kvs[0].CreateRevision, k5.Kvs[0].ModRevision, k5.Kvs[0].Version) != "v5c 7 23 3" {
		t.Fatalf("k/05: %v %v; want v5c created at 7, modified at 23, version 3", k5, err)
	}
	if _, err := root.Get(ctx, "k/05", clientv3.WithRev(22)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("a read at 22, before etcd's compaction at 23: %v, want %v", err, rpctypes.ErrCompacted)
	}
	if old, err := root.Get(ctx, "k/00", clientv3.WithRev(23)); err != nil || len(old.Kvs) != 1 || string(old.Kvs[0].Value) != "v0" {
		t.Errorf("k/00 at 23, before its deletion at 24: %v %v", old, err)
	}

	leased, err := root.Get(ctx, "leased")
	if err != nil || len(leased.Kvs) != 1 || leased.Kvs[0].Lease == 0 {
		t.Fatalf("leased key: %v %v", leased, err)
	}
	ttl, err := root.TimeToLive(ctx, clientv3.LeaseID(leased.Kvs[0].Lease), clientv3.WithAttachedKeys())
	if err != nil || ttl.GrantedTTL != 600 || ttl.TTL < 590 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "leased" {
		t.Fatalf("restored lease: %+v %v; want granted 600 s, restarted with (nearly) all of it, key leased", ttl, err)
	}

	svc := loginAs(t, cfg, "svc", "svcpw")
	defer svc.Close()
	if _, err := svc.Put(ctx, "svc/b", "2"); err != nil {
		t.Errorf("svc writes under svc/: %v", err)
	}
	if _, err := svc.Put(ctx, "other", "2"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("svc writes outside svc/: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}
	put, err := root.Put(ctx, "after", "restore")
	if err != nil || put.Header.Revision != 29 {
		t.Fatalf("the second write after the restore: %v %v, want revision 29", put, err)
	}
}
