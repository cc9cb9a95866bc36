package node

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/hashicorp/raft"
)

// promoter makes each voter AddMember added (a raft non-voter recorded as
// a voter, memberView.staged) a raft voter once it holds every entry
// committed when the leader looked: from then on it can take part in a
// quorum at once, so the promotion costs the cluster no availability. It
// runs on the leader only, for one term; a new leader finds the members
// still to promote in raft's configuration and their records.
//
// It wakes when the membership changes on this leader (membersChanged) or
// a member it waits for acknowledges an append (replication's progress),
// and never polls.
type promoter struct{ n *Node }

func (p promoter) Run(ctx context.Context, term uint64) {
	n := p.n
	for {
		changed := n.membersChanged.Wait()
		waits, err := p.promoteCaughtUp(ctx, term)
		if err != nil && ctx.Err() == nil {
			n.log.Warn("promoting a member that caught up failed; trying again", "err", err)
			waits = append(waits, afterDelay(ctx, n.cfg.ElectionTimeout))
		}
		cases := []reflect.SelectCase{
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(changed)},
		}
		for _, w := range waits {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)})
		}
		if i, _, _ := reflect.Select(cases); i == 0 {
			return
		}
	}
}

// promoteCaughtUp promotes every staged member that holds the committed
// log, and returns, for the others, the channels that close when their
// progress next changes.
func (p promoter) promoteCaughtUp(ctx context.Context, term uint64) ([]<-chan struct{}, error) {
	n := p.n
	if n.raft.State() != raft.Leader || n.raft.CurrentTerm() != term {
		return nil, nil
	}
	views, index, err := n.configuration()
	if err != nil {
		return nil, err
	}
	var waits []<-chan struct{}
	for _, v := range views {
		if !v.staged() {
			continue
		}
		match, _, _, changed := n.repl.progress(v.server.ID, term)
		if match == 0 || match < n.raft.CommitIndex() {
			waits = append(waits, changed)
			continue
		}
		if err := await(ctx, n.raft.AddVoter(v.server.ID, v.server.Address, index, n.reconfigTimeout())); err != nil {
			return waits, fmt.Errorf("node: promote member %x: %w", v.id, err)
		}
		n.log.Info("member caught up: now a voter", "id", fmt.Sprintf("%x", v.id), "match", match)
		// The configuration changed: look again before the next promotion.
		n.membersChanged.Notify()
		return waits, nil
	}
	return waits, nil
}

// afterDelay returns a channel closed after d, or when ctx ends.
func afterDelay(ctx context.Context, d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		close(ch)
	}()
	return ch
}
