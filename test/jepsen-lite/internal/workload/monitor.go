package workload

import (
	"context"
	"fmt"
	"time"

	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// Monitor measures, from the clients' side, when the cluster could commit
// (canary writes through every member) and who led in which term (Status
// polls, recorded on change). The lease checker's allowance for "time
// without a leader" comes from the canaries.
type Monitor struct {
	env       *Env
	endpoints []string
	every     time.Duration
}

// NewMonitor polls every member every `every`.
func NewMonitor(e *Env, endpoints []string, every time.Duration) *Monitor {
	return &Monitor{env: e, endpoints: endpoints, every: every}
}

// Run monitors until ctx is done.
func (m *Monitor) Run(ctx context.Context) {
	var g Group
	for i := range m.env.Pinned {
		g.Go(func() { m.canary(ctx, i) })
		g.Go(func() { m.status(ctx, i) })
	}
	g.Wait()
}

func (m *Monitor) canary(ctx context.Context, member int) {
	e := m.env
	process := e.NewProcess()
	key := fmt.Sprintf("%s%d", canaryKey, member)
	for ctx.Err() == nil {
		// Short timeout: a canary stuck on a paused member must not hide
		// the commits the other members' canaries would show.
		octx, cancel := context.WithTimeout(ctx, time.Second)
		op := history.Op{Process: process, Member: member, Kind: history.KindCanary, Key: key, Value: e.value()}
		op.Start = e.Clock.Now()
		resp, err := e.Pinned[member].Put(octx, key, op.Value)
		op.End = e.Clock.Now()
		cancel()
		if isCanceled(ctx, err) {
			return
		}
		op.Result, op.Error = writeResult(err), errString(err)
		if err == nil {
			op.Rev = resp.Header.Revision
		}
		e.Rec.Add(op)
		if !sleep(ctx, m.every) {
			return
		}
	}
}

func (m *Monitor) status(ctx context.Context, member int) {
	e := m.env
	process := e.NewProcess()
	var lastLeader, lastTerm uint64
	lastErr := false
	for ctx.Err() == nil {
		octx, cancel := context.WithTimeout(ctx, time.Second)
		start := e.Clock.Now()
		s, err := e.Pinned[member].Status(octx, m.endpoints[member])
		end := e.Clock.Now()
		cancel()
		if isCanceled(ctx, err) {
			return
		}
		op := history.Op{Process: process, Member: member, Kind: history.KindStatus, Start: start, End: end}
		if err != nil {
			if !lastErr {
				op.Result, op.Error = history.Fail, err.Error()
				e.Rec.Add(op)
			}
			lastErr = true
		} else if lastErr || s.Leader != lastLeader || s.RaftTerm != lastTerm {
			op.Result, op.Leader, op.Term = history.OK, s.Leader, s.RaftTerm
			op.Detail = fmt.Sprintf("member %x", s.Header.MemberId)
			e.Rec.Add(op)
			lastErr, lastLeader, lastTerm = false, s.Leader, s.RaftTerm
		}
		if !sleep(ctx, m.every) {
			return
		}
	}
}
