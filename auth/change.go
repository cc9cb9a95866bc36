package auth

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"errors"
	"slices"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// How the auth state changes: each replicated request yields a new state
// (copy on write, so readers never lock), checked as etcd checks it.

// change returns the state after a changing request, or nil and the
// response when the request changes nothing (AuthEnable when enabled).
func (st *state) change(r *pb.InternalRaftRequest) (*state, any, error) {
	next := st.clone()
	hdr := &pb.ResponseHeader{}
	var resp any
	switch {
	case r.AuthEnable != nil:
		if st.enabled {
			return nil, &pb.AuthEnableResponse{Header: hdr}, nil
		}
		u := st.users[RootUser]
		if u == nil {
			return nil, nil, ErrRootUserNotExist
		}
		if !slices.Contains(u.Roles, RootRole) {
			return nil, nil, ErrRootRoleNotExist
		}
		next.enabled = true
		// etcd does not advance the revision on enable: nothing issued
		// before can be in use, as AuthDisable dropped every token.
		next.perms = mergeAll(next.users, next.roles)
		return next, &pb.AuthEnableResponse{Header: hdr}, nil
	case r.AuthDisable != nil:
		if !st.enabled {
			return nil, &pb.AuthDisableResponse{Header: hdr}, nil
		}
		next.enabled = false
		resp = &pb.AuthDisableResponse{Header: hdr}
	case r.AuthUserAdd != nil:
		a := r.AuthUserAdd
		if a.Name == "" {
			return nil, nil, ErrUserEmpty
		}
		if st.users[a.Name] != nil {
			return nil, nil, ErrUserAlreadyExist
		}
		opts := a.Options
		if opts == nil {
			opts = &authpb.UserAddOptions{}
		}
		u := &authpb.User{Name: []byte(a.Name), Options: opts}
		if !opts.NoPassword {
			hash, err := decodeHash(a.HashedPassword)
			if err != nil {
				return nil, nil, err
			}
			u.Password = hash
		}
		next.users[a.Name] = u
		resp = &pb.AuthUserAddResponse{Header: hdr}
	case r.AuthUserDelete != nil:
		name := r.AuthUserDelete.Name
		if st.enabled && name == RootUser {
			return nil, nil, ErrInvalidAuthMgmt
		}
		if st.users[name] == nil {
			return nil, nil, ErrUserNotFound
		}
		delete(next.users, name)
		resp = &pb.AuthUserDeleteResponse{Header: hdr}
	case r.AuthUserChangePassword != nil:
		c := r.AuthUserChangePassword
		u := st.users[c.Name]
		if u == nil {
			return nil, nil, ErrUserNotFound
		}
		nu := cloneUser(u)
		nu.Password = nil
		if u.Options == nil || !u.Options.NoPassword {
			hash, err := decodeHash(c.HashedPassword)
			if err != nil {
				return nil, nil, err
			}
			nu.Password = hash
		}
		next.users[c.Name] = nu
		resp = &pb.AuthUserChangePasswordResponse{Header: hdr}
	case r.AuthUserGrantRole != nil:
		g := r.AuthUserGrantRole
		u := st.users[g.User]
		if u == nil {
			return nil, nil, ErrUserNotFound
		}
		if g.Role != RootRole && st.roles[g.Role] == nil {
			return nil, nil, ErrRoleNotFound
		}
		if slices.Contains(u.Roles, g.Role) {
			// etcd answers success and changes nothing (not even the
			// revision).
			return nil, &pb.AuthUserGrantRoleResponse{Header: hdr}, nil
		}
		nu := cloneUser(u)
		nu.Roles = append(nu.Roles, g.Role)
		slices.Sort(nu.Roles)
		next.users[g.User] = nu
		resp = &pb.AuthUserGrantRoleResponse{Header: hdr}
	case r.AuthUserRevokeRole != nil:
		g := r.AuthUserRevokeRole
		if st.enabled && g.Name == RootUser && g.Role == RootRole {
			return nil, nil, ErrInvalidAuthMgmt
		}
		u := st.users[g.Name]
		if u == nil {
			return nil, nil, ErrUserNotFound
		}
		if !slices.Contains(u.Roles, g.Role) {
			return nil, nil, ErrRoleNotGranted
		}
		nu := cloneUser(u)
		nu.Roles = slices.DeleteFunc(nu.Roles, func(x string) bool { return x == g.Role })
		next.users[g.Name] = nu
		resp = &pb.AuthUserRevokeRoleResponse{Header: hdr}
	case r.AuthRoleAdd != nil:
		name := r.AuthRoleAdd.Name
		if name == "" {
			return nil, nil, ErrRoleEmpty
		}
		if st.roles[name] != nil {
			return nil, nil, ErrRoleAlreadyExist
		}
		next.roles[name] = &authpb.Role{Name: []byte(name)}
		resp = &pb.AuthRoleAddResponse{Header: hdr}
	case r.AuthRoleDelete != nil:
		name := r.AuthRoleDelete.Role
		if st.enabled && name == RootRole {
			return nil, nil, ErrInvalidAuthMgmt
		}
		if st.roles[name] == nil {
			return nil, nil, ErrRoleNotFound
		}
		delete(next.roles, name)
		for n, u := range next.users {
			if slices.Contains(u.Roles, name) {
				nu := cloneUser(u)
				nu.Roles = slices.DeleteFunc(nu.Roles, func(x string) bool { return x == name })
				next.users[n] = nu
			}
		}
		resp = &pb.AuthRoleDeleteResponse{Header: hdr}
	case r.AuthRoleGrantPermission != nil:
		g := r.AuthRoleGrantPermission
		if g.Perm == nil {
			return nil, nil, ErrPermissionNotGiven
		}
		if !validPermRange(g.Perm.Key, g.Perm.RangeEnd) {
			return nil, nil, ErrInvalidAuthMgmt
		}
		role := st.roles[g.Name]
		if role == nil {
			return nil, nil, ErrRoleNotFound
		}
		nr := cloneRole(role)
		i, found := slices.BinarySearchFunc(nr.KeyPermission, g.Perm, comparePerm)
		if found {
			nr.KeyPermission[i].PermType = g.Perm.PermType
		} else {
			p := &authpb.Permission{PermType: g.Perm.PermType, Key: g.Perm.Key, RangeEnd: g.Perm.RangeEnd}
			nr.KeyPermission = slices.Insert(nr.KeyPermission, i, p)
		}
		next.roles[g.Name] = nr
		resp = &pb.AuthRoleGrantPermissionResponse{Header: hdr}
	case r.AuthRoleRevokePermission != nil:
		g := r.AuthRoleRevokePermission
		role := st.roles[g.Role]
		if role == nil {
			return nil, nil, ErrRoleNotFound
		}
		nr := cloneRole(role)
		nr.KeyPermission = slices.DeleteFunc(nr.KeyPermission, func(p *authpb.Permission) bool {
			return bytes.Equal(p.Key, []byte(g.Key)) && bytes.Equal(p.RangeEnd, []byte(g.RangeEnd))
		})
		if len(nr.KeyPermission) == len(role.KeyPermission) {
			return nil, nil, ErrPermissionNotGranted
		}
		next.roles[g.Role] = nr
		resp = &pb.AuthRoleRevokePermissionResponse{Header: hdr}
	default:
		return nil, nil, errors.New("auth: request without an auth operation")
	}
	next.revision++
	next.perms = mergeAll(next.users, next.roles)
	return next, resp, nil
}

// comparePerm orders a role's permissions by key, then range end; a grant
// on the same key and range end replaces the type.
func comparePerm(a, b *authpb.Permission) int {
	if c := bytes.Compare(a.Key, b.Key); c != 0 {
		return c
	}
	return bytes.Compare(a.RangeEnd, b.RangeEnd)
}

// validPermRange is etcd's rule: a key; and no range end, a range end after
// the key, or "\x00" (every key from the key on).
func validPermRange(key, end []byte) bool {
	if len(key) == 0 {
		return false
	}
	return len(end) == 0 || bytes.Compare(key, end) < 0 || isOpenEnded(end)
}

func isOpenEnded(end []byte) bool { return len(end) == 1 && end[0] == 0 }

func decodeHash(h string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(h)
	if err != nil || len(b) == 0 {
		// etcd's answer to a password-less request for a password user.
		return nil, ErrNoPasswordUser
	}
	return b, nil
}

func (st *state) clone() *state {
	next := &state{enabled: st.enabled, revision: st.revision,
		users: make(map[string]*authpb.User, len(st.users)), roles: make(map[string]*authpb.Role, len(st.roles)), perms: st.perms}
	for k, v := range st.users {
		next.users[k] = v
	}
	for k, v := range st.roles {
		next.roles[k] = v
	}
	return next
}

// cloneUser copies what a change may modify; users in a state are never
// changed in place, as readers may hold them.
func cloneUser(u *authpb.User) *authpb.User {
	c := *u
	c.Roles = slices.Clone(u.Roles)
	return &c
}

func cloneRole(r *authpb.Role) *authpb.Role {
	c := &authpb.Role{Name: r.Name}
	for _, p := range r.KeyPermission {
		cp := *p
		c.KeyPermission = append(c.KeyPermission, &cp)
	}
	return c
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, cmp.Compare)
	return out
}
