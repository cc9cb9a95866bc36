package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/corenode/corenode/internal/etcdrelease"
)

// The etcd releases the data tests move data from and to.
const (
	etcd36 = "v3.6.16"
	etcd37 = "v3.7.3"
)

// leaseTTL is the TTL of the lease the data tests carry across: long
// enough to outlive the move, short enough to watch it expire.
const leaseTTL = 5

// rootUser and appUser are the users the data tests carry across.
const (
	rootUser, rootPassword = "root", "rootpw"
	appUser, appPassword   = "app", "apppw"
)

// dataWorkload gives a cluster what a move must carry: 200 writes over
// 150 keys (some keys get a second version), a delete, a compaction, users
// root and app (app may read and write app/ only) with auth on, a put as
// app, and last a key under a lease of leaseTTL seconds, granted just
// before the snapshot is saved. It returns the compaction revision.
func dataWorkload(t *testing.T, eps []string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := dataClient(t, eps, "", "")
	defer cli.Close()
	var compactAt int64
	for i := range 200 {
		resp, err := cli.Put(ctx, fmt.Sprintf("key/%03d", i%150), fmt.Sprintf("value-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 100 {
			compactAt = resp.Header.Revision
		}
	}
	if _, err := cli.Delete(ctx, "key/007"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, compactAt); err != nil {
		t.Fatal(err)
	}
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, rootUser, rootPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, rootUser, "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "app"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "app", "app/", clientv3.GetPrefixRangeEnd("app/"), clientv3.PermissionType(authpb.READWRITE))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, appUser, appPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, appUser, "app"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("auth step %d: %v", i, err)
		}
	}
	app := dataClient(t, eps, appUser, appPassword)
	defer app.Close()
	if _, err := app.Put(ctx, "app/config", "1"); err != nil {
		t.Fatal(err)
	}
	root := dataClient(t, eps, rootUser, rootPassword)
	defer root.Close()
	grant, err := root.Grant(ctx, leaseTTL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.Put(ctx, "leased", "x", clientv3.WithLease(grant.ID)); err != nil {
		t.Fatal(err)
	}
	return compactAt
}

func dataClient(t *testing.T, eps []string, user, password string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Username: user, Password: password, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// keyspace is every key of a member with its value, create and mod
// revision, version and lease, one line each, and the revision it is at,
// as root sees them.
func keyspace(t *testing.T, ep string) (string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli := dataClient(t, []string{ep}, rootUser, rootPassword)
	defer cli.Close()
	resp, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithSerializable())
	if err != nil {
		t.Fatalf("%s: %v", ep, err)
	}
	var b strings.Builder
	for _, kv := range resp.Kvs {
		fmt.Fprintf(&b, "%s=%s create %d mod %d version %d lease %x\n", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	return b.String(), resp.Header.Revision
}

// waitServing waits until every member of c answers root's linearizable
// read. (The cluster's waitHealthy asks etcdctl 3.4's endpoint health,
// which calls a cluster with auth on unhealthy: its unauthenticated probe
// gets "user name is empty", from etcd as from corenode.)
func waitServing(t *testing.T, c *cluster) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, m := range c.members {
		cli := dataClient(t, []string{m.clientURL}, rootUser, rootPassword)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := cli.Get(ctx, "leased")
			cancel()
			if err == nil {
				break
			}
			if !m.running() || time.Now().After(deadline) {
				cli.Close()
				t.Fatalf("%s does not serve (running %v): %v", m.name, m.running(), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		cli.Close()
	}
}

// follower is a member of c that is not its leader, asked as root.
func follower(t *testing.T, c *cluster) *member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli := dataClient(t, c.endpoints(), rootUser, rootPassword)
	defer cli.Close()
	for _, m := range c.members {
		st, err := cli.Status(ctx, m.clientURL)
		if err != nil {
			t.Fatal(err)
		}
		if st.Leader != st.Header.MemberId {
			return m
		}
	}
	t.Fatal("no follower")
	return nil
}

// saveSnapshot saves what ep's Snapshot RPC streams with etcdctl of rel.
func saveSnapshot(t *testing.T, rel etcdrelease.Release, ep, file string) {
	t.Helper()
	out, err := exec.Command(rel.Etcdctl, "--endpoints", ep, "--user", rootUser+":"+rootPassword, "snapshot", "save", file).CombinedOutput()
	if err != nil {
		t.Fatalf("etcdctl %s snapshot save: %v\n%s", rel.Version, err, out)
	}
}

// checkMoved checks that the members of c serve what the source served:
// the same keys with the same revisions, versions and leases, the same
// compaction, the users and their permissions, and the lease, which
// restarted with its whole TTL when c started (between started and
// healthy), expiring on time.
func checkMoved(t *testing.T, c *cluster, wantKeys string, wantRev, compactAt int64, started, healthy time.Time, expiryLag time.Duration) {
	t.Helper()
	for _, m := range c.members {
		got, rev := keyspace(t, m.clientURL)
		if got != wantKeys || rev != wantRev {
			t.Fatalf("%s serves at revision %d (want %d):\n%s\nwant:\n%s", m.name, rev, wantRev, got, wantKeys)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eps := c.endpoints()
	root := dataClient(t, eps, rootUser, rootPassword)
	defer root.Close()
	if _, err := root.Get(ctx, "key/000", clientv3.WithRev(compactAt-1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("a read before the compaction at %d: %v, want %v", compactAt, err, rpctypes.ErrCompacted)
	}
	app := dataClient(t, eps, appUser, appPassword)
	defer app.Close()
	if _, err := app.Put(ctx, "app/after-move", "1"); err != nil {
		t.Errorf("app writes under app/: %v", err)
	}
	if _, err := app.Get(ctx, "key/000"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("app reads outside app/: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}

	leased, err := root.Get(ctx, "leased")
	if err != nil || len(leased.Kvs) != 1 {
		t.Fatalf("the leased key: %v %v", leased, err)
	}
	ttl, err := root.TimeToLive(ctx, clientv3.LeaseID(leased.Kvs[0].Lease), clientv3.WithAttachedKeys())
	if err != nil || ttl.GrantedTTL != leaseTTL || len(ttl.Keys) != 1 {
		t.Fatalf("the lease: %+v %v; want TTL %d with the key", ttl, err, leaseTTL)
	}
	// The lease restarted with its whole TTL between started and healthy:
	// its key is there until started+TTL, and gone soon after healthy+TTL.
	time.Sleep(time.Until(started.Add(leaseTTL*time.Second - 300*time.Millisecond)))
	if resp, err := root.Get(ctx, "leased"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the leased key %v after the start, before its lease could expire: %v %v", time.Since(started), resp, err)
	}
	deadline := healthy.Add(leaseTTL*time.Second + expiryLag)
	for {
		resp, err := root.Get(ctx, "leased")
		if err == nil && len(resp.Kvs) == 0 {
			t.Logf("the lease expired %v after the start (%v after healthy)", time.Since(started).Round(time.Millisecond), time.Since(healthy).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leased key is still there %v after the start (lease TTL %d s): %v %v", time.Since(started), leaseTTL, resp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEtcdSnapshotIntoCorenode moves etcd 3.6's data into corenode as a
// new user would: `etcdctl snapshot save` from etcd, `corenode snapshot
// restore` once per member of a three-member cluster, the members started:
// every key and revision identical, the compaction, the users and their
// permissions, and the lease, restarted with its whole TTL, expiring on
// time.
func TestEtcdSnapshotIntoCorenode(t *testing.T) {
	requireEtcdctl(t)
	if os.Getenv(binaryEnv) != "" {
		t.Skip("corenode snapshot restore is corenode's own subcommand")
	}
	rel := etcdrelease.Build(t, etcd36)
	bin := buildBinary(t)
	etcd := startCluster(t, rel.Etcd)
	compactAt := dataWorkload(t, etcd.endpoints())
	file := filepath.Join(t.TempDir(), "etcd.db")
	saveSnapshot(t, rel, etcd.members[1].clientURL, file)
	wantKeys, wantRev := keyspace(t, etcd.members[0].clientURL)
	etcd.killAll()

	c := newCluster(t, bin, 1)
	for _, m := range c.members {
		out, err := exec.Command(bin, "snapshot", "restore", file, "--name", m.name, "--data-dir", m.dataDir,
			"--initial-cluster", c.initialCluster(), "--initial-advertise-peer-urls", m.peerURL,
			"--initial-cluster-token", c.token).CombinedOutput()
		if err != nil {
			t.Fatalf("corenode snapshot restore: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "(etcd snapshot)") {
			t.Errorf("corenode snapshot restore printed %q", out)
		}
	}
	started := time.Now()
	if err := c.startAll(); err != nil {
		t.Fatal(err)
	}
	waitServing(t, c)
	checkMoved(t, c, wantKeys, wantRev, compactAt, started, time.Now(), time.Second)
}

// snapshotStatus is what `etcdutl snapshot status -w json` prints.
type snapshotStatus struct {
	Hash      uint32 `json:"hash"`
	Revision  int64  `json:"revision"`
	TotalKey  int    `json:"totalKey"`
	TotalSize int64  `json:"totalSize"`
	Version   string `json:"version"`
}

// TestCorenodeSnapshotIntoEtcd moves corenode's data into etcd 3.6 and
// 3.7: `etcdctl snapshot save` from a corenode follower, `etcdutl snapshot
// status` reads the file, `etcdutl snapshot restore` once per member of a
// three-member etcd cluster, the members started: every key and revision
// identical, the compaction, the users and their permissions, and the
// lease expiring on time.
func TestCorenodeSnapshotIntoEtcd(t *testing.T) {
	requireEtcdctl(t)
	if os.Getenv(binaryEnv) != "" {
		t.Skip("checks corenode's Snapshot RPC against etcd's tools")
	}
	releases := []etcdrelease.Release{etcdrelease.Build(t, etcd36), etcdrelease.Build(t, etcd37)}
	src := startCluster(t, buildBinary(t))
	compactAt := dataWorkload(t, src.endpoints())
	file := filepath.Join(t.TempDir(), "corenode.db")
	saveSnapshot(t, releases[0], follower(t, src).clientURL, file)
	wantKeys, wantRev := keyspace(t, src.members[0].clientURL)
	src.killAll()

	for _, rel := range releases {
		t.Run(rel.Version, func(t *testing.T) {
			out, err := exec.Command(rel.Etcdutl, "snapshot", "status", file, "-w", "json").CombinedOutput()
			if err != nil {
				t.Fatalf("etcdutl snapshot status: %v\n%s", err, out)
			}
			var st snapshotStatus
			if err := json.Unmarshal(out, &st); err != nil {
				t.Fatalf("etcdutl snapshot status printed %q: %v", out, err)
			}
			if want := strings.Count(wantKeys, "\n"); st.Revision != wantRev || st.TotalKey != want || st.Version != "3.6.0" || st.TotalSize == 0 {
				t.Errorf("etcdutl snapshot status: %+v, want revision %d, %d keys, storage version 3.6.0", st, wantRev, want)
			}

			c := newCluster(t, rel.Etcd, 1)
			for _, m := range c.members {
				out, err := exec.Command(rel.Etcdutl, "snapshot", "restore", file, "--name", m.name, "--data-dir", m.dataDir,
					"--initial-cluster", c.initialCluster(), "--initial-advertise-peer-urls", m.peerURL,
					"--initial-cluster-token", c.token).CombinedOutput()
				if err != nil {
					t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
				}
			}
			started := time.Now()
			if err := c.startAll(); err != nil {
				t.Fatal(err)
			}
			waitServing(t, c)
			// etcd looks for expired leases every 500 ms and revokes them
			// through raft.
			checkMoved(t, c, wantKeys, wantRev, compactAt, started, time.Now(), 3*time.Second)
		})
	}
}
