package fsm

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/kv"
	"github.com/corenode/corenode/lease"
)

type memSink struct {
	bytes.Buffer
}

func (m *memSink) ID() string    { return "mem" }
func (m *memSink) Cancel() error { return nil }
func (m *memSink) Close() error  { return nil }

func apply(t *testing.T, f *FSM, op Op, msg Message) Result {
	t.Helper()
	return f.Apply(&raft.Log{Type: raft.LogCommand, Data: mustEncode(t, op, msg)}).(Result)
}

func TestApplyValidatesLeasesAtApply(t *testing.T) {
	f := New(nil, nil, nil)
	if r := apply(t, f, OpPut, &pb.PutRequest{Key: []byte("k"), Lease: 7}); !errors.Is(r.Err, kv.ErrLeaseNotFound) {
		t.Fatalf("put to a missing lease: %v", r.Err)
	}
	if r := apply(t, f, OpLeaseGrant, &pb.LeaseGrantRequest{ID: 7, TTL: 10}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := apply(t, f, OpLeaseGrant, &pb.LeaseGrantRequest{ID: 7, TTL: 10}); !errors.Is(r.Err, lease.ErrLeaseExists) {
		t.Fatalf("second grant of one ID: %v", r.Err)
	}
	apply(t, f, OpPut, &pb.PutRequest{Key: []byte("k"), Lease: 7})
	rev := f.Store().Rev()
	apply(t, f, OpLeaseExpire, &lease.Expire{IDs: []int64{7, 8}})
	if f.Store().KeyCount() != 0 || f.LeaseCount() != 0 || f.Store().Rev() != rev+1 {
		t.Fatalf("expire: %d keys, %d leases, rev %d", f.Store().KeyCount(), f.LeaseCount(), f.Store().Rev())
	}
}

func TestSnapshotRoundTripWithLeases(t *testing.T) {
	f := New(nil, nil, nil)
	apply(t, f, OpLeaseGrant, &pb.LeaseGrantRequest{ID: 1, TTL: 10})
	apply(t, f, OpPut, &pb.PutRequest{Key: []byte("a"), Value: []byte("1"), Lease: 1})
	apply(t, f, OpLeaseCheckpoint, &lease.Checkpoint{Clock: 500, Expiries: []lease.Expiry{{ID: 1, Expiry: 9000}}})
	apply(t, f, OpPublish, &pb.Member{ID: 3, Name: "m3"})
	g := roundTrip(t, f)
	l, ok := g.Lease(1)
	if !ok || l.Expiry != 9000 || l.TTL != 10 || g.Member(3).GetName() != "m3" || g.Store().Rev() != f.Store().Rev() {
		t.Fatalf("restored lease %+v %v, member %v", l, ok, g.Member(3))
	}
	if keys := g.Store().LeaseKeys(1); len(keys) != 1 {
		t.Fatalf("lease-to-keys index not rebuilt: %q", keys)
	}
	var clock int64
	g.PromoteLeases(func(c int64, _ []lease.Lease) { clock = c })
	if clock != 500 {
		t.Fatalf("lease clock %d", clock)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(mustEncode(f, OpPut, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}))
	f.Add(mustEncode(f, OpLeaseExpire, &lease.Expire{IDs: []int64{1, 2}}))
	f.Add([]byte{1, 99})
	f.Add(mustEncode(f, OpAuth, &pb.InternalRaftRequest{Header: &pb.RequestHeader{Username: "u", AuthRevision: 3},
		AuthUserAdd: &pb.AuthUserAddRequest{Name: "x", HashedPassword: "aGFzaA=="}}))
	as, err := EncodeAs(OpTxn, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k")}}}}},
		&pb.RequestHeader{Username: "u", AuthRevision: 9})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(as)
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, err := Decode(data)
		if err != nil {
			return
		}
		enc, err := cmd.Encode()
		if err != nil {
			t.Fatalf("a decoded command does not encode: %v", err)
		}
		again, err := Decode(enc)
		if err != nil || again.Op != cmd.Op || (again.As == nil) != (cmd.As == nil) {
			t.Fatalf("re-encoding broke the command: %v", err)
		}
	})
}

// TestNoSpaceAlarmCapsWrites: while a NOSPACE alarm is raised, what adds
// data is refused at apply and what makes room applies, as in etcd; the
// alarm survives a snapshot, and clearing it lets writes apply again.
func TestNoSpaceAlarmCapsWrites(t *testing.T) {
	f := New(nil, nil, nil)
	apply(t, f, OpLeaseGrant, &pb.LeaseGrantRequest{ID: 1, TTL: 10})
	apply(t, f, OpPut, &pb.PutRequest{Key: []byte("a"), Value: []byte("1")})
	raise := &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: 7, Alarm: pb.AlarmType_NOSPACE}
	r := apply(t, f, OpAlarm, raise)
	if got := r.Resp.(*pb.AlarmResponse).Alarms; len(got) != 1 || got[0].MemberID != 7 || got[0].Alarm != pb.AlarmType_NOSPACE {
		t.Fatalf("activate answered %v", got)
	}
	apply(t, f, OpAlarm, raise) // a second raise changes nothing
	if got := f.Alarms(); len(got) != 1 || !f.HasAlarm(0, pb.AlarmType_NOSPACE) {
		t.Fatalf("alarms %v", got)
	}

	put := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("b")}}}
	del := &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a")}}}
	nested := &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Failure: []*pb.RequestOp{put}}}}
	refused := map[string]struct {
		op  Op
		msg Message
	}{
		"put":              {OpPut, &pb.PutRequest{Key: []byte("b")}},
		"grant":            {OpLeaseGrant, &pb.LeaseGrantRequest{ID: 2, TTL: 10}},
		"txn with a put":   {OpTxn, &pb.TxnRequest{Success: []*pb.RequestOp{del, put}}},
		"nested txn's put": {OpTxn, &pb.TxnRequest{Success: []*pb.RequestOp{nested}}},
	}
	for name, c := range refused {
		if r := apply(t, f, c.op, c.msg); !errors.Is(r.Err, ErrNoSpace) {
			t.Errorf("%s under NOSPACE: %v, want %v", name, r.Err, ErrNoSpace)
		}
	}
	rev := f.Store().Rev()
	if r := apply(t, f, OpTxn, &pb.TxnRequest{Success: []*pb.RequestOp{del}}); r.Err != nil || f.Store().Rev() != rev+1 {
		t.Fatalf("txn that only deletes under NOSPACE: %v", r.Err)
	}
	if r := apply(t, f, OpCompact, &pb.CompactionRequest{Revision: f.Store().Rev()}); r.Err != nil {
		t.Fatalf("compact under NOSPACE: %v", r.Err)
	}
	if r := apply(t, f, OpLeaseRevoke, &pb.LeaseRevokeRequest{ID: 1}); r.Err != nil {
		t.Fatalf("revoke under NOSPACE: %v", r.Err)
	}

	// The alarm is part of the replicated state: a member restored from a
	// snapshot refuses the same writes.
	g := roundTrip(t, f)
	if got := g.Alarms(); len(got) != 1 || got[0].MemberID != 7 {
		t.Fatalf("restored alarms %v", got)
	}
	if r := apply(t, g, OpPut, &pb.PutRequest{Key: []byte("b")}); !errors.Is(r.Err, ErrNoSpace) {
		t.Fatalf("put on the restored member: %v", r.Err)
	}

	clear := &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: 7, Alarm: pb.AlarmType_NOSPACE}
	if got := apply(t, g, OpAlarm, clear).Resp.(*pb.AlarmResponse).Alarms; len(got) != 1 {
		t.Fatalf("deactivate answered %v", got)
	}
	if r := apply(t, g, OpPut, &pb.PutRequest{Key: []byte("b")}); r.Err != nil || len(g.Alarms()) != 0 {
		t.Fatalf("put after the alarm was cleared: %v (alarms %v)", r.Err, g.Alarms())
	}
}

// TestRestoresVersion2Snapshot: a snapshot written before alarms existed
// still restores, with no alarm raised.
func TestRestoresVersion2Snapshot(t *testing.T) {
	f := New(nil, nil, nil)
	apply(t, f, OpPut, &pb.PutRequest{Key: []byte("a"), Value: []byte("1")})
	var b bytes.Buffer
	b.WriteString(snapshotMagic)
	b.WriteByte(snapshotV2)
	b.Write([]byte{5, 0, 0, 0, 0}) // applied 5, cluster 0, no members, lease clock 0, no leases
	if _, err := f.Store().Snapshot().WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	g := New(nil, nil, nil)
	if err := g.Restore(io.NopCloser(&b)); err != nil {
		t.Fatal(err)
	}
	if g.Applied() != 5 || g.Store().Rev() != f.Store().Rev() || len(g.Alarms()) != 0 {
		t.Fatalf("restored applied %d rev %d alarms %v", g.Applied(), g.Store().Rev(), g.Alarms())
	}
}

// TestReadLeaseRecord: the grant term is the entry's, the horizon and the
// cleared term only grow, and the record survives a snapshot, so every
// later leader (and a restarted cluster) knows whether to wait, and how
// long.
func TestReadLeaseRecord(t *testing.T) {
	f := New(nil, nil, nil)
	if f.ReadLeases() != (ReadLeaseState{}) {
		t.Fatal("a new state has a read-lease record")
	}
	at := func(term uint64, r *ReadLeases) {
		t.Helper()
		f.Apply(&raft.Log{Type: raft.LogCommand, Term: term, Data: mustEncode(t, OpReadLeases, r)})
	}
	at(3, &ReadLeases{Grant: true, Horizon: 3 * time.Second})
	at(4, &ReadLeases{Grant: true, Horizon: time.Second})
	at(5, &ReadLeases{Cleared: 4})
	at(6, &ReadLeases{Cleared: 2})
	want := ReadLeaseState{GrantTerm: 4, Horizon: 3 * time.Second, Cleared: 4}
	if got := f.ReadLeases(); got != want {
		t.Fatalf("record %+v, want %+v", got, want)
	}
	g := roundTrip(t, f)
	if got := g.ReadLeases(); got != want {
		t.Fatalf("restored record %+v, want %+v", got, want)
	}
	for _, bad := range [][]byte{{formatV1, byte(OpReadLeases)}, {formatV1, byte(OpReadLeases), 2, 0, 0}, {formatV1, byte(OpReadLeases), 1, 0x80}, {formatV1, byte(OpReadLeases), 1, 0, 0, 0}} {
		if _, err := Decode(bad); err == nil {
			t.Fatalf("payload %v decoded", bad[2:])
		}
	}
}

// roundTrip snapshots f and restores the snapshot into a new FSM.
func roundTrip(t *testing.T, f *FSM) *FSM {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	g := New(nil, nil, nil)
	if err := g.Restore(io.NopCloser(&sink)); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestMemberRecords: OpMember records a member as the cluster added it and
// keeps what it published; OpPublish keeps the peer URLs and kind the
// cluster recorded; both survive a snapshot.
func TestMemberRecords(t *testing.T) {
	f := New(nil, nil, nil)
	apply(t, f, OpMember, &pb.Member{ID: 7, PeerURLs: []string{"http://a:2380"}, IsLearner: true})
	apply(t, f, OpPublish, &pb.Member{ID: 7, Name: "m7", ClientURLs: []string{"http://a:2379"}, PeerURLs: []string{"http://stale:2380"}})
	m := f.Member(7)
	if m.Name != "m7" || !m.IsLearner || len(m.PeerURLs) != 1 || m.PeerURLs[0] != "http://a:2380" || m.ClientURLs[0] != "http://a:2379" {
		t.Fatalf("after publish: %+v", m)
	}
	apply(t, f, OpMember, &pb.Member{ID: 7, PeerURLs: []string{"http://b:2380"}})
	m = roundTrip(t, f).Member(7)
	if m.Name != "m7" || m.IsLearner || m.PeerURLs[0] != "http://b:2380" || m.ClientURLs[0] != "http://a:2379" {
		t.Fatalf("after a new record and a snapshot: %+v", m)
	}
	apply(t, f, OpPublish, &pb.Member{ID: 8, Name: "m8", PeerURLs: []string{"http://c:2380"}})
	if m := f.Member(8); m.PeerURLs[0] != "http://c:2380" {
		t.Fatalf("a member with no record publishes its own peer URLs: %+v", m)
	}
}

// TestForgetMembers: the members a forced new cluster drops leave no
// record and no alarm behind, in the state or in its snapshot; the kept
// member's record and alarms stay.
func TestForgetMembers(t *testing.T) {
	f := New(nil, nil, nil)
	for _, id := range []uint64{1, 2, 3} {
		apply(t, f, OpPublish, &pb.Member{ID: id, Name: "m", PeerURLs: []string{"http://a:2380"}})
	}
	apply(t, f, OpAlarm, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: 1, Alarm: pb.AlarmType_CORRUPT})
	apply(t, f, OpAlarm, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: 2, Alarm: pb.AlarmType_NOSPACE})
	dropped := f.ForgetMembers(func(id uint64) bool { return id == 1 })
	if len(dropped) != 1 || dropped[0].MemberID != 2 || dropped[0].Alarm != pb.AlarmType_NOSPACE {
		t.Fatalf("dropped alarms %v, want member 2's NOSPACE", dropped)
	}
	g := roundTrip(t, f)
	if g.Member(1) == nil || g.Member(2) != nil || g.Member(3) != nil {
		t.Fatalf("records after forgetting 2 and 3: %v %v %v", g.Member(1), g.Member(2), g.Member(3))
	}
	if a := g.Alarms(); len(a) != 1 || a[0].MemberID != 1 || g.HasAlarm(0, pb.AlarmType_NOSPACE) {
		t.Fatalf("alarms after forgetting 2 and 3: %v", a)
	}
}
