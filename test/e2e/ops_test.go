package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// testMemberAddRemove grows the cluster the way an operator does: etcdctl
// member add, then the new process with the printed --initial-cluster and
// --initial-cluster-state existing; then etcdctl member remove, after which
// the removed process stops by itself.
func testMemberAddRemove(t *testing.T, c *cluster) {
	eps := c.endpoints()
	mustCtl(t, eps, "put", "/grow/before", "1")
	ports := freePorts(t, 2)
	dir := t.TempDir()
	m := &member{
		name:      "m4",
		clientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		peerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		dataDir:   filepath.Join(dir, "m4.data"),
		logPath:   filepath.Join(dir, "m4.log"),
	}
	// A member restarted moments ago (an earlier subtest restarts every
	// member) has been connected for less than the strict reconfiguration
	// check's 5 s: etcd and corenode answer "unhealthy cluster" until then,
	// and an operator tries again.
	var out string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		r := ctl(eps, "", "member", "add", m.name, "--peer-urls="+m.peerURL)
		if r.err == nil {
			out = strings.TrimRight(r.stdout, "\n")
			break
		}
		if !strings.Contains(r.stderr, "unhealthy cluster") || time.Now().After(deadline) {
			t.Fatalf("etcdctl member add: %v", r)
		}
	}
	id := regexp.MustCompile(`Member\s+([0-9a-f]+) added`).FindStringSubmatch(out)
	initial := regexp.MustCompile(`ETCD_INITIAL_CLUSTER="([^"]+)"`).FindStringSubmatch(out)
	state := regexp.MustCompile(`ETCD_INITIAL_CLUSTER_STATE="([^"]+)"`).FindStringSubmatch(out)
	if id == nil || initial == nil || state == nil || state[1] != "existing" {
		t.Fatalf("etcdctl member add printed:\n%s", out)
	}
	// The recipe's flags, and a token of its own: the new member learns
	// the ID the cluster gave it by its peer URL, whatever token it has.
	m.extra = []string{"--initial-cluster", initial[1], "--initial-cluster-state", state[1], "--initial-cluster-token", "not-the-clusters"}
	if err := c.start(m); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.kill(m)
		if t.Failed() {
			b, _ := os.ReadFile(m.logPath)
			t.Logf("----- m4 log -----\n%s", b)
		}
		m.logs.Close()
	})
	if err := c.waitHealthy([]*member{m}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	expectOutput(t, []string{m.clientURL}, "1", "get", "/grow/before", "--consistency=s", "--print-value-only")
	mustCtl(t, []string{m.clientURL}, "put", "/grow/through-m4", "2")
	expectOutput(t, eps, "2", "get", "/grow/through-m4", "--print-value-only")
	if n := strings.Count(mustCtl(t, eps, "member", "list"), "started"); n != 4 {
		t.Fatalf("member list after add: %d started members, want 4", n)
	}

	mustCtl(t, eps, "member", "remove", id[1])
	select {
	case <-m.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("removed member still running 15s after etcdctl member remove")
	}
	if os.Getenv(binaryEnv) == "" && !c.logsContainFile(m, "removed from the cluster") {
		t.Error("removed member exited without saying it was removed")
	}
	if n := strings.Count(mustCtl(t, eps, "member", "list"), "started"); n != 3 {
		t.Fatalf("member list after remove: %d started members, want 3", n)
	}
	mustCtl(t, eps, "put", "/grow/after", "3")
}

func (c *cluster) logsContainFile(m *member, s string) bool {
	b, err := os.ReadFile(m.logPath)
	return err == nil && strings.Contains(string(b), s)
}

// testSnapshotSaveRestore backs the cluster up with etcdctl snapshot save
// and builds a new one-member cluster from the file with corenode snapshot
// restore: every key and the lease with its key are there.
func testSnapshotSaveRestore(t *testing.T, c *cluster) {
	if os.Getenv(binaryEnv) != "" {
		t.Skip("restore is corenode's own subcommand; etcd restores with etcdutl")
	}
	eps := c.endpoints()
	for i := range 20 {
		mustCtl(t, eps, "put", fmt.Sprintf("/backup/%02d", i), fmt.Sprint(i))
	}
	var lease string
	if _, err := fmt.Sscanf(mustCtl(t, eps, "lease", "grant", "600"), "lease %s granted", &lease); err != nil {
		t.Fatal(err)
	}
	mustCtl(t, eps, "put", "/backup/leased", "x", "--lease="+lease)
	want := mustCtl(t, eps, "get", "/backup/", "--prefix")

	dir := t.TempDir()
	file := filepath.Join(dir, "backup.db")
	// etcdctl saves from exactly one endpoint; a follower relays the leader's.
	_, leader := c.leader(t, eps)
	var follower *member
	for _, m := range c.members {
		if m != leader {
			follower = m
			break
		}
	}
	if out := mustCtl(t, []string{follower.clientURL}, "snapshot", "save", file); !strings.Contains(out, "Snapshot saved") {
		t.Fatalf("snapshot save printed %q", out)
	}

	ports := freePorts(t, 2)
	r := &member{
		name:      "restored",
		clientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		peerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		dataDir:   filepath.Join(dir, "restored.data"),
		logPath:   filepath.Join(dir, "restored.log"),
	}
	r.extra = []string{"--initial-cluster", r.name + "=" + r.peerURL, "--initial-cluster-token", "restored"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.bin, "snapshot", "restore", file, "--name", r.name, "--data-dir", r.dataDir,
		"--initial-cluster", r.name+"="+r.peerURL, "--initial-advertise-peer-urls", r.peerURL,
		"--initial-cluster-token", "restored").CombinedOutput()
	if err != nil {
		t.Fatalf("corenode snapshot restore: %v\n%s", err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
	if err := c.start(r); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.kill(r)
		if t.Failed() {
			b, _ := os.ReadFile(r.logPath)
			t.Logf("----- restored member log -----\n%s", b)
		}
		r.logs.Close()
	})
	if err := c.waitHealthy([]*member{r}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	reps := []string{r.clientURL}
	if got := mustCtl(t, reps, "get", "/backup/", "--prefix"); got != want {
		t.Fatalf("restored cluster holds:\n%s\nwant:\n%s", got, want)
	}
	ttl := mustCtl(t, reps, "lease", "timetolive", lease, "--keys")
	if !strings.Contains(ttl, "/backup/leased") || strings.Contains(ttl, "already expired") {
		t.Fatalf("restored lease: %s", ttl)
	}
	mustCtl(t, reps, "put", "/backup/after-restore", "y")
}

// testSIGTERMHandsOver stops the leader with SIGTERM while clients write:
// it hands leadership over and exits cleanly, writes go on, and every
// acknowledged write is still there.
func testSIGTERMHandsOver(t *testing.T, c *cluster) {
	eps := c.endpoints()
	_, old := c.leader(t, eps)
	cli := newClient(t, eps)
	defer cli.Close()

	var (
		mu       sync.Mutex
		acked    = map[string]string{}
		lastAck  time.Time
		maxGap   time.Duration
		wg       sync.WaitGroup
		ctx, cut = context.WithCancel(context.Background())
	)
	defer cut()
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key, val := fmt.Sprintf("/term/%d/%05d", w, i), fmt.Sprint(i)
				pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				_, err := cli.Put(pctx, key, val)
				cancel()
				if err != nil {
					continue
				}
				mu.Lock()
				now := time.Now()
				if !lastAck.IsZero() && now.Sub(lastAck) > maxGap {
					maxGap = now.Sub(lastAck)
				}
				acked[key], lastAck = val, now
				mu.Unlock()
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	stopped := time.Now()
	if err := old.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s still running 15s after SIGTERM", old.name)
	}
	exitedAfter := time.Since(stopped)
	if code := old.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("%s exited with status %d after SIGTERM, want 0", old.name, code)
	}
	time.Sleep(time.Second)
	cut()
	wg.Wait()
	mu.Lock()
	t.Logf("SIGTERM: %s exited %v after the signal; %d writes acknowledged; longest gap between acknowledgements %v",
		old.name, exitedAfter.Round(time.Millisecond), len(acked), maxGap.Round(time.Millisecond))
	gapAfterStop := time.Since(lastAck)
	mu.Unlock()
	if gapAfterStop > time.Second+100*time.Millisecond {
		t.Errorf("no write acknowledged in the second after %s stopped", old.name)
	}
	var survivors []string
	for _, m := range c.members {
		if m != old {
			survivors = append(survivors, m.clientURL)
		}
	}
	checkAcked(t, "after SIGTERM of the leader", survivors, "/term/", acked, false, 10*time.Second)
	if err := c.start(old); err != nil {
		t.Fatal(err)
	}
	if err := c.waitHealthy(c.members, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}
