package lease

import (
	"cmp"
	"errors"
	"slices"
)

// MaxTTL is etcd's largest lease TTL, in seconds.
const MaxTTL = 9_000_000_000

// Lease is one lease's replicated facts.
type Lease struct {
	ID int64
	// TTL is the granted time to live, in seconds.
	TTL int64
	// Expiry is the lease's deadline on the lease clock, in milliseconds,
	// once checkpointed; zero while the lease is "full": granted or renewed
	// since its last checkpoint, so a new leader restarts it with its TTL.
	Expiry int64
}

// Table is the replicated lease state. Its methods are deterministic.
type Table struct {
	leases map[int64]terms // by ID, held by value: no pointer per lease
	clock  int64
}

type terms struct{ ttl, expiry int64 }

func (t terms) lease(id int64) Lease { return Lease{ID: id, TTL: t.ttl, Expiry: t.expiry} }

// NewTable returns an empty table.
func NewTable() *Table { return &Table{leases: map[int64]terms{}} }

// Clock is the lease clock in milliseconds.
func (t *Table) Clock() int64 { return t.clock }

// Len is the number of live leases.
func (t *Table) Len() int { return len(t.leases) }

// Exists reports whether lease id is live.
func (t *Table) Exists(id int64) bool {
	_, ok := t.leases[id]
	return ok
}

// Lookup returns lease id.
func (t *Table) Lookup(id int64) (Lease, bool) {
	l, ok := t.leases[id]
	if !ok {
		return Lease{}, false
	}
	return l.lease(id), true
}

// The table's errors, with the meaning of etcd's of the same name; the
// client edge answers with etcd's gRPC errors for them.
var (
	ErrLeaseNotFound = errors.New("lease: lease not found")
	ErrLeaseExists   = errors.New("lease: lease already exists")
)

// Grant adds a lease. Two grants of one ID can be in flight at once; the
// second to apply is refused here. Any ID but 0 (no lease) is a lease's,
// negative ones included, as in etcd.
func (t *Table) Grant(id, ttl int64) error {
	if id == 0 {
		return ErrLeaseNotFound
	}
	if _, ok := t.leases[id]; ok {
		return ErrLeaseExists
	}
	t.leases[id] = terms{ttl: ttl}
	return nil
}

// Revoke removes a lease; the caller deletes its keys in the same step.
func (t *Table) Revoke(id int64) error {
	if _, ok := t.leases[id]; !ok {
		return ErrLeaseNotFound
	}
	delete(t.leases, id)
	return nil
}

// Apply applies a checkpoint entry: resets first, then checkpointed
// expiries, then the clock. Leases that no longer exist are skipped: a
// revoke may have applied between the leader's decision and this entry.
func (t *Table) Apply(c *Checkpoint) {
	for _, id := range c.Resets {
		if l, ok := t.leases[id]; ok {
			l.expiry = 0
			t.leases[id] = l
		}
	}
	for _, e := range c.Expiries {
		if l, ok := t.leases[e.ID]; ok {
			l.expiry = e.Expiry
			t.leases[e.ID] = l
		}
	}
	// The clock never runs backwards, whatever a stale entry says.
	t.clock = max(t.clock, c.Clock)
}

// Leases returns every lease, ordered by ID.
func (t *Table) Leases() []Lease {
	out := make([]Lease, 0, len(t.leases))
	for id, l := range t.leases {
		out = append(out, l.lease(id))
	}
	slices.SortFunc(out, func(a, b Lease) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Restore replaces the table's content.
func (t *Table) Restore(clock int64, leases []Lease) {
	t.clock = clock
	t.leases = make(map[int64]terms, len(leases))
	for _, l := range leases {
		t.leases[l.ID] = terms{ttl: l.TTL, expiry: l.Expiry}
	}
}
