package auth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/authpb"
)

// Marshal encodes the replicated auth state for a snapshot, deterministically
// (users and roles in name order), so members with the same state write the
// same bytes and the state hash agrees:
//
//	byte     enabled (0 or 1)
//	uvarint  revision
//	uvarint  user count, then per user: uvarint length, authpb.User
//	uvarint  role count, then per role: uvarint length, authpb.Role
func (s *Store) Marshal() ([]byte, error) {
	return marshalState(s.cur.Load())
}

func marshalState(st *state) ([]byte, error) {
	b := []byte{0}
	if st.enabled {
		b[0] = 1
	}
	b = binary.AppendUvarint(b, st.revision)
	b, err := appendAll(b, "user", st.users)
	if err != nil {
		return nil, err
	}
	return appendAll(b, "role", st.roles)
}

// appendAll appends the count of m, then each message in key order with
// its length.
func appendAll[M interface{ Marshal() ([]byte, error) }](b []byte, what string, m map[string]M) ([]byte, error) {
	b = binary.AppendUvarint(b, uint64(len(m)))
	for _, name := range sortedKeys(m) {
		data, err := m[name].Marshal()
		if err != nil {
			return nil, fmt.Errorf("auth: marshal %s %q: %w", what, name, err)
		}
		b = binary.AppendUvarint(b, uint64(len(data)))
		b = append(b, data...)
	}
	return b, nil
}

// Restore replaces the replicated state with one Marshal wrote. Tokens are
// kept: they name users, and a user the snapshot lacks simply fails every
// permission check.
func (s *Store) Restore(b []byte) error {
	st, err := unmarshalState(b)
	if err != nil {
		return err
	}
	s.cur.Store(st)
	return nil
}

var errBadState = errors.New("auth: bad snapshot section")

// section reads what Marshal appended, front to back.
type section struct{ b []byte }

func (r *section) uvarint() (uint64, error) {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		return 0, errBadState
	}
	r.b = r.b[n:]
	return v, nil
}

// readAll reads what appendAll wrote into fresh messages, keyed by name.
func readAll[M any, PM interface {
	*M
	Unmarshal([]byte) error
}](r *section, what string, name func(PM) string) (map[string]PM, error) {
	count, err := r.uvarint()
	if err != nil {
		return nil, err
	}
	out := map[string]PM{}
	for i := uint64(0); i < count; i++ {
		n, err := r.uvarint()
		if err != nil || n > uint64(len(r.b)) {
			return nil, errBadState
		}
		m := PM(new(M))
		if err := m.Unmarshal(r.b[:n]); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", errBadState, what, err)
		}
		r.b = r.b[n:]
		out[name(m)] = m
	}
	return out, nil
}

func unmarshalState(b []byte) (*state, error) {
	if len(b) < 1 || b[0] > 1 {
		return nil, errBadState
	}
	st := &state{enabled: b[0] == 1}
	r := &section{b: b[1:]}
	var err error
	if st.revision, err = r.uvarint(); err != nil {
		return nil, err
	}
	if st.users, err = readAll(r, "user", func(u *authpb.User) string { return string(u.Name) }); err != nil {
		return nil, err
	}
	if st.roles, err = readAll(r, "role", func(ro *authpb.Role) string { return string(ro.Name) }); err != nil {
		return nil, err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errBadState, len(r.b))
	}
	st.perms = mergeAll(st.users, st.roles)
	return st, nil
}

// State is the replicated auth state as etcd's backend holds it: the auth
// bucket's enabled flag and revision, and the messages of the authUsers and
// authRoles buckets, each list in name order.
type State struct {
	Enabled  bool
	Revision uint64
	Users    []*authpb.User
	Roles    []*authpb.Role
}

// State returns the replicated state. The messages are the store's, shared
// with readers: the caller must not change them.
func (s *Store) State() State {
	st := s.cur.Load()
	out := State{Enabled: st.enabled, Revision: st.revision}
	for _, name := range sortedKeys(st.users) {
		out.Users = append(out.Users, st.users[name])
	}
	for _, name := range sortedKeys(st.roles) {
		out.Roles = append(out.Roles, st.roles[name])
	}
	return out
}

// Marshal encodes st as Store.Marshal does, for Restore. Users' roles and
// roles' permissions are put in the order the store keeps them (another
// system's backup may hold them in its own); a name given twice, or a user
// or role without one, is refused.
func (st State) Marshal() ([]byte, error) {
	if st.Revision == 0 {
		return nil, fmt.Errorf("%w: auth revision 0", errBadState)
	}
	in := &state{enabled: st.Enabled, revision: st.Revision, users: map[string]*authpb.User{}, roles: map[string]*authpb.Role{}}
	for _, u := range st.Users {
		if len(u.Name) == 0 || in.users[string(u.Name)] != nil {
			return nil, fmt.Errorf("%w: user %q empty or repeated", errBadState, u.Name)
		}
		nu := cloneUser(u)
		slices.Sort(nu.Roles)
		nu.Roles = slices.Compact(nu.Roles)
		in.users[string(u.Name)] = nu
	}
	for _, r := range st.Roles {
		if len(r.Name) == 0 || in.roles[string(r.Name)] != nil {
			return nil, fmt.Errorf("%w: role %q empty or repeated", errBadState, r.Name)
		}
		nr := cloneRole(r)
		slices.SortStableFunc(nr.KeyPermission, comparePerm)
		in.roles[string(r.Name)] = nr
	}
	return marshalState(in)
}
