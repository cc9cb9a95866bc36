package server

import (
	"context"
	"errors"

	"github.com/corenode/corenode/readlease"
)

// The read-lease cache sessions the edge carries over its stream: the
// rules (what a holder may cache, when a write waits for it) are
// readlease's, and these are its types as the edge names them.
type (
	CacheSession = readlease.Session
	CacheGet     = readlease.Get
	CacheMessage = readlease.Message
)

// ErrCacheEmptyKey refuses a cached read of no key.
var ErrCacheEmptyKey = readlease.ErrEmptyKey

// errNoReadLeases is a session opened on a member without read leases.
var errNoReadLeases = errors.New("server: read leases are not served here")

// SetReadLeases gives the server the leader's read-lease service, whose
// sessions it opens. Call it before serving.
func (s *Server) SetReadLeases(m *readlease.Manager) { s.readLeases = m }

// OpenCacheSession opens a read-lease session for a holder on the leader;
// ErrNotLeader on any other member, which relays the session there.
func (s *Server) OpenCacheSession(ctx context.Context) (*CacheSession, error) {
	if s.readLeases == nil {
		return nil, errNoReadLeases
	}
	return s.readLeases.Open(ctx)
}
