package workload

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
	"github.com/corenode/corenode/test/jepsen-lite/internal/checker"
	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// A reader process is stopped for twice the read lease while writers go
// on writing its keys: the writes must go through meanwhile (the leader
// waits the stopped reader's leases out), the reader must ask the leader
// again once it wakes, and the history must be linearizable, with hits.
func TestCachedReadsOutliveAPausedReader(t *testing.T) {
	const lease = time.Second
	c := membertest.New(t, 1, membertest.WithConfig(func(i int, cfg *member.Config) { cfg.ReadLeaseDuration = lease }))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rec, err := history.NewRecorder(history.NewClock(), filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	cli := c.Client()
	env := NewEnv(rec, membertest.Logger(), 2*time.Second, []*clientv3.Client{cli}, cli)
	cr := NewCached(env, CachedConfig{Exe: exe, Endpoints: c.Endpoints(), Readers: 2, Keys: 2, Seed: 1,
		ReadEvery: 5 * time.Millisecond, WriteEvery: 30 * time.Millisecond, LogDir: dir, RestartAfter: 100 * time.Millisecond})
	if err := cr.Start(); err != nil {
		t.Fatal(err)
	}
	defer cr.Stop(5 * time.Second)
	ctx, stopWriters := context.WithCancel(t.Context())
	var writers Group
	for range 2 {
		writers.Go(func() { cr.RunWriter(ctx) })
	}
	defer writers.Wait()
	defer stopWriters()

	time.Sleep(1500 * time.Millisecond)
	// As the nemesis records a pause-reader fault.
	start := env.Clock.Now()
	which, process, err := cr.PauseOne(t.Context(), 1)
	if err != nil || process <= 0 {
		t.Fatalf("pause: %q %d %v", which, process, err)
	}
	time.Sleep(2 * lease)
	if err := cr.ResumeAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	rec.Add(history.Op{Process: process, Member: -1, Kind: history.KindFault, Start: start, End: env.Clock.Now(),
		Result: history.OK, Detail: "pause-reader: SIGSTOP " + which})
	time.Sleep(1500 * time.Millisecond)
	stopWriters()
	writers.Wait()
	cr.Stop(5 * time.Second)

	ops := rec.Ops()
	r, counts := checker.CachedReads(ops, checker.CacheConfig{Prefix: CachePrefix, ReadLease: lease,
		PauseSlack: 250 * time.Millisecond, Budget: 30 * time.Second, OutDir: dir})
	if !r.Valid() {
		t.Fatalf("cached reads: %v %v", r.Anomalies, r.Stats)
	}
	if counts.Pauses != 1 || counts.AfterPause == 0 {
		t.Errorf("pauses %d, reads right after %d: want the paused reader to read again", counts.Pauses, counts.AfterPause)
	}
	if counts.Stats.Hits == 0 || counts.Stats.Invalidations == 0 {
		t.Errorf("counters %+v: want hits and invalidations", counts.Stats)
	}
	var exits, during, pausedReads int
	for _, op := range ops {
		switch {
		case op.Kind == history.KindReaderExit:
			exits++
		case op.Kind == history.KindPut && op.Result == history.OK && op.Start > start+int64(lease) && op.End < start+int64(2*lease):
			during++
		case op.Kind == history.KindGet && op.Process == process:
			pausedReads++
		}
	}
	if exits != 2 {
		t.Errorf("%d reader exits recorded after Stop, want 2", exits)
	}
	if during == 0 {
		t.Errorf("no write completed while the reader was stopped past its lease")
	}
	if pausedReads == 0 {
		t.Errorf("no read recorded for the paused reader's process %d", process)
	}
	t.Log(r.Headline)
}
