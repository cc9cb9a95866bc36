package auth

import (
	"encoding/binary"
	"errors"
	"fmt"

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
	st := s.cur.Load()
	b := []byte{0}
	if st.enabled {
		b[0] = 1
	}
	b = binary.AppendUvarint(b, st.revision)
	b = binary.AppendUvarint(b, uint64(len(st.users)))
	for _, name := range sortedKeys(st.users) {
		m, err := st.users[name].Marshal()
		if err != nil {
			return nil, fmt.Errorf("auth: marshal user %q: %w", name, err)
		}
		b = binary.AppendUvarint(b, uint64(len(m)))
		b = append(b, m...)
	}
	b = binary.AppendUvarint(b, uint64(len(st.roles)))
	for _, name := range sortedKeys(st.roles) {
		m, err := st.roles[name].Marshal()
		if err != nil {
			return nil, fmt.Errorf("auth: marshal role %q: %w", name, err)
		}
		b = binary.AppendUvarint(b, uint64(len(m)))
		b = append(b, m...)
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

func unmarshalState(b []byte) (*state, error) {
	st := &state{users: map[string]*authpb.User{}, roles: map[string]*authpb.Role{}}
	if len(b) < 1 || b[0] > 1 {
		return nil, errBadState
	}
	st.enabled = b[0] == 1
	b = b[1:]
	next := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, errBadState
		}
		b = b[n:]
		return v, nil
	}
	item := func() ([]byte, error) {
		n, err := next()
		if err != nil || n > uint64(len(b)) {
			return nil, errBadState
		}
		m := b[:n]
		b = b[n:]
		return m, nil
	}
	var err error
	if st.revision, err = next(); err != nil {
		return nil, err
	}
	n, err := next()
	if err != nil {
		return nil, err
	}
	for i := uint64(0); i < n; i++ {
		m, err := item()
		if err != nil {
			return nil, err
		}
		u := &authpb.User{}
		if err := u.Unmarshal(m); err != nil {
			return nil, fmt.Errorf("%w: user: %v", errBadState, err)
		}
		st.users[string(u.Name)] = u
	}
	if n, err = next(); err != nil {
		return nil, err
	}
	for i := uint64(0); i < n; i++ {
		m, err := item()
		if err != nil {
			return nil, err
		}
		r := &authpb.Role{}
		if err := r.Unmarshal(m); err != nil {
			return nil, fmt.Errorf("%w: role: %v", errBadState, err)
		}
		st.roles[string(r.Name)] = r
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errBadState, len(b))
	}
	st.perms = mergeAll(st.users, st.roles)
	return st, nil
}
