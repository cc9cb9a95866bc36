package auth

import (
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
