package kv

import "errors"

// The store's errors. Each has the meaning of the etcd error of the same
// name; the client edge (transport's error table) answers with etcd's gRPC
// error for it, so the texts here are for logs and tests.
var (
	ErrEmptyKey          = errors.New("kv: key is not provided")
	ErrKeyNotFound       = errors.New("kv: key not found")
	ErrValueProvided     = errors.New("kv: value is provided")
	ErrLeaseProvided     = errors.New("kv: lease is provided")
	ErrDuplicateKey      = errors.New("kv: duplicate key given in txn request")
	ErrInvalidSortOption = errors.New("kv: invalid sort option")
	ErrCompacted         = errors.New("kv: required revision has been compacted")
	ErrTooManyOps        = errors.New("kv: too many operations in txn request")
	ErrFutureRev         = errors.New("kv: required revision is a future revision")
	// ErrLeaseNotFound is a write that attaches a key to a lease that does
	// not exist.
	ErrLeaseNotFound = errors.New("kv: requested lease not found")
)
