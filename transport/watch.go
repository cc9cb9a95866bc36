package transport

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/corenode/corenode/auth"

	"github.com/corenode/corenode/server"
)

// watchBuffer is how many responses a stream queues before its slowest
// watchers fall back to catching up from history. It bounds the memory a
// slow client can pin.
const watchBuffer = 1024

// DefaultProgressNotifyInterval is etcd's default for
// --watch-progress-notify-interval.
const DefaultProgressNotifyInterval = 10 * time.Minute

// SetWatchProgressNotifyInterval sets how often watchers that asked for
// progress notifications hear the current revision when nothing else was
// sent to them (etcd's --watch-progress-notify-interval). Zero or less
// means the default. Call it before the server serves.
func (s *Server) SetWatchProgressNotifyInterval(d time.Duration) {
	if d <= 0 {
		d = DefaultProgressNotifyInterval
	}
	s.progressInterval = d
}

type watchService struct{ s *Server }

// watchStream is one client Watch stream and the server.Sink of its watchers.
//
// Three goroutines touch it: the gRPC receive loop (Watch), the send loop,
// and whichever goroutine applies writes (Deliver, under the store's lock).
type watchStream struct {
	s      *Server
	store  server.Watchable
	stream pb.Watch_WatchServer
	out    chan *watchOut
	kick   chan struct{}
	// room is poked by the send loop when the queue is at most half full,
	// which is what resyncLoop waits for.
	room chan struct{}

	mu       sync.Mutex
	nextID   int64
	watchers map[server.WatchID]*watchState
	unsynced map[server.WatchID]struct{}

	// pmu serializes progress rounds; tick is true during a periodic round,
	// read by Deliver which runs synchronously inside Store.Progress.
	pmu  sync.Mutex
	tick atomic.Bool
}

type watchState struct {
	progress bool        // asked for periodic progress notifications
	sent     atomic.Bool // something was sent since the last periodic round
}

func (w *watchService) Watch(stream pb.Watch_WatchServer) error {
	lost, err := w.s.requireLeader(stream.Context())
	if err != nil {
		return err
	}
	ws := &watchStream{
		s:        w.s,
		store:    w.s.req.Watchable(),
		stream:   stream,
		out:      make(chan *watchOut, watchBuffer),
		kick:     make(chan struct{}, 1),
		room:     make(chan struct{}, 1),
		watchers: map[server.WatchID]*watchState{},
		unsynced: map[server.WatchID]struct{}{},
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	sendErr := make(chan error, 1)
	go func() { sendErr <- ws.sendLoop(ctx) }()
	go ws.resyncLoop(ctx)
	go ws.progressLoop(ctx)
	// The receive loop runs on its own: returning from this handler is
	// what ends a Recv blocked on a client that sends nothing more.
	recvErr := make(chan error, 1)
	go func() { recvErr <- ws.recvLoop(ctx) }()
	var result error
	select {
	case result = <-recvErr:
		if errors.Is(result, io.EOF) {
			// The client half-closed: it sends nothing more but still
			// listens, as etcd's JSON gateway does once it has forwarded
			// the request body. As in etcd, the watchers live on until the
			// client cancels the stream or the connection ends (both end
			// ctx), sending fails, or the member loses its leader.
			select {
			case <-ctx.Done():
				result = ctx.Err()
			case err := <-sendErr:
				sendErr <- err
			case <-lost:
				result = rpctypes.ErrGRPCNoLeader
			}
		}
	case <-lost:
		result = rpctypes.ErrGRPCNoLeader
	case err := <-sendErr:
		sendErr <- err
	}
	ws.cancelAll()
	cancel()
	if err := <-sendErr; err != nil && !errors.Is(err, context.Canceled) && result != rpctypes.ErrGRPCNoLeader {
		return err
	}
	return result
}

func (ws *watchStream) header(rev int64) *pb.ResponseHeader {
	return ws.s.header(&pb.ResponseHeader{Revision: rev})
}

// Deliver implements server.Sink. It runs under the store's lock and never blocks.
func (ws *watchStream) Deliver(id server.WatchID, rev int64, events []*mvccpb.Event) bool {
	ws.mu.Lock()
	st := ws.watchers[id]
	ws.mu.Unlock()
	if len(events) == 0 {
		// A progress notification: in a periodic round only for watchers
		// that asked and heard nothing since the last round.
		if ws.tick.Load() && (st == nil || !st.progress || st.sent.Swap(false)) {
			return true
		}
	} else if st != nil {
		st.sent.Store(true)
	}
	select {
	case ws.out <- &watchOut{id: int64(id), rev: rev, events: events}:
		return true
	default:
		ws.mu.Lock()
		ws.unsynced[id] = struct{}{}
		ws.mu.Unlock()
		select {
		case ws.kick <- struct{}{}:
		default:
		}
		return false
	}
}

// Canceled implements server.CanceledSink: a snapshot restore left a watcher
// with history it can no longer continue. It runs under the store's lock, so
// it must not block: the notice goes out from a goroutine if the queue is full.
func (ws *watchStream) Canceled(id server.WatchID, compactRev int64) {
	ws.forget(id)
	resp := &pb.WatchResponse{Header: ws.header(compactRev), WatchId: int64(id), CompactRevision: compactRev, Canceled: true}
	select {
	case ws.out <- &watchOut{resp: resp}:
	default:
		go ws.enqueue(ws.stream.Context(), resp)
	}
}

var _ server.CanceledSink = (*watchStream)(nil)

func (ws *watchStream) sendLoop(ctx context.Context) error {
	var enc watchEncoder
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case o := <-ws.out:
			if len(ws.out) <= watchBuffer/2 {
				select {
				case ws.room <- struct{}{}:
				default:
				}
			}
			if o.resp != nil {
				if err := ws.stream.Send(o.resp); err != nil {
					return err
				}
				continue
			}
			if err := enc.encode(o, ws.s.headerOf(o.rev)); err != nil {
				return err
			}
			if err := ws.stream.SendMsg(o); err != nil {
				return err
			}
		}
	}
}

// resyncLoop catches up watchers that fell behind, once the queue has room.
func (ws *watchStream) resyncLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ws.kick:
		}
		for {
			for len(ws.out) > watchBuffer/2 {
				// The send loop pokes room after it takes a message and
				// leaves the queue at most half full; a poke left from
				// before is harmless, the length is looked at again.
				select {
				case <-ctx.Done():
					return
				case <-ws.room:
				}
			}
			ws.mu.Lock()
			ids := make([]server.WatchID, 0, len(ws.unsynced))
			for id := range ws.unsynced {
				ids = append(ids, id)
			}
			clear(ws.unsynced)
			ws.mu.Unlock()
			if len(ids) == 0 {
				break
			}
			for _, id := range ids {
				if err := ws.store.Resync(ws, id); errors.Is(err, server.ErrCompacted) {
					ws.forget(id)
					ws.enqueue(ctx, &pb.WatchResponse{Header: ws.header(ws.store.Rev()), WatchId: int64(id),
						CompactRevision: ws.store.CompactRev(), Canceled: true})
				}
			}
		}
	}
}

func (ws *watchStream) progressLoop(ctx context.Context) {
	t := time.NewTicker(ws.s.progressInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ws.pmu.Lock()
			ws.tick.Store(true)
			ws.store.Progress(ws)
			ws.tick.Store(false)
			ws.pmu.Unlock()
		}
	}
}

func (ws *watchStream) enqueue(ctx context.Context, resp *pb.WatchResponse) {
	select {
	case ws.out <- &watchOut{resp: resp}:
	case <-ctx.Done():
	}
}

func (ws *watchStream) forget(id server.WatchID) {
	ws.mu.Lock()
	delete(ws.watchers, id)
	delete(ws.unsynced, id)
	ws.mu.Unlock()
}

func (ws *watchStream) cancelAll() {
	ws.mu.Lock()
	ids := make([]server.WatchID, 0, len(ws.watchers))
	for id := range ws.watchers {
		ids = append(ids, id)
	}
	ws.mu.Unlock()
	for _, id := range ids {
		ws.store.CancelWatch(ws, id)
	}
}

func (ws *watchStream) recvLoop(ctx context.Context) error {
	for {
		req, err := ws.stream.Recv()
		if err != nil {
			return err
		}
		switch u := req.RequestUnion.(type) {
		case *pb.WatchRequest_CreateRequest:
			ws.create(ctx, u.CreateRequest)
		case *pb.WatchRequest_CancelRequest:
			id := server.WatchID(u.CancelRequest.WatchId)
			ws.mu.Lock()
			_, ok := ws.watchers[id]
			ws.mu.Unlock()
			if ok {
				ws.store.CancelWatch(ws, id)
				ws.forget(id)
				ws.enqueue(ctx, &pb.WatchResponse{Header: ws.header(ws.store.Rev()), WatchId: int64(id), Canceled: true})
			}
		case *pb.WatchRequest_ProgressRequest:
			ws.pmu.Lock()
			ws.store.Progress(ws)
			ws.pmu.Unlock()
		}
	}
}

func (ws *watchStream) create(ctx context.Context, r *pb.WatchCreateRequest) {
	if r == nil {
		return
	}
	ws.mu.Lock()
	id := server.WatchID(r.WatchId)
	if r.WatchId == 0 {
		// Like etcd, automatic IDs count up from zero per stream.
		for {
			if _, used := ws.watchers[server.WatchID(ws.nextID)]; !used {
				break
			}
			ws.nextID++
		}
		id = server.WatchID(ws.nextID)
		ws.nextID++
	} else if _, used := ws.watchers[id]; used {
		ws.mu.Unlock()
		ws.enqueue(ctx, &pb.WatchResponse{Header: ws.header(ws.store.Rev()), WatchId: int64(id),
			Created: true, Canceled: true, CancelReason: "mvcc: duplicate watch ID provided on the WatchStream"})
		return
	}
	if err := ws.s.allow(ctx, func(ai auth.Info) error { return ws.s.authStore().IsRangePermitted(ai, r.Key, r.RangeEnd) }); err != nil {
		// As etcd: refused with the reason, on an ID no watch has.
		ws.mu.Unlock()
		ws.enqueue(ctx, &pb.WatchResponse{Header: ws.header(ws.store.Rev()), WatchId: -1,
			Created: true, Canceled: true, CancelReason: err.Error()})
		return
	}
	err := server.ValidateWatch(r.Key, r.RangeEnd, r.StartRevision)
	if err == nil && ws.s.req.Corrupt() {
		// Its events would come from the state the check found wrong.
		err = server.ErrCorrupt
	}
	if err != nil {
		ws.mu.Unlock()
		ws.enqueue(ctx, &pb.WatchResponse{Header: ws.header(ws.store.Rev()), WatchId: -1,
			Created: true, Canceled: true, CancelReason: rpctypes.ErrorDesc(mapErr(ctx, err))})
		return
	}
	ws.watchers[id] = &watchState{progress: r.ProgressNotify}
	ws.mu.Unlock()

	// The created response goes first; history and live events follow it
	// through the same queue, so the client sees them in order.
	ws.enqueue(ctx, &pb.WatchResponse{Header: ws.header(ws.store.Rev()), WatchId: int64(id), Created: true})
	wr := server.WatchRequest{ID: id, Key: r.Key, RangeEnd: r.RangeEnd, StartRev: r.StartRevision, PrevKV: r.PrevKv, Sink: ws}
	for _, f := range r.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			wr.NoPut = true
		case pb.WatchCreateRequest_NODELETE:
			wr.NoDelete = true
		}
	}
	if err := ws.store.Watch(wr); err != nil {
		ws.forget(id)
		resp := &pb.WatchResponse{Header: ws.header(ws.store.Rev()), WatchId: int64(id), Canceled: true}
		if errors.Is(err, server.ErrCompacted) {
			// As etcd: the compact revision says why, and no reason is given.
			resp.CompactRevision = ws.store.CompactRev()
		} else {
			resp.CancelReason = rpctypes.ErrorDesc(mapErr(ctx, err))
		}
		ws.enqueue(ctx, resp)
	}
}
