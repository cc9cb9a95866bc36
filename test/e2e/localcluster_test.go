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
	script, _ := localCluster(t, root, dir, 1011)
	port := func(n int) string { return localPort(n, 1011) }
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

// localCluster runs scripts/local-cluster on dir, with ports offset by
// offset: script fails the test when the script fails, try returns its
// output and error. A cleanup stops the members and, if the test failed,
// logs theirs.
func localCluster(t *testing.T, root, dir string, offset int) (script func(args ...string) string, try func(args ...string) (string, error)) {
	env := append(envWithout("CORENODE_LOCAL_", "ETCDCTL_"), "CORENODE_LOCAL_DIR="+dir,
		fmt.Sprintf("CORENODE_LOCAL_PORT_OFFSET=%d", offset), "ETCDCTL_API=3")
	try = func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "local-cluster"), args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	script = func(args ...string) string {
		t.Helper()
		out, err := try(args...)
		if err != nil {
			t.Fatalf("scripts/local-cluster %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
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
	return script, try
}

// localPort is member mN's client address in a local cluster whose ports
// are offset by offset.
func localPort(n, offset int) string {
	base := 2379
	if n > 1 {
		base = n*10000 + 2379
	}
	return fmt.Sprintf("127.0.0.1:%d", base+offset)
}

// TestLocalClusterRefusesPartialData: scripts/local-cluster start restarts
// m1..m3 when all have data dirs, and refuses, with one line that says
// what to do and without starting anyone, when some have data and others
// none: started with --initial-cluster-state new, those would bootstrap a
// second cluster beside the first.
func TestLocalClusterRefusesPartialData(t *testing.T) {
	requireEtcdctl(t)
	dir := t.TempDir()
	script, try := localCluster(t, repoRoot(t), dir, 1021)
	eps := []string{localPort(1, 1021), localPort(2, 1021), localPort(3, 1021)}
	script("start")
	mustCtl(t, eps, "put", "/kept", "1")
	script("stop")
	script("start") // all three have data: a restart
	expectOutput(t, eps, "1", "get", "/kept", "--print-value-only")
	script("stop")

	for _, m := range []string{"m2", "m3"} {
		if err := os.RemoveAll(filepath.Join(dir, m+".data")); err != nil {
			t.Fatal(err)
		}
	}
	out, err := try("start")
	if err == nil {
		t.Fatalf("start with m1's data and none for m2, m3 succeeded:\n%s", out)
	}
	for _, want := range []string{"m1 has data and m2, m3 have none", "docs/operations.md#losing-members-for-good", "delete " + dir} {
		if !strings.Contains(out, want) {
			t.Errorf("start's refusal does not say %q:\n%s", want, out)
		}
	}
	if n := strings.Count(strings.TrimSpace(out), "\n"); n != 0 {
		t.Errorf("start's refusal is %d lines, want one:\n%s", n+1, out)
	}
	for _, m := range []string{"m1", "m2", "m3"} {
		if _, err := os.Stat(filepath.Join(dir, m+".pid")); err == nil {
			t.Errorf("the refused start left %s.pid: it started %s", m, m)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "m2.data")); err == nil {
		t.Error("the refused start made m2's data dir")
	}
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
