package auth

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/crypto/bcrypt"
)

// fakeClock is the injected clock: tests move it by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time       { return c.t }
func (c *fakeClock) step(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *fakeClock                { return &fakeClock{t: time.Unix(1000, 0)} }
func as(user string, rev uint64) *pb.RequestHeader {
	return &pb.RequestHeader{Username: user, AuthRevision: rev}
}

// harness applies requests in log order, as the state machine does.
type harness struct {
	t     *testing.T
	s     *Store
	clock *fakeClock
	index uint64
}

func newHarness(t *testing.T) *harness { return newHarnessWith(t, TokenKind{}) }

func newHarnessWith(t *testing.T, kind TokenKind) *harness {
	c := newClock()
	return &harness{t: t, s: New(Config{Tokens: kind, Now: c.now, BcryptCost: bcrypt.MinCost, TokenTTL: time.Minute}), clock: c}
}

func (h *harness) apply(r *pb.InternalRaftRequest) (any, error) {
	h.index++
	return h.s.Apply(r, h.index)
}

func (h *harness) must(r *pb.InternalRaftRequest) any {
	h.t.Helper()
	resp, err := h.apply(r)
	if err != nil {
		h.t.Fatalf("apply %v: %v", r, err)
	}
	return resp
}

func (h *harness) addUser(name, password string, hdr *pb.RequestHeader) {
	h.t.Helper()
	hash, err := HashPassword(password, bcrypt.MinCost)
	if err != nil {
		h.t.Fatal(err)
	}
	h.must(&pb.InternalRaftRequest{Header: hdr, AuthUserAdd: &pb.AuthUserAddRequest{Name: name, HashedPassword: hash}})
}

// login runs what the receiving member and the log do for Authenticate.
func (h *harness) login(name, password string) (Info, error) {
	h.t.Helper()
	token, err := h.token(name, password)
	if err != nil {
		return Info{}, err
	}
	return h.s.InfoFromToken(token)
}

// token is login's token.
func (h *harness) token(name, password string) (string, error) {
	h.t.Helper()
	rev, err := h.s.Login(name, password)
	if err != nil {
		return "", err
	}
	resp, err := h.apply(&pb.InternalRaftRequest{Header: as("", rev), Authenticate: &pb.InternalAuthenticateRequest{Name: name, SimpleToken: "prefix"}})
	if err != nil {
		return "", err
	}
	return resp.(*pb.AuthenticateResponse).Token, nil
}

// enableWithRoot is etcd's guide: add root, grant it root, enable; then
// root logs in.
func (h *harness) enableWithRoot() Info {
	h.t.Helper()
	h.enable()
	root, err := h.login("root", "rootpw")
	if err != nil {
		h.t.Fatal(err)
	}
	return root
}

// enable is enableWithRoot without the login.
func (h *harness) enable() {
	h.t.Helper()
	h.addUser("root", "rootpw", nil)
	if _, err := h.apply(&pb.InternalRaftRequest{AuthEnable: &pb.AuthEnableRequest{}}); !errors.Is(err, ErrRootRoleNotExist) {
		h.t.Fatalf("enable before root has the root role: %v, want ErrRootRoleNotExist", err)
	}
	h.must(&pb.InternalRaftRequest{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "root", Role: RootRole}})
	h.must(&pb.InternalRaftRequest{AuthEnable: &pb.AuthEnableRequest{}})
}

func TestEnableNeedsRootUserWithRootRole(t *testing.T) {
	h := newHarness(t)
	if _, err := h.apply(&pb.InternalRaftRequest{AuthEnable: &pb.AuthEnableRequest{}}); !errors.Is(err, ErrRootUserNotExist) {
		t.Fatalf("enable without root: %v", err)
	}
	h.enableWithRoot()
	if !h.s.Enabled() {
		t.Fatal("not enabled")
	}
	// Root cannot lose what keeps it root while auth is on.
	for _, r := range []*pb.InternalRaftRequest{
		{Header: as("root", h.s.Revision()), AuthUserDelete: &pb.AuthUserDeleteRequest{Name: "root"}},
		{Header: as("root", h.s.Revision()), AuthUserRevokeRole: &pb.AuthUserRevokeRoleRequest{Name: "root", Role: RootRole}},
		{Header: as("root", h.s.Revision()), AuthRoleDelete: &pb.AuthRoleDeleteRequest{Role: RootRole}},
	} {
		if _, err := h.apply(r); !errors.Is(err, ErrInvalidAuthMgmt) {
			t.Errorf("%v: %v, want ErrInvalidAuthMgmt", r, err)
		}
	}
}

func TestAdminRequestsNeedRoot(t *testing.T) {
	h := newHarness(t)
	root := h.enableWithRoot()
	h.addUser("alice", "pw", as(root.User, root.Revision))
	h.must(&pb.InternalRaftRequest{Header: as("root", h.s.Revision()), AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "a"}})
	h.must(&pb.InternalRaftRequest{Header: as("root", h.s.Revision()), AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "alice", Role: "a"}})
	alice, err := h.login("alice", "pw")
	if err != nil {
		t.Fatal(err)
	}
	hdr := as(alice.User, alice.Revision)
	for _, r := range []*pb.InternalRaftRequest{
		{Header: hdr, AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "b"}},
		{Header: hdr, AuthUserList: &pb.AuthUserListRequest{}},
		{Header: hdr, AuthStatus: &pb.AuthStatusRequest{}},
		{Header: hdr, AuthDisable: &pb.AuthDisableRequest{}},
		{Header: hdr, AuthUserGet: &pb.AuthUserGetRequest{Name: "root"}},
		{Header: hdr, AuthRoleGet: &pb.AuthRoleGetRequest{Role: RootRole}},
	} {
		if _, err := h.apply(r); !errors.Is(err, ErrPermissionDenied) {
			t.Errorf("alice: %v: %v, want ErrPermissionDenied", r, err)
		}
	}
	// Her own user and roles she holds, she may see.
	if resp := h.must(&pb.InternalRaftRequest{Header: hdr, AuthUserGet: &pb.AuthUserGetRequest{Name: "alice"}}); len(resp.(*pb.AuthUserGetResponse).Roles) != 1 {
		t.Errorf("alice's own roles: %v", resp)
	}
	h.must(&pb.InternalRaftRequest{Header: hdr, AuthRoleGet: &pb.AuthRoleGetRequest{Role: "a"}})
	if _, err := h.apply(&pb.InternalRaftRequest{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "c"}}); !errors.Is(err, ErrUserEmpty) {
		t.Errorf("no user: %v, want ErrUserEmpty", err)
	}
}

func TestPermissionsFollowRolesAndRevision(t *testing.T) {
	h := newHarness(t)
	root := h.enableWithRoot()
	rootHdr := func() *pb.RequestHeader { return as(root.User, h.s.Revision()) }
	h.addUser("svc", "pw", rootHdr())
	h.must(&pb.InternalRaftRequest{Header: rootHdr(), AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "svc-a"}})
	grant := func(key, end string, typ authpb.Permission_Type) {
		h.must(&pb.InternalRaftRequest{Header: rootHdr(), AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{
			Name: "svc-a", Perm: &authpb.Permission{Key: []byte(key), RangeEnd: []byte(end), PermType: typ}}})
	}
	grant("/svc/a/", "/svc/a0", authpb.READWRITE) // the prefix /svc/a/
	grant("/cfg", "", authpb.READ)                // one key
	grant("/logs/", "\x00", authpb.WRITE)         // every key from /logs/ on
	h.must(&pb.InternalRaftRequest{Header: rootHdr(), AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "svc", Role: "svc-a"}})
	svc, err := h.login("svc", "pw")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		key, end string
		write    bool
		want     error
	}{
		{"own key", "/svc/a/x", "", false, nil},
		{"own prefix", "/svc/a/", "/svc/a0", true, nil},
		{"inside prefix", "/svc/a/k", "/svc/a/z", true, nil},
		{"past prefix", "/svc/a/", "/svc/b", false, ErrPermissionDenied},
		{"other service", "/svc/b/x", "", false, ErrPermissionDenied},
		{"read-only key read", "/cfg", "", false, nil},
		{"read-only key written", "/cfg", "", true, ErrPermissionDenied},
		{"key next to the read-only key", "/cfg0", "", false, ErrPermissionDenied},
		{"write-only open range", "/logs/z/z", "", true, nil},
		{"write-only open range read", "/logs/z", "", false, ErrPermissionDenied},
		{"open end inside open grant", "/logs/q", "\x00", true, nil},
		{"open end outside", "/svc/a/", "\x00", false, ErrPermissionDenied},
		{"everything", "\x00", "\x00", false, ErrPermissionDenied},
	}
	for _, c := range cases {
		var err error
		if c.write {
			err = h.s.IsDeleteRangePermitted(svc, []byte(c.key), []byte(c.end))
		} else {
			err = h.s.IsRangePermitted(svc, []byte(c.key), []byte(c.end))
		}
		if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := h.s.IsRangePermitted(Info{User: root.User, Revision: h.s.Revision()}, []byte("\x00"), []byte("\x00")); err != nil {
		t.Errorf("root reads everything: %v", err)
	}
	if err := h.s.IsRangePermitted(Info{}, []byte("/svc/a/x"), nil); !errors.Is(err, ErrUserEmpty) {
		t.Errorf("no credentials: %v, want ErrUserEmpty", err)
	}

	// A revocation advances the revision: what was checked before it is
	// refused where it applies, and the token itself now reads the new
	// state (the key is gone).
	before := svc.Revision
	h.must(&pb.InternalRaftRequest{Header: rootHdr(), AuthRoleRevokePermission: &pb.AuthRoleRevokePermissionRequest{
		Role: "svc-a", Key: []byte("/svc/a/"), RangeEnd: []byte("/svc/a0")}})
	if err := h.s.IsPutPermitted(Info{User: "svc", Revision: before}, []byte("/svc/a/x")); !errors.Is(err, ErrAuthOldRevision) {
		t.Errorf("checked before the revocation: %v, want ErrAuthOldRevision", err)
	}
	now, err := h.login("svc", "pw")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.s.IsRangePermitted(now, []byte("/svc/a/x"), nil); !errors.Is(err, ErrPermissionDenied) {
		t.Errorf("after the revocation: %v, want ErrPermissionDenied", err)
	}
}

func TestTxnNeedsEveryBranch(t *testing.T) {
	h := newHarness(t)
	root := h.enableWithRoot()
	rootHdr := func() *pb.RequestHeader { return as(root.User, h.s.Revision()) }
	h.addUser("u", "pw", rootHdr())
	h.must(&pb.InternalRaftRequest{Header: rootHdr(), AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "r"}})
	h.must(&pb.InternalRaftRequest{Header: rootHdr(), AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{
		Name: "r", Perm: &authpb.Permission{Key: []byte("a"), RangeEnd: []byte("b"), PermType: authpb.READWRITE}}})
	h.must(&pb.InternalRaftRequest{Header: rootHdr(), AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "u", Role: "r"}})
	u, err := h.login("u", "pw")
	if err != nil {
		t.Fatal(err)
	}
	put := func(k string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k)}}}
	}
	noLeaseKeys := func(int64) [][]byte { return nil }
	ok := &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("a1")}}, Success: []*pb.RequestOp{put("a2")}, Failure: []*pb.RequestOp{put("a3")}}
	if err := h.s.CheckKeys(u, ok, noLeaseKeys); err != nil {
		t.Errorf("txn inside the grant: %v", err)
	}
	for name, txn := range map[string]*pb.TxnRequest{
		"compare outside": {Compare: []*pb.Compare{{Key: []byte("c")}}},
		"failure branch":  {Success: []*pb.RequestOp{put("a2")}, Failure: []*pb.RequestOp{put("c")}},
		"nested txn":      {Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{put("z")}}}}}},
	} {
		if err := h.s.CheckKeys(u, txn, noLeaseKeys); !errors.Is(err, ErrPermissionDenied) {
			t.Errorf("%s: %v, want ErrPermissionDenied", name, err)
		}
	}
	for name, c := range map[string]struct {
		req  any
		want error
	}{
		"range inside":                {&pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("b")}, nil},
		"range from a key on":         {&pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte{0}}, ErrPermissionDenied},
		"delete of a range inside":    {&pb.DeleteRangeRequest{Key: []byte("a1"), RangeEnd: []byte("a2"), PrevKv: true}, nil},
		"delete past the grant":       {&pb.DeleteRangeRequest{Key: []byte("a1"), RangeEnd: []byte("c")}, ErrPermissionDenied},
		"put outside":                 {&pb.PutRequest{Key: []byte("c")}, ErrPermissionDenied},
		"not a key-value request":     {&pb.CompactionRequest{}, nil},
		"read-only txn reads outside": {&pb.TxnRequest{Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("c")}}}}}, ErrPermissionDenied},
	} {
		if err := h.s.CheckKeys(u, c.req, noLeaseKeys); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	// Attaching a lease that holds a key the user cannot write is refused.
	leaseKeys := func(id int64) [][]byte { return [][]byte{[]byte("zz")} }
	if err := h.s.CheckPut(u, &pb.PutRequest{Key: []byte("a1"), Lease: 7}, leaseKeys); !errors.Is(err, ErrPermissionDenied) {
		t.Errorf("put with someone else's lease: %v", err)
	}
}

func TestTokensExpireAndAreDroppedOnChange(t *testing.T) {
	h := newHarness(t)
	root := h.enableWithRoot()
	h.addUser("u", "pw", as(root.User, h.s.Revision()))
	rev, err := h.s.Login("u", "pw")
	if err != nil {
		t.Fatal(err)
	}
	resp := h.must(&pb.InternalRaftRequest{Header: as("", rev), Authenticate: &pb.InternalAuthenticateRequest{Name: "u", SimpleToken: "abc"}})
	token := resp.(*pb.AuthenticateResponse).Token
	if want := "abc." + itoa(h.index); token != want {
		t.Fatalf("token %q, want %q (prefix, dot, raft index)", token, want)
	}
	// Each use renews the TTL; a minute without use ends it.
	h.clock.step(59 * time.Second)
	if _, err := h.s.InfoFromToken(token); err != nil {
		t.Fatalf("used within the TTL: %v", err)
	}
	h.clock.step(59 * time.Second)
	if _, err := h.s.InfoFromToken("Bearer " + token); err != nil {
		t.Fatalf("renewed by the last use: %v", err)
	}
	h.clock.step(time.Minute)
	if _, err := h.s.InfoFromToken(token); !errors.Is(err, ErrInvalidAuthToken) {
		t.Fatalf("idle for the TTL: %v", err)
	}

	// A password change drops the user's tokens, and a login checked
	// before the change cannot be applied after it.
	rev, _ = h.s.Login("u", "pw")
	resp = h.must(&pb.InternalRaftRequest{Header: as("", rev), Authenticate: &pb.InternalAuthenticateRequest{Name: "u", SimpleToken: "def"}})
	token = resp.(*pb.AuthenticateResponse).Token
	stale, _ := h.s.Login("u", "pw")
	hash, _ := HashPassword("new", bcrypt.MinCost)
	h.must(&pb.InternalRaftRequest{Header: as("root", h.s.Revision()), AuthUserChangePassword: &pb.AuthUserChangePasswordRequest{Name: "u", HashedPassword: hash}})
	if _, err := h.s.InfoFromToken(token); !errors.Is(err, ErrInvalidAuthToken) {
		t.Errorf("token after the password change: %v, want ErrInvalidAuthToken", err)
	}
	if _, err := h.login("root", "rootpw"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.apply(&pb.InternalRaftRequest{Header: as("", stale), Authenticate: &pb.InternalAuthenticateRequest{Name: "u", SimpleToken: "x"}}); !errors.Is(err, ErrAuthOldRevision) {
		t.Errorf("login checked before the change: %v, want ErrAuthOldRevision", err)
	}
	if _, err := h.login("u", "pw"); !errors.Is(err, ErrAuthFailed) {
		t.Errorf("old password: %v", err)
	}
	// AuthDisable drops every token.
	h.must(&pb.InternalRaftRequest{Header: as("root", h.s.Revision()), AuthDisable: &pb.AuthDisableRequest{}})
	simple := h.s.tokens.(*tokens)
	simple.mu.Lock()
	n := len(simple.byToken)
	simple.mu.Unlock()
	if n != 0 {
		t.Errorf("tokens after disable: %d", n)
	}
}

func TestFailedLoginsBackOff(t *testing.T) {
	h := newHarness(t)
	h.enableWithRoot()
	for i := 0; i < FreeFailures; i++ {
		if _, err := h.s.Login("root", "guess"); !isReason(err, "password") {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	// Now even the right password is refused, unchecked, until the
	// back-off has passed; each further failure doubles it.
	if _, err := h.s.Login("root", "rootpw"); !isReason(err, "backoff") {
		t.Fatalf("within the back-off: %v", err)
	}
	h.clock.step(FirstBackoff)
	if _, err := h.s.Login("root", "guess"); !isReason(err, "password") {
		t.Fatalf("after the back-off: %v", err)
	}
	h.clock.step(FirstBackoff)
	if _, err := h.s.Login("root", "rootpw"); !isReason(err, "backoff") {
		t.Fatalf("the back-off doubled: %v", err)
	}
	h.clock.step(FirstBackoff)
	if _, err := h.s.Login("root", "rootpw"); err != nil {
		t.Fatalf("after the doubled back-off: %v", err)
	}
	// A success resets the count.
	if _, err := h.s.Login("root", "guess"); !isReason(err, "password") {
		t.Fatalf("after a success: %v", err)
	}
	if got := backoff(100); got != MaxBackoff {
		t.Errorf("backoff(100) = %v, want the cap %v", got, MaxBackoff)
	}
	if _, err := h.s.Login("nobody", "x"); !isReason(err, "user") || !errors.Is(err, ErrAuthFailed) {
		t.Errorf("unknown user: %v", err)
	}
}

func isReason(err error, reason string) bool {
	var le *LoginError
	return errors.As(err, &le) && le.Reason == reason
}

func itoa(n uint64) string { return tokenFor("", n)[1:] }

func TestSnapshotRoundTrip(t *testing.T) {
	h := newHarness(t)
	root := h.enableWithRoot()
	h.addUser("u", "pw", as(root.User, h.s.Revision()))
	h.must(&pb.InternalRaftRequest{Header: as("root", h.s.Revision()), AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "r"}})
	h.must(&pb.InternalRaftRequest{Header: as("root", h.s.Revision()), AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{
		Name: "r", Perm: &authpb.Permission{Key: []byte("k"), PermType: authpb.READ}}})
	h.must(&pb.InternalRaftRequest{Header: as("root", h.s.Revision()), AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "u", Role: "r"}})
	b, err := h.s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	other := New(Config{})
	if err := other.Restore(b); err != nil {
		t.Fatal(err)
	}
	b2, _ := other.Marshal()
	if string(b) != string(b2) {
		t.Fatal("restored state marshals differently")
	}
	if !other.Enabled() || other.Revision() != h.s.Revision() {
		t.Fatalf("restored enabled=%v revision=%d, want true %d", other.Enabled(), other.Revision(), h.s.Revision())
	}
	if err := other.IsRangePermitted(Info{User: "u", Revision: other.Revision()}, []byte("k"), nil); err != nil {
		t.Fatalf("restored permissions: %v", err)
	}
	if _, err := other.Login("u", "pw"); err != nil {
		t.Fatalf("restored password: %v", err)
	}
	for i := range b {
		if err := New(Config{}).Restore(b[:i]); err == nil {
			t.Fatalf("a snapshot cut at %d of %d bytes restored", i, len(b))
		}
	}
}

func TestMergeAndCover(t *testing.T) {
	sp := func(b, e string) span {
		if e == "" {
			return span{begin: []byte(b)}
		}
		return span{begin: []byte(b), end: []byte(e)}
	}
	got := merge([]span{sp("c", "d"), sp("a", "b"), sp("b", "c"), sp("x", ""), sp("y", "z"), sp("m", "n")})
	want := []span{sp("a", "d"), sp("m", "n"), sp("x", "")}
	if len(got) != len(want) {
		t.Fatalf("merge: %q", got)
	}
	for i := range want {
		if string(got[i].begin) != string(want[i].begin) || string(got[i].end) != string(want[i].end) {
			t.Fatalf("merge: %q, want %q", got, want)
		}
	}
	for _, c := range []struct {
		key, end string
		want     bool
	}{
		{"a", "", true}, {"c", "d", true}, {"a", "d", true}, {"a", "e", false},
		{"d", "", false}, {"m", "", true}, {"n", "", false}, {"x", "\x00", true},
		{"w", "\x00", false}, {"zzz", "", true}, {"0", "", false}, {"c", "b", true},
	} {
		if got := covers(want, []byte(c.key), []byte(c.end)); got != c.want {
			t.Errorf("covers [%q, %q) = %v, want %v", c.key, c.end, got, c.want)
		}
	}
}

// FuzzRestore: a damaged auth section of a snapshot is refused, never a
// panic, and what is accepted marshals back to a section that restores.
func FuzzRestore(f *testing.F) {
	s := New(Config{})
	s.Apply(&pb.InternalRaftRequest{AuthUserAdd: &pb.AuthUserAddRequest{Name: "root", HashedPassword: "aGFzaA=="}}, 1)
	s.Apply(&pb.InternalRaftRequest{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "root", Role: RootRole}}, 2)
	s.Apply(&pb.InternalRaftRequest{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "r"}}, 3)
	s.Apply(&pb.InternalRaftRequest{AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: "r",
		Perm: &authpb.Permission{Key: []byte("k"), RangeEnd: []byte("\x00")}}}, 4)
	b, err := s.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		s := New(Config{})
		if err := s.Restore(data); err != nil {
			return
		}
		again, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := New(Config{}).Restore(again); err != nil {
			t.Fatalf("re-marshalled state does not restore: %v", err)
		}
	})
}

// FuzzApply: any decodable auth request, applied to a store with users,
// roles and auth enabled, is answered or refused, never a panic; and the
// state it leaves marshals to a section that restores to the same bytes,
// as a member restarting from a snapshot must.
func FuzzApply(f *testing.F) {
	for _, r := range []*pb.InternalRaftRequest{
		{Header: as("root", 2), AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: "r",
			Perm: &authpb.Permission{Key: []byte("/a/"), RangeEnd: []byte("/a0"), PermType: authpb.READWRITE}}},
		{Header: as("root", 2), AuthUserRevokeRole: &pb.AuthUserRevokeRoleRequest{Name: "u", Role: "r"}},
		{Header: as("u", 2), AuthUserDelete: &pb.AuthUserDeleteRequest{Name: "root"}},
		{Header: as("", 2), Authenticate: &pb.InternalAuthenticateRequest{Name: "u", SimpleToken: "p"}},
		{Header: as("root", 2), AuthDisable: &pb.AuthDisableRequest{}},
	} {
		b, err := r.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r pb.InternalRaftRequest
		if err := r.Unmarshal(data); err != nil {
			return
		}
		h := newHarness(t)
		h.enable()
		h.addUser("u", "pw", as("root", h.s.Revision()))
		h.must(&pb.InternalRaftRequest{Header: as("root", h.s.Revision()), AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "r"}})
		h.apply(&r)
		b, err := h.s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		s := New(Config{})
		if err := s.Restore(b); err != nil {
			t.Fatalf("the state after %v does not restore: %v", &r, err)
		}
		again, err := s.Marshal()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("restore changed the state after %v: %v", &r, err)
		}
	})
}

// TestStateRoundTrip: State and State.Marshal carry the store's state as
// etcd's backend holds it; what another system's backup holds in another
// order is put in the store's, and a repeated or empty name is refused.
func TestStateRoundTrip(t *testing.T) {
	h := newHarness(t)
	root := h.enableWithRoot()
	h.addUser("u", "pw", as(root.User, h.s.Revision()))
	h.must(&pb.InternalRaftRequest{Header: as("root", h.s.Revision()), AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "r"}})
	for _, k := range []string{"z", "k"} {
		h.must(&pb.InternalRaftRequest{Header: as("root", h.s.Revision()), AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{
			Name: "r", Perm: &authpb.Permission{Key: []byte(k), PermType: authpb.READ}}})
	}
	h.must(&pb.InternalRaftRequest{Header: as("root", h.s.Revision()), AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "u", Role: "r"}})
	want, err := h.s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	st := h.s.State()
	if !st.Enabled || st.Revision != h.s.Revision() || len(st.Users) != 2 || len(st.Roles) != 1 {
		t.Fatalf("state %+v", st)
	}
	// Another order of roles and permissions, as etcd may keep them.
	mixed := State{Enabled: st.Enabled, Revision: st.Revision, Users: []*authpb.User{st.Users[1], st.Users[0]}}
	r := *st.Roles[0]
	r.KeyPermission = []*authpb.Permission{r.KeyPermission[1], r.KeyPermission[0]}
	mixed.Roles = []*authpb.Role{&r}
	got, err := mixed.Marshal()
	if err != nil || string(got) != string(want) {
		t.Fatalf("State.Marshal: %v; differs from the store's Marshal: %v", err, string(got) != string(want))
	}
	other := New(Config{})
	if err := other.Restore(got); err != nil {
		t.Fatal(err)
	}
	if err := other.IsRangePermitted(Info{User: "u", Revision: other.Revision()}, []byte("z"), nil); err != nil {
		t.Fatalf("restored permissions: %v", err)
	}
	for name, bad := range map[string]State{
		"revision 0":    {Users: st.Users},
		"repeated user": {Revision: 2, Users: []*authpb.User{st.Users[0], st.Users[0]}},
		"nameless role": {Revision: 2, Roles: []*authpb.Role{{}}},
	} {
		if _, err := bad.Marshal(); err == nil {
			t.Errorf("%s: marshalled", name)
		}
	}
}
