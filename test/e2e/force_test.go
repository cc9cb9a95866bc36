package e2e

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestForceNewCluster is the disaster recovery of docs/operations.md from
// a survivor's data: three members, every one killed with SIGKILL, two data
// dirs lost for good; the third starts with --force-new-cluster and holds
// every key as a one-member cluster; etcdctl member add and a start with
// --initial-cluster-state existing grow it back to three healthy members
// holding every key; and the survivor restarts without the flag as a
// member of that cluster.
func TestForceNewCluster(t *testing.T) {
	requireEtcdctl(t)
	c := startCluster(t, buildBinary(t))
	eps := c.endpoints()
	const keys = 20
	var want []string
	for i := range keys {
		k, v := fmt.Sprintf("/force/k%02d", i), fmt.Sprintf("v%d", i)
		mustCtl(t, eps, "put", k, v)
		want = append(want, k, v)
	}
	survivor, lost := c.members[0], c.members[1:]
	c.killAll()
	for _, m := range lost {
		if err := os.RemoveAll(m.dataDir); err != nil {
			t.Fatal(err)
		}
	}

	survivor.extra = []string{"--force-new-cluster"}
	if err := c.start(survivor); err != nil {
		t.Fatal(err)
	}
	if err := c.waitHealthy([]*member{survivor}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	one := []string{survivor.clientURL}
	expectOutput(t, one, strings.Join(want, "\n"), "get", "/force/", "--prefix")
	list := mustCtl(t, one, "member", "list")
	if lines := strings.Split(list, "\n"); len(lines) != 1 || !strings.Contains(list, ", started, "+survivor.name+", "+survivor.peerURL+", "+survivor.clientURL+", false") {
		t.Fatalf("member list after --force-new-cluster, want %s alone:\n%s", survivor.name, list)
	}
	if !c.logsContainFile(survivor, "forced a new one-member cluster") || !c.logsContainFile(survivor, "remove it from this member's flags") {
		t.Errorf("%s's log does not say what --force-new-cluster did, or that the flag must go", survivor.name)
	}
	mustCtl(t, one, "put", "/force/z-after", "1")
	want = append(want, "/force/z-after", "1")

	for _, m := range lost {
		addMember(t, c, one, m)
		one = append(one, m.clientURL)
	}
	checkGrown := func(how string) {
		t.Helper()
		if err := c.waitHealthy(c.members, 30*time.Second); err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		list := mustCtl(t, eps, "member", "list")
		if n := strings.Count(list, ", started, "); n != 3 || strings.Count(list, "\n") != 2 {
			t.Fatalf("%s: member list, want 3 started members:\n%s", how, list)
		}
		for _, m := range c.members {
			// Each member's own state: a serializable read.
			expectOutput(t, []string{m.clientURL}, strings.Join(want, "\n"), "get", "/force/", "--prefix", "--consistency=s")
		}
	}
	checkGrown("grown back")

	c.kill(survivor)
	survivor.extra = nil
	if err := c.start(survivor); err != nil {
		t.Fatal(err)
	}
	checkGrown("the survivor restarted without the flag")
	mustCtl(t, eps, "put", "/force/restarted", "1")
}

// addMember adds m with etcdctl member add through eps, then starts it on
// an empty data dir with the printed --initial-cluster and
// --initial-cluster-state existing, and waits until it is healthy.
func addMember(t *testing.T, c *cluster, eps []string, m *member) {
	t.Helper()
	// The strict reconfiguration check answers "unhealthy cluster" until
	// the leader has been connected to every voter for 5 s; an operator
	// tries again.
	var out string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		r := ctl(eps, "", "member", "add", m.name, "--peer-urls="+m.peerURL)
		if r.err == nil {
			out = r.stdout
			break
		}
		if !strings.Contains(r.stderr, "unhealthy cluster") || time.Now().After(deadline) {
			t.Fatalf("etcdctl member add %s: %v", m.name, r)
		}
	}
	initial := regexp.MustCompile(`ETCD_INITIAL_CLUSTER="([^"]+)"`).FindStringSubmatch(out)
	if initial == nil {
		t.Fatalf("etcdctl member add printed:\n%s", out)
	}
	m.extra = []string{"--initial-cluster", initial[1], "--initial-cluster-state", "existing"}
	if err := c.start(m); err != nil {
		t.Fatal(err)
	}
	if err := c.waitHealthy([]*member{m}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}
