package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/internal/etcdrelease"
)

// TestMakeMirror is the live migration of docs/operations.md, both ways,
// as an operator runs it: `etcdctl make-mirror` copies etcd 3.6's keys
// into corenode while a writer keeps writing to etcd; the writer stops,
// the mirror catches up, and the writer carries on against corenode. Then
// the same from corenode back into a new etcd. Keys and values arrive;
// revisions and leases do not (the destination gives its own revisions,
// and a leased key arrives without its lease), as the guide says.
func TestMakeMirror(t *testing.T) {
	requireEtcdctl(t)
	if os.Getenv(binaryEnv) != "" {
		t.Skip("mirrors between etcd and corenode")
	}
	rel := etcdrelease.Build(t, etcd36)
	bin := buildBinary(t)
	t.Run("etcd to corenode", func(t *testing.T) {
		mirror(t, rel, startCluster(t, rel.Etcd), startCluster(t, bin))
	})
	t.Run("corenode to etcd", func(t *testing.T) {
		mirror(t, rel, startCluster(t, bin), startCluster(t, rel.Etcd))
	})
}

// mirror moves src's keys into dst with make-mirror while a writer
// writes to src, then moves the writer to dst.
func mirror(t *testing.T, rel etcdrelease.Release, src, dst *cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	from := dataClient(t, src.endpoints(), "", "")
	defer from.Close()
	to := dataClient(t, dst.endpoints(), "", "")
	defer to.Close()
	// 100 keys written twice each: 200 revisions at the source, which the
	// mirror's first copy turns into 100 at the destination.
	for i := range 200 {
		if _, err := from.Put(ctx, fmt.Sprintf("base/%03d", i%100), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	grant, err := from.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := from.Put(ctx, "leased", "x", clientv3.WithLease(grant.ID)); err != nil {
		t.Fatal(err)
	}

	// The writer: puts over 50 keys and a delete now and then, one at a
	// time, against whichever cluster it is pointed at.
	var (
		mu      sync.Mutex
		target  = from
		written int
		stop    = make(chan struct{})
		done    = make(chan error, 1)
	)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			mu.Lock()
			cli := target
			key := fmt.Sprintf("live/%02d", i%50)
			var err error
			if i%7 == 3 {
				_, err = cli.Delete(ctx, key)
			} else {
				_, err = cli.Put(ctx, key, fmt.Sprint(i))
			}
			if err == nil {
				written++
			}
			mu.Unlock()
			if err != nil {
				done <- fmt.Errorf("write %d: %w", i, err)
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)

	cmd := exec.Command(rel.Etcdctl, "--endpoints", strings.Join(src.endpoints(), ","), "make-mirror", dst.members[0].clientURL)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("etcdctl make-mirror:\n%s", out.String())
		}
	}()

	// The writer keeps writing to the source while the mirror copies
	// what was there and follows what comes.
	time.Sleep(2 * time.Second)
	// The switch: the writer stops, the mirror catches up, the writer
	// goes on against the destination.
	mu.Lock()
	before := written
	var want string
	var srcRev, dstRev int64
	deadline := time.Now().Add(20 * time.Second)
	for {
		var got string
		want, srcRev = values(t, ctx, from)
		got, dstRev = values(t, ctx, to)
		if got == want {
			break
		}
		if time.Now().After(deadline) {
			mu.Unlock()
			t.Fatalf("the destination has not caught up 20 s after the writes stopped:\n%s\nwant\n%s", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	target = to
	mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("the writer: %v", err)
	}
	mu.Lock()
	t.Logf("%d writes to the source (the mirror started after 0.3 s of them); the same keys at revision %d there, %d at the destination; %d writes to the destination after the switch",
		before, srcRev, dstRev, written-before)
	if before < 100 || written == before {
		t.Errorf("%d writes before the switch, %d after: the writer did not keep writing", before, written-before)
	}
	mu.Unlock()

	// What make-mirror does not carry: the revisions (the destination
	// numbers its own writes: one per key copied, one per revision that
	// followed) and the lease (the key arrives without it).
	if dstRev >= srcRev {
		t.Errorf("the destination is at revision %d, the source at %d: the copy of 100 keys written 200 times should have left it behind", dstRev, srcRev)
	}
	leased, err := to.Get(ctx, "leased")
	if err != nil || len(leased.Kvs) != 1 || leased.Kvs[0].Lease != 0 {
		t.Errorf("the leased key at the destination: %v %v, want it without a lease", leased, err)
	}
}

// values is every key and value of cli's cluster, without revisions, and
// the revision they are at.
func values(t *testing.T, ctx context.Context, cli *clientv3.Client) (string, int64) {
	t.Helper()
	resp, err := cli.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, kv := range resp.Kvs {
		fmt.Fprintf(&b, "%s=%s\n", kv.Key, kv.Value)
	}
	return b.String(), resp.Header.Revision
}
