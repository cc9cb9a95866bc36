package server

import (
	"github.com/corenode/corenode/kv"
)

// Watchable is the watch hub the edge's Watch streams register with: this
// member's store. Its contract is kv's: a Sink's Deliver runs under the
// store's lock and never blocks; a watcher that fell behind is caught up
// from history by Resync; CancelWatch and Progress are safe at any time.
type Watchable interface {
	Watch(r WatchRequest) error
	Resync(sink Sink, id WatchID) error
	CancelWatch(sink Sink, id WatchID)
	Progress(sink Sink)
	Rev() int64
	CompactRev() int64
}

// The watch hub's types, as the edge names them.
type (
	WatchID      = kv.WatchID
	WatchRequest = kv.WatchRequest
	Sink         = kv.Sink
	CanceledSink = kv.CanceledSink
)

// ValidateWatch checks a watch request's range and start revision as etcd
// does, before it reaches the hub.
func ValidateWatch(key, rangeEnd []byte, startRev int64) error {
	return kv.ValidateWatch(key, rangeEnd, startRev)
}

// Watchable returns this member's watch hub. Watches are served from any
// member's own state, as etcd's are.
func (s *Server) Watchable() Watchable { return s.node.Store() }
