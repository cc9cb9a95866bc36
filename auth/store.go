package auth

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"errors"
	"slices"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// The names etcd gives the all-powerful user and role.
const (
	RootUser = "root"
	RootRole = "root"
)

// Errors, with etcd's meanings; the client edge maps each to etcd's gRPC
// error of the same text.
var (
	ErrRootUserNotExist     = errors.New("auth: root user does not exist")
	ErrRootRoleNotExist     = errors.New("auth: root user does not have root role")
	ErrUserAlreadyExist     = errors.New("auth: user name already exists")
	ErrUserEmpty            = errors.New("auth: user name is empty")
	ErrUserNotFound         = errors.New("auth: user name not found")
	ErrRoleAlreadyExist     = errors.New("auth: role name already exists")
	ErrRoleNotFound         = errors.New("auth: role name not found")
	ErrRoleEmpty            = errors.New("auth: role name is empty")
	ErrPermissionNotGiven   = errors.New("auth: permission not given")
	ErrAuthFailed           = errors.New("auth: authentication failed, invalid user ID or password")
	ErrNoPasswordUser       = errors.New("auth: authentication failed, password was given for no password user")
	ErrPermissionDenied     = errors.New("auth: permission denied")
	ErrRoleNotGranted       = errors.New("auth: role is not granted to the user")
	ErrPermissionNotGranted = errors.New("auth: permission is not granted to the role")
	ErrAuthNotEnabled       = errors.New("auth: authentication is not enabled")
	ErrAuthOldRevision      = errors.New("auth: revision in header is old")
	ErrInvalidAuthToken     = errors.New("auth: invalid auth token")
	ErrInvalidAuthMgmt      = errors.New("auth: invalid auth management")
)

// Info is who a request acts for: the user, and the auth revision its
// credentials were checked at. The zero Info is no user at all.
type Info struct {
	User     string
	Revision uint64
}

// rootPerm is what RoleGet shows for the root role, as etcd shows it.
var rootPerm = authpb.Permission{PermType: authpb.READWRITE, Key: []byte{}, RangeEnd: []byte{0}}

// state is one immutable version of the replicated auth state. Apply
// builds a new one for every change, so readers need no lock.
type state struct {
	enabled  bool
	revision uint64
	users    map[string]*authpb.User
	roles    map[string]*authpb.Role
	// perms is each user's merged permissions, derived from users and
	// roles.
	perms map[string]*userPerms
}

// Store holds the replicated auth state of one member and its simple
// tokens. Apply, Restore and Marshal are called by the state machine (one
// at a time, in log order); every other method may be called from any
// goroutine at any time.
type Store struct {
	cur    atomic.Pointer[state]
	tokens tokenProvider
	logins *logins
	cost   int
}

// New returns an empty store (auth disabled, no users, no roles). cfg
// sets token lifetime, clock and bcrypt cost; see Config.
func New(cfg Config) *Store {
	cfg = cfg.withDefaults()
	var tp tokenProvider = newTokens(cfg.TokenTTL, cfg.Now)
	if cfg.Tokens.jwt != nil {
		tp = &jwtTokens{jwtOptions: *cfg.Tokens.jwt, now: cfg.Now}
	}
	s := &Store{tokens: tp, logins: newLogins(cfg.Now), cost: cfg.BcryptCost}
	// etcd's revisions start at 1, so that 0 can mean "no credentials".
	s.cur.Store(&state{revision: 1, users: map[string]*authpb.User{}, roles: map[string]*authpb.Role{}, perms: map[string]*userPerms{}})
	return s
}

// Enabled reports whether auth is enabled: one atomic load, the whole
// cost of auth on the request path of a cluster that does not use it.
func (s *Store) Enabled() bool { return s.cur.Load().enabled }

// Revision is the auth revision: it advances with every change.
func (s *Store) Revision() uint64 { return s.cur.Load().revision }

// Apply applies one replicated auth request: r has exactly one auth field
// set, and r.Header, when set, names the user it acts for. index is the
// entry's raft index (a simple token's suffix, unique in the cluster).
// The response is the etcd response message for the request.
func (s *Store) Apply(r *pb.InternalRaftRequest, index uint64) (any, error) {
	st := s.cur.Load()
	var ai Info
	if r.Header != nil {
		ai = Info{User: r.Header.Username, Revision: r.Header.AuthRevision}
	}
	if needsAdmin(r) {
		if err := st.admin(ai); err != nil {
			return nil, err
		}
	}
	switch {
	case r.Authenticate != nil:
		return s.authenticate(st, r.Authenticate, ai.Revision, index)
	case r.AuthUserGet != nil:
		// A user may see its own roles without root, as in etcd.
		if err := st.admin(ai); err != nil && r.AuthUserGet.Name != ai.User {
			return nil, err
		}
		u := st.users[r.AuthUserGet.Name]
		if u == nil {
			return nil, ErrUserNotFound
		}
		return &pb.AuthUserGetResponse{Header: &pb.ResponseHeader{}, Roles: slices.Clone(u.Roles)}, nil
	case r.AuthRoleGet != nil:
		// A user may see a role it holds without root, as in etcd.
		if err := st.admin(ai); err != nil && !st.hasRole(ai.User, r.AuthRoleGet.Role) {
			return nil, err
		}
		role := st.roles[r.AuthRoleGet.Role]
		if role == nil {
			return nil, ErrRoleNotFound
		}
		resp := &pb.AuthRoleGetResponse{Header: &pb.ResponseHeader{}}
		if r.AuthRoleGet.Role == RootRole {
			p := rootPerm
			resp.Perm = []*authpb.Permission{&p}
		} else {
			for _, p := range role.KeyPermission {
				c := *p
				resp.Perm = append(resp.Perm, &c)
			}
		}
		return resp, nil
	case r.AuthUserList != nil:
		return &pb.AuthUserListResponse{Header: &pb.ResponseHeader{}, Users: sortedKeys(st.users)}, nil
	case r.AuthRoleList != nil:
		return &pb.AuthRoleListResponse{Header: &pb.ResponseHeader{}, Roles: sortedKeys(st.roles)}, nil
	case r.AuthStatus != nil:
		return &pb.AuthStatusResponse{Header: &pb.ResponseHeader{}, Enabled: st.enabled, AuthRevision: st.revision}, nil
	}
	next, resp, err := st.change(r)
	if err != nil || next == nil {
		return resp, err
	}
	s.cur.Store(next)
	switch {
	case r.AuthDisable != nil:
		s.tokens.clear()
	case r.AuthUserDelete != nil:
		s.tokens.invalidateUser(r.AuthUserDelete.Name)
	case r.AuthUserChangePassword != nil:
		s.tokens.invalidateUser(r.AuthUserChangePassword.Name)
	}
	return resp, nil
}

// needsAdmin is etcd's list of the requests only root may make once auth
// is enabled (UserGet and RoleGet have their own rule).
func needsAdmin(r *pb.InternalRaftRequest) bool {
	return r.AuthEnable != nil || r.AuthDisable != nil || r.AuthStatus != nil ||
		r.AuthUserAdd != nil || r.AuthUserDelete != nil || r.AuthUserChangePassword != nil ||
		r.AuthUserGrantRole != nil || r.AuthUserRevokeRole != nil || r.AuthRoleAdd != nil ||
		r.AuthRoleGrantPermission != nil || r.AuthRoleRevokePermission != nil || r.AuthRoleDelete != nil ||
		r.AuthUserList != nil || r.AuthRoleList != nil
}

func (s *Store) authenticate(st *state, r *pb.InternalAuthenticateRequest, checkedAt, index uint64) (any, error) {
	if !st.enabled {
		return nil, ErrAuthNotEnabled
	}
	u := st.users[r.Name]
	if u == nil || (u.Options != nil && u.Options.NoPassword) {
		return nil, ErrAuthFailed
	}
	// The password was checked against the state at checkedAt on the
	// member that received it; a change since (a new password, a deleted
	// user) must not let that check through.
	if checkedAt != st.revision {
		return nil, ErrAuthOldRevision
	}
	token, err := s.tokens.issue(r.SimpleToken, index, r.Name, st.revision)
	if err != nil {
		return nil, err
	}
	return &pb.AuthenticateResponse{Header: &pb.ResponseHeader{}, Token: token}, nil
}

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

func (st *state) hasRole(user, role string) bool {
	u := st.users[user]
	return u != nil && slices.Contains(u.Roles, role)
}

// admin is etcd's IsAdminPermitted: anything goes while auth is disabled;
// otherwise the user must exist and hold the root role.
func (st *state) admin(ai Info) error {
	if !st.enabled {
		return nil
	}
	if ai.User == "" {
		return ErrUserEmpty
	}
	u := st.users[ai.User]
	if u == nil {
		return ErrUserNotFound
	}
	if !slices.Contains(u.Roles, RootRole) {
		return ErrPermissionDenied
	}
	return nil
}
