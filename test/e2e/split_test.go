package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSplitServesOneHistory is the walk a new user took: a 3-member
// cluster loses m2 and m3 for good (killed, data dirs deleted); they are
// started again as the cluster's bootstrap starts them (the same flags,
// --initial-cluster-state new and the same token), form a quorum of their
// own and acknowledge a write; then m1 comes back on its old data. Before
// the cluster incarnation, all three then served as one cluster with two
// histories: m1 answered its keys, m2 and m3 theirs. Now m1 refuses the
// others, stops with a line that says what happened and what to do, and
// the pair serves the one history. No two members answer a read
// differently at any point.
func TestSplitServesOneHistory(t *testing.T) {
	requireEtcdctl(t)
	c := startCluster(t, buildBinary(t))
	m1, m2, m3 := c.members[0], c.members[1], c.members[2]
	for i := range 20 {
		mustCtl(t, c.endpoints(), "put", fmt.Sprintf("/old/k%02d", i), "v")
	}
	c.killAll()
	for _, m := range []*member{m2, m3} {
		if err := os.RemoveAll(m.dataDir); err != nil {
			t.Fatal(err)
		}
		if err := c.start(m); err != nil {
			t.Fatal(err)
		}
	}
	pair := []*member{m2, m3}
	if err := c.waitHealthy(pair, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	mustCtl(t, []string{m2.clientURL}, "put", "/written-by-pair", "acked")

	if err := c.start(m1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m1.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("m1, of the old history, still runs beside the cluster bootstrapped again 60s after it started")
	}
	log, err := os.ReadFile(m1.logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"another history than the cluster's", "--force-new-cluster", "member remove"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("m1's log does not say %q", want)
		}
	}
	if m1.cmd.ProcessState.ExitCode() == 0 {
		t.Errorf("m1 exited 0; a member that stops on another history exits non-zero")
	}
	for _, m := range pair {
		if !m.running() {
			t.Fatalf("%s stopped: a survivor of the old history must not stop the cluster", m.name)
		}
		eps := []string{m.clientURL}
		if got := mustCtl(t, eps, "get", "--consistency=s", "--print-value-only", "/written-by-pair"); got != "acked" {
			t.Errorf("%s answers /written-by-pair = %q, want acked", m.name, got)
		}
		if got := mustCtl(t, eps, "get", "--consistency=s", "--keys-only", "--prefix", "/old/"); got != "" {
			t.Errorf("%s holds keys of the old history: %s", m.name, got)
		}
	}
	// Started again, m1 stops again: the refusal is not a race it can win.
	if err := c.start(m1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m1.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("m1 restarted on the old history still runs after 60s")
	}
	mustCtl(t, c.endpoints()[1:], "put", "/after", "ok")
}
