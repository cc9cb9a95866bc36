package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLocalClusterRecipe runs the documented way to grow and shrink a
// cluster, scripts/local-cluster with etcdctl: start three members, add a
// learner and promote it, add a voter, remove two (m1, which led since the
// start unless an election moved it), and checks after each step that
// `etcdctl endpoint status --cluster` lists the members expected, each
// answering, that member list shows the learners expected, and that a write
// goes through.
func TestLocalClusterRecipe(t *testing.T) {
	requireEtcdctl(t)
	root := repoRoot(t)
	dir := t.TempDir()
	// Ports 2379+offset, 22379+offset, ...: clear of the defaults a
	// developer's own local cluster uses.
	env := append(envWithout("CORENODE_LOCAL_", "ETCDCTL_"), "CORENODE_LOCAL_DIR="+dir, "CORENODE_LOCAL_PORT_OFFSET=1011", "ETCDCTL_API=3")
	script := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "local-cluster"), args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("scripts/local-cluster %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Cleanup(func() {
		script("stop")
		if t.Failed() {
			for _, n := range []string{"m1", "m2", "m3", "m4", "m5"} {
				if b, err := os.ReadFile(filepath.Join(dir, n+".log")); err == nil {
					t.Logf("----- %s log -----\n%s", n, b)
				}
			}
		}
	})
	port := func(n int) string {
		base := 2379
		if n > 1 {
			base = n*10000 + 2379
		}
		return fmt.Sprintf("127.0.0.1:%d", base+1011)
	}
	// expect checks the cluster as endpoint status --cluster, asked through
	// member via, sees it: exactly these members, and these learners.
	expect := func(via int, members []int, learners ...int) {
		t.Helper()
		out := mustCtl(t, []string{port(via)}, "endpoint", "status", "--cluster")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != len(members) {
			t.Fatalf("endpoint status --cluster: %d members, want %v:\n%s", len(lines), members, out)
		}
		for _, n := range members {
			if !strings.Contains(out, "http://"+port(n)+",") {
				t.Fatalf("endpoint status --cluster has no m%d:\n%s", n, out)
			}
		}
		ml := mustCtl(t, []string{port(via)}, "member", "list")
		for _, n := range learners {
			if !strings.Contains(ml, fmt.Sprintf(", m%d, http://%s, http://%s, true", n, peerOf(port(n)), port(n))) {
				t.Fatalf("member list does not show m%d as a learner:\n%s", n, ml)
			}
		}
		if got := strings.Count(ml, ", true"); got != len(learners) {
			t.Fatalf("member list shows %d learners, want %d:\n%s", got, len(learners), ml)
		}
		mustCtl(t, []string{port(via)}, "put", "/recipe", fmt.Sprint(members))
	}

	script("start")
	expect(1, []int{1, 2, 3})
	script("add", "m4", "--learner")
	expect(4, []int{1, 2, 3, 4}, 4)
	id := memberID(t, mustCtl(t, []string{port(1)}, "member", "list"), "m4")
	mustCtl(t, []string{port(2)}, "member", "promote", id)
	expect(4, []int{1, 2, 3, 4})
	script("add", "m5")
	expect(5, []int{1, 2, 3, 4, 5})
	script("remove", "m5")
	expect(2, []int{1, 2, 3, 4})
	script("remove", "m1")
	expect(3, []int{2, 3, 4})
	expectOutput(t, []string{port(4)}, "[2 3 4]", "get", "/recipe", "--print-value-only")
}

// peerOf is the peer address of a member whose client address is client.
func peerOf(client string) string {
	host, p, _ := strings.Cut(client, ":")
	var n int
	fmt.Sscan(p, &n)
	return fmt.Sprintf("%s:%d", host, n+1)
}

// memberID finds a member's hex ID by name in etcdctl member list's output.
func memberID(t *testing.T, list, name string) string {
	t.Helper()
	for _, line := range strings.Split(list, "\n") {
		f := strings.Split(line, ", ")
		if len(f) > 2 && f[2] == name {
			return f[0]
		}
	}
	t.Fatalf("no member %s in:\n%s", name, list)
	return ""
}
