package workload

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corenode/corenode/member/membertest"
	"github.com/corenode/corenode/test/jepsen-lite/internal/cachereader"
	"github.com/corenode/corenode/test/jepsen-lite/internal/checker"
	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
	holderproc "github.com/corenode/corenode/test/jepsen-lite/internal/holder"
)

// TestMain lets the test binary be a holder and a cache reader too, as
// jepsen-lite is.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == holderproc.Command {
		os.Exit(holderproc.Main(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == cachereader.Command {
		os.Exit(cachereader.Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// A holder of each mode is stopped past its TTL: a successor must lead
// meanwhile, the stopped holder must give way once resumed, and the
// library holders' history must show no stale action.
func TestElectionOutlivesAPausedHolder(t *testing.T) {
	c := membertest.New(t, 1)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var endpoints []string
	for _, ep := range c.Endpoints() {
		endpoints = append(endpoints, strings.TrimPrefix(ep, "http://"))
	}
	dir := t.TempDir()
	rec, err := history.NewRecorder(history.NewClock(), filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	env := NewEnv(rec, membertest.Logger(), time.Second, nil, nil)
	el := NewElection(env, ElectionConfig{Exe: exe, Endpoints: endpoints, Modes: holderproc.Modes(), Holders: 2,
		TTL: 2 * time.Second, ActEvery: 5 * time.Millisecond, WriteEvery: 50 * time.Millisecond,
		LogDir: dir, RestartAfter: 100 * time.Millisecond})
	if err := el.Start(); err != nil {
		t.Fatal(err)
	}
	defer el.Stop(5 * time.Second)

	which, err := el.PauseLeaders(t.Context(), 20*time.Second)
	if err != nil {
		t.Fatalf("pause: %v (paused %q)", err, which)
	}
	if !strings.Contains(which, "library-") || !strings.Contains(which, "naive-") {
		t.Fatalf("paused %q, want a holder of each mode", which)
	}
	// The pause itself: twice the TTL, so the lease expires and the
	// successor campaigning on it takes over while the holder is stopped.
	time.Sleep(4 * time.Second)
	if err := el.ResumeAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A second pause finds the successors leading (the resumed holders
	// may still say they lead until they notice; then they exit).
	if _, err := el.PauseLeaders(t.Context(), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := el.ResumeAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	el.Stop(5 * time.Second)

	ops := rec.Ops()
	modes := []checker.ElectionMode{{Name: "library", Prefix: ElectionKey("library"), Strict: true}, {Name: "naive", Prefix: ElectionKey("naive")}}
	r, counts := checker.Election(ops, modes)
	if !r.Valid() {
		t.Fatalf("library holders: %v", r.Anomalies)
	}
	for _, m := range modes {
		if n := counts[m.Name].Leaderships; n < 2 {
			t.Errorf("%s: %d leaderships, want the paused holder's and its successor's", m.Name, n)
		}
		if counts[m.Name].Committed == 0 {
			t.Errorf("%s: no fenced write committed", m.Name)
		}
	}
	exits := 0
	for _, op := range ops {
		if op.Kind == history.KindHolderExit {
			exits++
		}
	}
	if won := counts["library"].Leaderships + counts["naive"].Leaderships; exits < won {
		t.Errorf("%d holder exits recorded after Stop, but %d holders led", exits, won)
	}
	t.Log(r.Headline)
}
