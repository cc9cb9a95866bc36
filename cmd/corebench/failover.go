package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// setupFailover writes continuously through the followers, SIGKILLs the
// leader, and measures the time from the kill to the first acknowledged
// write that was sent after the kill: the outage a client sees. Writes go
// only to the survivors so the client's own reconnection to a dead endpoint
// is not part of the number.
//
// Closed-loop writers alone would measure their own timeout: a write that a
// follower forwarded to the dead leader hangs until it times out, and the
// writers all started theirs at the kill. So besides them a prober starts a
// new write every --probe-interval whatever the others are doing, which
// bounds the error of the measurement by that interval.
func setupFailover(fs *flag.FlagSet) func(context.Context, *common) (*Result, error) {
	warmup := fs.Duration("warmup", 2*time.Second, "how long to write before the kill")
	opTimeout := fs.Duration("op-timeout", time.Second, "timeout of each write; a write stuck behind the dead leader is given up and retried after this")
	maxWait := fs.Duration("max-wait", 30*time.Second, "give up if no write succeeds this long after the kill")
	after := fs.Duration("after", time.Second, "keep writing this long after recovery")
	valSize := fs.Int("val-size", 256, "value size in bytes")
	probeEvery := fs.Duration("probe-interval", 10*time.Millisecond, "start a probe write this often, each with --max-wait to finish")
	return func(ctx context.Context, c *common) (*Result, error) {
		pids, old, err := c.membersAndLeader(ctx)
		if err != nil {
			return nil, err
		}
		pid := pids[old.endpoint]
		if err := syscall.Kill(pid, 0); err != nil {
			return nil, fmt.Errorf("leader %s has pid %d per --pids, but: %w", old.endpoint, pid, err)
		}
		var survivors []string
		for _, ep := range c.endpoints {
			if ep != old.endpoint {
				survivors = append(survivors, ep)
			}
		}
		if len(survivors) == 0 {
			return nil, errors.New("a one-member cluster cannot fail over")
		}
		clis, err := connect(ctx, c, survivors, c.conns)
		if err != nil {
			return nil, err
		}
		defer closeAll(clis)

		origin := time.Now()
		since := func() int64 { return int64(time.Since(origin)) }
		// killStart is taken just before the kill and times the outage;
		// killDone just after it, and only writes sent after killDone
		// count as recovered: anything earlier may have reached the old
		// leader before it died.
		var killStart, killDone atomic.Int64
		var recovered atomic.Int64 // ns since origin, 0 = not yet
		var okBefore, okAfter atomic.Int64
		var rec recorder
		val := strings.Repeat("v", *valSize)
		wctx, stopWriters := context.WithCancel(ctx)
		defer stopWriters()
		var wg sync.WaitGroup
		for w := range c.clients {
			wg.Go(func() {
				cli := clis[w%len(clis)]
				key := fmt.Sprintf("/corebench/failover/%04d", w)
				for wctx.Err() == nil {
					send := since()
					octx, cancel := context.WithTimeout(wctx, *opTimeout)
					_, err := cli.Put(octx, key, val)
					cancel()
					ack := since()
					if err != nil {
						if wctx.Err() == nil {
							rec.fail(err)
							// Errors without a leader come back at once;
							// do not spin on them.
							sleepCtx(wctx, 5*time.Millisecond)
						}
						continue
					}
					rec.done.Add(1)
					kd := killDone.Load()
					if kd == 0 {
						okBefore.Add(1)
						continue
					}
					okAfter.Add(1)
					if send >= kd {
						storeMin(&recovered, ack)
					}
				}
			})
		}
		wg.Go(func() {
			t := time.NewTicker(*probeEvery)
			defer t.Stop()
			var probes sync.WaitGroup
			defer probes.Wait()
			for n := 0; ; n++ {
				select {
				case <-wctx.Done():
					return
				case <-t.C:
				}
				cli := clis[n%len(clis)]
				probes.Go(func() {
					send := since()
					pctx, cancel := context.WithTimeout(wctx, *maxWait)
					defer cancel()
					if _, err := cli.Put(pctx, "/corebench/failover/probe", val); err != nil {
						return // the writers' errors already show what fails
					}
					if kd := killDone.Load(); kd != 0 && send >= kd {
						storeMin(&recovered, since())
					}
				})
			}
		})
		prog := startProgress("failover writes", 0, &rec.done, &rec.failed)
		defer prog.stop()
		stop := func() {
			stopWriters()
			wg.Wait()
			prog.stop()
		}

		if err := sleepCtx(ctx, *warmup); err != nil {
			stop()
			return nil, err
		}
		if okBefore.Load() == 0 {
			stop()
			s := rec.stats(0)
			return nil, fmt.Errorf("no write succeeded in the %v before the kill, e.g. %s", *warmup, firstError(s))
		}
		failedBefore := rec.failed.Load()
		killStart.Store(since())
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			stop()
			return nil, fmt.Errorf("kill leader %s (pid %d): %w", old.endpoint, pid, err)
		}
		killDone.Store(since())

		// Watch for the new leader on the side, to split the outage into
		// election and the rest.
		var elected atomic.Int64
		go func() {
			for wctx.Err() == nil && elected.Load() == 0 {
				for _, st := range statusAll(wctx, c, survivors, 200*time.Millisecond) {
					if st.err == nil && st.leader != 0 && st.leader != old.id && st.id == st.leader {
						elected.CompareAndSwap(0, since())
					}
				}
				sleepCtx(wctx, 10*time.Millisecond)
			}
		}()

		deadline := time.After(*maxWait)
	wait:
		for recovered.Load() == 0 {
			select {
			case <-time.After(5 * time.Millisecond):
			case <-deadline:
				break wait
			case <-ctx.Done():
				break wait
			}
		}
		if recovered.Load() != 0 {
			sleepCtx(ctx, *after)
		}
		stop()

		ks := killStart.Load()
		s := rec.stats(time.Since(origin))
		r := &Result{Workload: "failover"}
		var b strings.Builder
		fmt.Fprintf(&b, "SIGKILL to leader %s (pid %d); %d writers and a probe every %v on %s\n",
			old.endpoint, pid, c.clients, *probeEvery, strings.Join(survivors, ","))
		fmt.Fprintf(&b, "writes acknowledged: %d before the kill, %d after; %d failed before, %d after\n",
			okBefore.Load(), okAfter.Load(), failedBefore, rec.failed.Load()-failedBefore)
		if rv := recovered.Load(); rv != 0 {
			r.add("failover_ms", ms(time.Duration(rv-ks)), "ms", "lower", true)
			fmt.Fprintf(&b, "first write sent after the kill acknowledged %.1f ms after the kill\n", ms(time.Duration(rv-ks)))
		}
		if el := elected.Load(); el != 0 {
			r.add("new_leader_seen_ms", ms(time.Duration(el-ks)), "ms", "lower", true)
			fmt.Fprintf(&b, "new leader reported by Status: %.1f ms after the kill (polled every 10 ms)\n", ms(time.Duration(el-ks)))
		}
		r.add("failed_writes", float64(rec.failed.Load()), "writes", "", false)
		// Failed writes are the expected symptom of the outage, not a
		// fault of the run; show them without marking the run failed.
		if len(s.Errors) > 0 {
			r.ErrorSamples = s.Errors
			fmt.Fprintf(&b, "write errors (expected while there is no leader):\n")
			keys := make([]string, 0, len(s.Errors))
			for k := range s.Errors {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				fmt.Fprintf(&b, "  [%d]\t%s\n", s.Errors[k], k)
			}
		}
		r.Text = b.String()
		if recovered.Load() == 0 {
			return r, fmt.Errorf("no write sent after the kill was acknowledged within %v", *maxWait)
		}
		return r, ctx.Err()
	}
}

// storeMin lowers v to x if x is smaller or v is unset (0).
func storeMin(v *atomic.Int64, x int64) {
	for {
		cur := v.Load()
		if cur != 0 && cur <= x {
			return
		}
		if v.CompareAndSwap(cur, x) {
			return
		}
	}
}
