package auth

import (
	"bytes"
	"slices"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/kv"
)

// span is a half-open key interval [begin, end); a nil end has no bound.
type span struct{ begin, end []byte }

// userPerms is one user's permissions merged over its roles: disjoint,
// non-adjacent spans in key order, so a request's range is permitted
// exactly when one span covers it.
type userPerms struct {
	root        bool
	read, write []span
}

func mergeAll(users map[string]*authpb.User, roles map[string]*authpb.Role) map[string]*userPerms {
	out := make(map[string]*userPerms, len(users))
	for name, u := range users {
		p := &userPerms{}
		for _, rn := range u.Roles {
			if rn == RootRole {
				p.root = true
			}
			role := roles[rn]
			if role == nil {
				continue
			}
			for _, perm := range role.KeyPermission {
				sp := permSpan(perm.Key, perm.RangeEnd)
				if perm.PermType == authpb.READ || perm.PermType == authpb.READWRITE {
					p.read = append(p.read, sp)
				}
				if perm.PermType == authpb.WRITE || perm.PermType == authpb.READWRITE {
					p.write = append(p.write, sp)
				}
			}
		}
		p.read, p.write = merge(p.read), merge(p.write)
		out[name] = p
	}
	return out
}

// permSpan is the interval a permission grants: one key (no range end),
// every key from key on (range end "\x00"), or [key, end).
func permSpan(key, end []byte) span {
	switch {
	case len(end) == 0:
		return span{begin: key, end: append(slices.Clip(key), 0)}
	case isOpenEnded(end):
		return span{begin: key}
	}
	return span{begin: key, end: end}
}

// merge sorts spans and joins those that overlap or touch.
func merge(spans []span) []span {
	if len(spans) == 0 {
		return nil
	}
	slices.SortFunc(spans, func(a, b span) int { return bytes.Compare(a.begin, b.begin) })
	out := []span{spans[0]}
	for _, s := range spans[1:] {
		last := &out[len(out)-1]
		if last.end != nil && bytes.Compare(s.begin, last.end) > 0 {
			out = append(out, s)
			continue
		}
		if last.end != nil && (s.end == nil || bytes.Compare(s.end, last.end) > 0) {
			last.end = s.end
		}
	}
	return out
}

// covers reports whether one of spans holds the request's keys: one key
// (no end), every key from key on (end "\x00"), or [key, end).
func covers(spans []span, key, end []byte) bool {
	// The last span starting at or before key is the only candidate.
	i, found := slices.BinarySearchFunc(spans, key, func(s span, k []byte) int { return bytes.Compare(s.begin, k) })
	if !found {
		i--
	}
	if i < 0 {
		return false
	}
	s := spans[i]
	switch {
	case len(end) == 0:
		return s.end == nil || bytes.Compare(key, s.end) < 0
	case isOpenEnded(end):
		return s.end == nil
	case bytes.Compare(end, key) <= 0:
		// An empty range reads nothing; etcd's interval check treats it
		// as the key alone.
		return s.end == nil || bytes.Compare(key, s.end) < 0
	}
	return s.end == nil || bytes.Compare(end, s.end) <= 0
}

// check is etcd's isOpPermitted.
func (s *Store) check(ai Info, key, end []byte, typ authpb.Permission_Type) error {
	st := s.cur.Load()
	if !st.enabled {
		return nil
	}
	if ai.Revision == 0 {
		// No credentials at all (etcd: "user name is empty").
		return ErrUserEmpty
	}
	if ai.Revision < st.revision {
		return ErrAuthOldRevision
	}
	p := st.perms[ai.User]
	if p == nil {
		return ErrPermissionDenied
	}
	if p.root {
		return nil
	}
	spans := p.read
	if typ == authpb.WRITE {
		spans = p.write
	}
	if covers(spans, key, end) {
		return nil
	}
	return ErrPermissionDenied
}

// IsRangePermitted checks read permission on [key, end) (etcd's meaning
// of an empty end, "\x00", and so on).
func (s *Store) IsRangePermitted(ai Info, key, end []byte) error {
	return s.check(ai, key, end, authpb.READ)
}

// IsPutPermitted checks write permission on key.
func (s *Store) IsPutPermitted(ai Info, key []byte) error {
	return s.check(ai, key, nil, authpb.WRITE)
}

// IsDeleteRangePermitted checks write permission on [key, end).
func (s *Store) IsDeleteRangePermitted(ai Info, key, end []byte) error {
	return s.check(ai, key, end, authpb.WRITE)
}

// IsAdminPermitted checks that ai holds the root role (anything goes
// while auth is disabled).
func (s *Store) IsAdminPermitted(ai Info) error { return s.cur.Load().admin(ai) }

// RequireUser is etcd's requireAuthInfo: once auth is enabled, the request
// must carry some valid credentials, whatever their permissions.
func (s *Store) RequireUser(ai Info) error {
	if s.Enabled() && ai.User == "" {
		return ErrUserEmpty
	}
	return nil
}

// HasRole reports whether user holds role.
func (s *Store) HasRole(user, role string) bool { return s.cur.Load().hasRole(user, role) }

// LeaseKeys returns the keys attached to a lease (none for an unknown one).
type LeaseKeys func(id int64) [][]byte

// CheckPut is etcd's rule for a Put: write on the key; write on every key
// already attached to the lease it attaches (a user who could not revoke
// the lease must not extend what it holds); read on the key if it asks
// for the previous value.
func (s *Store) CheckPut(ai Info, r *pb.PutRequest, leaseKeys LeaseKeys) error {
	if err := s.IsPutPermitted(ai, r.Key); err != nil {
		return err
	}
	if r.Lease != 0 {
		if err := s.CheckLeaseKeys(ai, leaseKeys(r.Lease), authpb.WRITE); err != nil {
			return err
		}
	}
	if r.PrevKv {
		return s.IsRangePermitted(ai, r.Key, nil)
	}
	return nil
}

// CheckDeleteRange is etcd's rule for a DeleteRange: write on the range,
// and read on it if it asks for the previous values.
func (s *Store) CheckDeleteRange(ai Info, r *pb.DeleteRangeRequest) error {
	if err := s.IsDeleteRangePermitted(ai, r.Key, r.RangeEnd); err != nil {
		return err
	}
	if r.PrevKv {
		return s.IsRangePermitted(ai, r.Key, r.RangeEnd)
	}
	return nil
}

// CheckKeys is etcd's rule for a key-value request, on every key range it
// touches (kv.Touches): read on a Range and on each of a Txn's compares,
// CheckPut for a put, CheckDeleteRange for a delete; a Txn's ops in both
// branches, nested ones included, whichever runs.
func (s *Store) CheckKeys(ai Info, req any, leaseKeys LeaseKeys) error {
	if !s.Enabled() {
		return nil
	}
	for t := range kv.Touches(req) {
		var err error
		switch r := t.Req.(type) {
		case *pb.PutRequest:
			err = s.CheckPut(ai, r, leaseKeys)
		case *pb.DeleteRangeRequest:
			err = s.CheckDeleteRange(ai, r)
		default:
			err = s.IsRangePermitted(ai, t.Key, t.End)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// CheckLeaseKeys checks typ permission on every key attached to a lease:
// write to revoke it (revoking deletes them), read to see them
// (TimeToLive, Leases). Root needs no per-key check.
func (s *Store) CheckLeaseKeys(ai Info, keys [][]byte, typ authpb.Permission_Type) error {
	if s.IsAdminPermitted(ai) == nil {
		return nil
	}
	for _, k := range keys {
		if err := s.check(ai, k, nil, typ); err != nil {
			return err
		}
	}
	return nil
}
