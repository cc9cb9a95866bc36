package server

import (
	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/kv"
	"github.com/corenode/corenode/lease"
	"github.com/corenode/corenode/lessor"
	"github.com/corenode/corenode/node"
	"github.com/corenode/corenode/readlease"
)

// The errors a request can end with that the layers below this one
// define, under the names the edge maps them by (its one table), as
// etcd's etcdserver/errors gathers what v3rpc maps: the edge need not
// import the layers themselves. Each is the same value as its source's,
// so errors.Is holds either way. The request layer's own errors are where
// they arise (forward.go, write.go, kv.go, maintenance.go); auth's are
// auth's (the edge resolves callers with auth, and may name them).
var (
	// The leader and its log.
	ErrStopped          = node.ErrStopped
	ErrCatchingUp       = node.ErrCatchingUp
	ErrTimeout          = node.ErrTimeout
	ErrBadTransferee    = node.ErrBadTransferee
	ErrTransferTimeout  = node.ErrTransferTimeout
	ErrReadLeaseChanged = readlease.ErrLeaderChanged
	ErrNoSpace          = fsm.ErrNoSpace

	// Membership.
	ErrMemberNotFound   = node.ErrMemberNotFound
	ErrPeerURLExists    = node.ErrPeerURLExists
	ErrBadPeerURLs      = node.ErrBadPeerURLs
	ErrMemberNotLearner = node.ErrMemberNotLearn
	ErrLearnerNotReady  = node.ErrLearnerNotReady
	ErrTooManyLearners  = node.ErrTooManyLearners
	ErrNotEnoughStarted = node.ErrNotEnoughStarted
	ErrUnhealthy        = node.ErrUnhealthy

	// Keys and their history.
	ErrEmptyKey          = kv.ErrEmptyKey
	ErrKeyNotFound       = kv.ErrKeyNotFound
	ErrValueProvided     = kv.ErrValueProvided
	ErrLeaseProvided     = kv.ErrLeaseProvided
	ErrDuplicateKey      = kv.ErrDuplicateKey
	ErrTooManyOps        = kv.ErrTooManyOps
	ErrInvalidSortOption = kv.ErrInvalidSortOption
	ErrCompacted         = kv.ErrCompacted
	ErrFutureRev         = kv.ErrFutureRev
	ErrKeysLeaseNotFound = kv.ErrLeaseNotFound

	// Leases.
	ErrLeaseNotFound = lease.ErrLeaseNotFound
	ErrLeaseExists   = lease.ErrLeaseExists
	ErrTTLTooLarge   = lessor.ErrTTLTooLarge
)
