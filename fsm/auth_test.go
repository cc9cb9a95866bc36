package fsm

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/hashicorp/raft"
	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/auth"
)

func applyAs(t *testing.T, f *FSM, op Op, msg Message, as *pb.RequestHeader) Result {
	t.Helper()
	data, err := EncodeAs(op, msg, as)
	if err != nil {
		t.Fatal(err)
	}
	return f.Apply(&raft.Log{Type: raft.LogCommand, Data: data}).(Result)
}

// enableAuth sets up root and a user u with readwrite on the prefix a/.
func enableAuth(t *testing.T, f *FSM) {
	t.Helper()
	hash, err := auth.HashPassword("pw", 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*pb.InternalRaftRequest{
		{AuthUserAdd: &pb.AuthUserAddRequest{Name: "root", HashedPassword: hash}},
		{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "root", Role: auth.RootRole}},
		{AuthUserAdd: &pb.AuthUserAddRequest{Name: "u", HashedPassword: hash}},
		{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "r"}},
		{AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: "r",
			Perm: &authpb.Permission{Key: []byte("a/"), RangeEnd: []byte("a0"), PermType: authpb.READWRITE}}},
		{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "u", Role: "r"}},
		{AuthEnable: &pb.AuthEnableRequest{}},
	} {
		if res := apply(t, f, OpAuth, r); res.Err != nil {
			t.Fatalf("%v: %v", r, res.Err)
		}
	}
}

// TestWritesAreCheckedWhereTheyApply: a write carries who made it and the
// auth revision its credentials were checked at; the state machine checks
// it against the permissions of the moment it applies, so a revocation
// committed while the write was in flight wins on every member.
func TestWritesAreCheckedWhereTheyApply(t *testing.T) {
	f := New(nil, nil, nil)
	if res := apply(t, f, OpPut, &pb.PutRequest{Key: []byte("a/k")}); res.Err != nil {
		t.Fatalf("a write without credentials while auth is off: %v", res.Err)
	}
	enableAuth(t, f)
	rev := f.Auth().Revision()
	u := &pb.RequestHeader{Username: "u", AuthRevision: rev}
	if res := applyAs(t, f, OpPut, &pb.PutRequest{Key: []byte("a/k")}, u); res.Err != nil {
		t.Fatalf("u writes a/k: %v", res.Err)
	}
	if res := applyAs(t, f, OpPut, &pb.PutRequest{Key: []byte("b/k")}, u); !errors.Is(res.Err, auth.ErrPermissionDenied) {
		t.Fatalf("u writes b/k: %v", res.Err)
	}
	if res := apply(t, f, OpPut, &pb.PutRequest{Key: []byte("a/k")}); !errors.Is(res.Err, auth.ErrUserEmpty) {
		t.Fatalf("a write proposed without credentials, applied after enable: %v", res.Err)
	}
	// The revocation commits between u's check and u's write.
	if res := apply(t, f, OpAuth, &pb.InternalRaftRequest{Header: &pb.RequestHeader{Username: "root", AuthRevision: rev},
		AuthUserRevokeRole: &pb.AuthUserRevokeRoleRequest{Name: "u", Role: "r"}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	before := f.Store().Rev()
	if res := applyAs(t, f, OpDeleteRange, &pb.DeleteRangeRequest{Key: []byte("a/k")}, u); !errors.Is(res.Err, auth.ErrAuthOldRevision) {
		t.Fatalf("a write checked before the revocation: %v, want ErrAuthOldRevision", res.Err)
	}
	if f.Store().Rev() != before {
		t.Fatal("a refused write changed the store")
	}
	// The cluster's own entries are never checked.
	if res := apply(t, f, OpAlarm, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: 1, Alarm: pb.AlarmType_NOSPACE}); res.Err != nil {
		t.Fatalf("an alarm entry: %v", res.Err)
	}
}

func TestAuthStateInSnapshots(t *testing.T) {
	f := New(nil, nil, nil)
	enableAuth(t, f)
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := s.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	g := New(nil, nil, nil)
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if !g.Auth().Enabled() || g.Auth().Revision() != f.Auth().Revision() {
		t.Fatalf("restored auth: enabled %v revision %d, want true %d", g.Auth().Enabled(), g.Auth().Revision(), f.Auth().Revision())
	}
	h1, _, _ := f.Hash()
	h2, _, _ := g.Hash()
	if h1 != h2 {
		t.Fatal("the state hash differs after a restore")
	}
	// The hash covers auth: a member whose auth state diverged stands out.
	apply(t, g, OpAuth, &pb.InternalRaftRequest{Header: &pb.RequestHeader{Username: "root", AuthRevision: g.Auth().Revision()},
		AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "extra"}})
	if h3, _, _ := g.Hash(); h3 == h1 {
		t.Fatal("the state hash ignores the auth state")
	}
}
