package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/server"
)

// proposalForwarder is a follower's side: one stream to the current leader,
// commands multiplexed on it by id.
type proposalForwarder struct {
	mu     sync.Mutex
	leader string // the member stream goes to
	stream *proposalStream
	closed bool
	// open mirrors stream != nil, so the leader's write path can tell
	// without the lock that it has nothing to retire.
	open atomic.Bool
}

// proposalTarget is the member a command goes to: key names it (its peer
// address), and open opens a proposal stream to the member at key.
type proposalTarget struct {
	key  string
	open func(ctx context.Context, key string) (frameConn, error)
}

type proposalStream struct {
	fc  frameConn
	out frameBatcher

	mu      sync.Mutex
	next    uint64
	waiters map[uint64]*proposalWaiter
	broken  bool
}

type outgoing struct {
	id  uint64
	cmd []byte
}

type proposalWaiter struct {
	ch chan proposalAnswer // buffered: an answer never blocks the receiver
	// sent is set once the command was handed to the stream: from then on
	// a broken stream leaves its outcome unknown. Guarded by the stream's mu.
	sent bool
}

// propose sends cmd to the leader, to, and returns the leader's
// answer: the response and the log index it applied at (0 from a leader
// of an earlier version), or the leader's error. A command that never left
// returns server.ErrNotSent, one whose stream broke after it was handed
// over server.ErrLeaderChanged (its outcome is unknown). The request layer
// ends ctx grace after the leader changed.
func (f *proposalForwarder) propose(ctx context.Context, grace time.Duration, to proposalTarget, cmd []byte) ([]byte, uint64, error) {
	st, err := f.streamTo(ctx, to, grace)
	if err != nil {
		return nil, 0, server.ErrNotSent
	}
	return st.call(ctx, cmd)
}

// readIndex asks the leader, to, for its read index on the proposal
// stream: a record with an empty command, answered with the index (and an
// empty response). ok is false when the stream to the leader carries no
// reads (a leader of an earlier version): the caller asks another way.
func (f *proposalForwarder) readIndex(ctx context.Context, grace time.Duration, to proposalTarget) (index uint64, ok bool, err error) {
	st, err := f.streamTo(ctx, to, grace)
	if err != nil {
		return 0, true, server.ErrNotSent
	}
	if r, reads := st.fc.(interface{ takesReads() bool }); !reads || !r.takesReads() {
		return 0, false, nil
	}
	_, index, err = st.call(ctx, nil)
	if err == nil && index == 0 {
		err = status.Error(codes.Internal, "transport: the leader answered a read-index question without an index")
	}
	return index, true, err
}

// call sends cmd on the stream and waits for its answer.
func (st *proposalStream) call(ctx context.Context, cmd []byte) ([]byte, uint64, error) {
	id, w, ok := st.add()
	if !ok {
		return nil, 0, server.ErrNotSent
	}
	// A failed send fails the stream, and with it this command's waiter.
	_ = st.out.add(id, appendRequest(nil, outgoing{id: id, cmd: cmd}))
	var a proposalAnswer
	select {
	case a = <-w.ch:
	case <-ctx.Done():
		st.drop(id)
		return nil, 0, ctx.Err()
	}
	return a.body, a.index, a.err
}

// streamTo returns the stream to member to, opening it (within grace and
// ctx), and retiring a stream to an earlier leader after grace (its calls
// may still be answered meanwhile).
func (f *proposalForwarder) streamTo(ctx context.Context, to proposalTarget, grace time.Duration) (*proposalStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errors.New("transport: server closed")
	}
	if f.leader == to.key && f.stream != nil && !f.stream.isBroken() {
		return f.stream, nil
	}
	f.retireLocked(grace)
	octx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	fc, err := to.open(octx, to.key)
	if err != nil {
		return nil, err
	}
	st := &proposalStream{fc: fc, waiters: map[uint64]*proposalWaiter{}}
	st.out.send = st.send
	go st.receive()
	f.leader, f.stream = to.key, st
	f.open.Store(true)
	return st, nil
}

// retire drops the stream to a former leader once this member leads
// itself; calls still waiting on it get grace to be answered.
func (f *proposalForwarder) retire(grace time.Duration) {
	if !f.open.Load() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retireLocked(grace)
}

func (f *proposalForwarder) retireLocked(grace time.Duration) {
	if old := f.stream; old != nil {
		time.AfterFunc(grace, old.fc.close)
	}
	f.leader, f.stream = "", nil
	f.open.Store(false)
}

func (f *proposalForwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	if f.stream != nil {
		f.stream.fc.close()
		f.stream = nil
	}
	f.open.Store(false)
}

func (st *proposalStream) isBroken() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.broken
}

func (st *proposalStream) add() (uint64, *proposalWaiter, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.broken {
		return 0, nil, false
	}
	st.next++
	w := &proposalWaiter{ch: make(chan proposalAnswer, 1)}
	st.waiters[st.next] = w
	return st.next, w, true
}

func (st *proposalStream) drop(id uint64) {
	st.mu.Lock()
	delete(st.waiters, id)
	st.mu.Unlock()
}

// send sends a frame of the commands ids: from here on a broken stream
// leaves their outcome unknown.
func (st *proposalStream) send(buf frame, ids []uint64) error {
	st.mu.Lock()
	for _, id := range ids {
		if w := st.waiters[id]; w != nil {
			w.sent = true
		}
	}
	st.mu.Unlock()
	if err := st.fc.send(buf); err != nil {
		st.fc.close()
		st.fail()
		return err
	}
	return nil
}

func appendRequest(buf frame, o outgoing) frame {
	buf = binary.AppendUvarint(buf, o.id)
	buf = binary.AppendUvarint(buf, uint64(len(o.cmd)))
	return append(buf, o.cmd...)
}

// receive routes answers to their waiters until the stream ends.
func (st *proposalStream) receive() {
	defer st.fail()
	var in frame
	for {
		if err := st.fc.recv(&in); err != nil {
			st.fc.close()
			return
		}
		for b := []byte(in); len(b) > 0; {
			var kind byte
			id, body, rest, err := readRecord(b, &kind)
			if err != nil {
				st.fc.close()
				return
			}
			b = rest
			a := decodeAnswer(kind, body)
			st.mu.Lock()
			w := st.waiters[id]
			delete(st.waiters, id)
			st.mu.Unlock()
			if w != nil {
				w.ch <- a
			}
		}
	}
}

// fail ends the stream for every waiter: a command still queued here may
// be sent again; one handed to the stream may have been applied.
func (st *proposalStream) fail() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.broken {
		return
	}
	st.broken = true
	for id, w := range st.waiters {
		err := server.ErrNotSent
		if w.sent {
			err = server.ErrLeaderChanged
		}
		w.ch <- proposalAnswer{err: err}
		delete(st.waiters, id)
	}
}
