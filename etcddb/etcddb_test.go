package etcddb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/kv"
	"github.com/corenode/corenode/lease"
)

// state builds an FSM holding what a backup must carry: overwritten and
// deleted keys, a compaction, leases (one checkpointed) with keys, users
// and roles with auth on.
func state(t *testing.T) *fsm.FSM {
	t.Helper()
	f := fsm.New(nil, nil, nil)
	index := uint64(0)
	apply := func(op fsm.Op, msg fsm.Message) {
		t.Helper()
		data, err := fsm.Encode(op, msg)
		if err != nil {
			t.Fatal(err)
		}
		index++
		if r := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(fsm.Result); r.Err != nil {
			t.Fatalf("apply %s: %v", op, r.Err)
		}
	}
	for i := range 30 {
		apply(fsm.OpPut, &pb.PutRequest{Key: fmt.Appendf(nil, "k/%02d", i%20), Value: fmt.Appendf(nil, "v%d", i)})
	}
	apply(fsm.OpDeleteRange, &pb.DeleteRangeRequest{Key: []byte("k/00"), RangeEnd: []byte("k/03")})
	apply(fsm.OpCompact, &pb.CompactionRequest{Revision: 25})
	apply(fsm.OpLeaseGrant, &pb.LeaseGrantRequest{ID: 7, TTL: 60})
	apply(fsm.OpLeaseGrant, &pb.LeaseGrantRequest{ID: -3, TTL: 3600})
	apply(fsm.OpPut, &pb.PutRequest{Key: []byte("leased/a"), Value: []byte("x"), Lease: 7})
	apply(fsm.OpPut, &pb.PutRequest{Key: []byte("leased/b"), Value: []byte("y"), Lease: -3})
	// Lease -3 checkpointed with 1234.5 s left at lease clock 5000.
	apply(fsm.OpLeaseCheckpoint, &lease.Checkpoint{Clock: 5000, Expiries: []lease.Expiry{{ID: -3, Expiry: 5000 + 1_234_500}}})
	apply(fsm.OpTxn, &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("t/1"), Value: []byte("1")}}},
		{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("k/10")}}},
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("t/2"), Value: []byte("2")}}},
	}})
	hash, err := auth.HashPassword("pw", 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*pb.InternalRaftRequest{
		{AuthUserAdd: &pb.AuthUserAddRequest{Name: "root", HashedPassword: hash}},
		{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "root", Role: auth.RootRole}},
		{AuthUserAdd: &pb.AuthUserAddRequest{Name: "svc", HashedPassword: hash}},
		{AuthUserAdd: &pb.AuthUserAddRequest{Name: "cert", Options: &authpb.UserAddOptions{NoPassword: true}}},
		{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "svc-rw"}},
		{AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: "svc-rw",
			Perm: &authpb.Permission{Key: []byte("svc/"), RangeEnd: []byte("svc0"), PermType: authpb.READWRITE}}},
		{AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: "svc-rw",
			Perm: &authpb.Permission{Key: []byte("cfg"), PermType: authpb.READ}}},
		{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "svc", Role: "svc-rw"}},
		{AuthEnable: &pb.AuthEnableRequest{}},
	} {
		apply(fsm.OpAuth, r)
	}
	return f
}

func export(t *testing.T, c fsm.Contents, term uint64) string {
	t.Helper()
	dir := t.TempDir()
	x, err := Export(context.Background(), dir, c, term)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("Export left %v in its directory", left)
	}
	path := filepath.Join(t.TempDir(), "snapshot.db")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := x.WriteTo(out); err != nil || n != x.Size() || n%4096 != 0 {
		t.Fatalf("WriteTo: %d bytes of %d: %v", n, x.Size(), err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func records(sn *kv.Snapshot) []kv.Record { return slices.Collect(sn.Records()) }

// TestExportRead: what Export writes, Read gives back: every revision
// kept, the revisions, leases (a checkpointed one with its remaining TTL,
// on a fresh lease clock) and the auth state.
func TestExportRead(t *testing.T) {
	f := state(t)
	want := f.Contents()
	path := export(t, want, 4)

	got, info, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.StorageVersion != "3.6.0" || info.ConsistentIndex != want.Applied || info.Term != 4 {
		t.Errorf("info %+v, want storage version 3.6.0, consistent index %d, term 4", info, want.Applied)
	}
	if got.KV.Rev() != want.KV.Rev() || got.KV.CompactRev() != want.KV.CompactRev() || want.KV.CompactRev() != 25 {
		t.Errorf("revision %d compacted %d, want %d and %d", got.KV.Rev(), got.KV.CompactRev(), want.KV.Rev(), want.KV.CompactRev())
	}
	if g, w := records(got.KV), records(want.KV); fmt.Sprint(g) != fmt.Sprint(w) {
		t.Errorf("records:\n%v\nwant\n%v", g, w)
	}
	wantLeases := []lease.Lease{{ID: -3, TTL: 3600, Expiry: 1_235_000}, {ID: 7, TTL: 60}}
	if got.LeaseClock != 0 || !slices.Equal(got.Leases, wantLeases) {
		t.Errorf("leases %v at clock %d, want %v at 0", got.Leases, got.LeaseClock, wantLeases)
	}
	if fmt.Sprint(got.Auth) != fmt.Sprint(want.Auth) || !got.Auth.Enabled || len(got.Auth.Users) != 3 || len(got.Auth.Roles) != 1 {
		t.Errorf("auth:\n%v\nwant\n%v", got.Auth, want.Auth)
	}
}

// TestReadDamaged: a file that is not etcd's, or was cut short, is
// refused with an error, never a crash. (Damage inside the pages is the
// SHA-256's to find: see check.)
func TestReadDamaged(t *testing.T) {
	dir := t.TempDir()
	notBolt := filepath.Join(dir, "text")
	os.WriteFile(notBolt, []byte("corenode-fsm\n\x05 and more bytes than a header"), 0o600)
	if _, _, err := Read(notBolt); !errors.Is(err, ErrNotEtcd) {
		t.Errorf("a text file: %v, want ErrNotEtcd", err)
	}

	otherBolt := filepath.Join(dir, "other.db")
	db, err := bolt.Open(otherBolt, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("logs")); return err })
	db.Close()
	if _, _, err := Read(otherBolt); !errors.Is(err, ErrNotEtcd) {
		t.Errorf("another program's bbolt file: %v, want ErrNotEtcd", err)
	}

	// Enough keys for the key bucket to span most of the file's pages.
	s := kv.NewStore(kv.Options{})
	for i := range 3000 {
		s.Put(&pb.PutRequest{Key: fmt.Appendf(nil, "key/%05d", i), Value: make([]byte, 100)})
	}
	good := export(t, fsm.Contents{KV: s.Snapshot(), Auth: auth.State{Revision: 1}}, 1)
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Read(good); err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{len(data) / 2, len(data) - 4096, len(data) - 1} {
		bad := filepath.Join(dir, "short.db")
		os.WriteFile(bad, data[:cut], 0o600)
		if _, _, err := Read(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("cut to %d bytes of %d: %v, want ErrCorrupt", cut, len(data), err)
		}
	}
}
