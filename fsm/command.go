package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/lease"
)

// Command encoding, version 1:
//
//	byte 0     format version (1)
//	byte 1     op
//	bytes 2..  the op's payload: an etcdserverpb message in protobuf encoding
//
// Payloads are etcd's own request messages, so a command is exactly as
// compact as the client's request and new fields added by etcd decode as
// unknown fields rather than corrupting state. A new op or payload shape gets
// a new op code; a change in how an existing op is applied gets a new format
// version, so a member never silently applies an entry it does not
// understand.
const formatV1 byte = 1

// Op names what a command does to the state machine.
type Op byte

// Op codes are part of the on-disk log format: never renumber them.
const (
	OpPut         Op = 1
	OpDeleteRange Op = 2
	OpTxn         Op = 3
	OpCompact     Op = 4
	// OpPublish records a member's name and client URLs (pb.Member).
	OpPublish Op = 5
	// OpLeaseGrant grants a lease (pb.LeaseGrantRequest, ID chosen by the proposer).
	OpLeaseGrant Op = 6
	// OpLeaseRevoke revokes a lease and deletes its keys (pb.LeaseRevokeRequest).
	OpLeaseRevoke Op = 7
	// OpLeaseExpire revokes leases the leader found expired (lease.Expire).
	OpLeaseExpire Op = 8
	// OpLeaseCheckpoint advances the lease clock, checkpoints and resets (lease.Checkpoint).
	OpLeaseCheckpoint Op = 9
	// OpAlarm raises or clears a member's alarm (pb.AlarmRequest, ACTIVATE or DEACTIVATE).
	OpAlarm Op = 10
	// OpReadLeases records that a leader of the entry's term may grant read
	// leases, or that every lease of earlier terms has run out (ReadLeases);
	// a later leader waits out the horizon before its first write that could
	// touch a key, unless the last granting term was cleared.
	OpReadLeases Op = 11
	// OpAuth changes or reads the auth state (pb.InternalRaftRequest with
	// one auth request set and, in Header, who asks): see auth.Store.Apply.
	OpAuth Op = 12
	// OpAs carries a client's write with who it acts for, once auth is
	// enabled: pb.InternalRaftRequest with Header (user and the auth
	// revision its credentials were checked at) and one of Put,
	// DeleteRange, Txn, Compaction, LeaseGrant, LeaseRevoke or Alarm. Decode
	// unwraps it, so the rest of the code sees the inner op, with As set.
	OpAs Op = 13
	// OpMember records a member the cluster added, or its new peer URLs
	// (pb.Member: ID, PeerURLs, IsLearner): raft's configuration says who
	// is a member and who votes; this record says what the member was added
	// as, so a new leader still promotes a voter added as a non-voter until
	// it caught up (node's promoter), and a joining member finds its ID by
	// its peer URLs. The name and client URLs a member published stay.
	OpMember Op = 14
	// OpIncarnation records the cluster's incarnation (Incarnation): a
	// random ID the first leader of a history commits (incarnation.go).
	OpIncarnation Op = 15
)

func (o Op) String() string {
	switch o {
	case OpPut:
		return "put"
	case OpDeleteRange:
		return "delete_range"
	case OpTxn:
		return "txn"
	case OpCompact:
		return "compact"
	case OpPublish:
		return "publish"
	case OpLeaseGrant:
		return "lease_grant"
	case OpLeaseRevoke:
		return "lease_revoke"
	case OpLeaseExpire:
		return "lease_expire"
	case OpLeaseCheckpoint:
		return "lease_checkpoint"
	case OpAlarm:
		return "alarm"
	case OpReadLeases:
		return "read_leases"
	case OpAuth:
		return "auth"
	case OpAs:
		return "as"
	case OpMember:
		return "member"
	case OpIncarnation:
		return "incarnation"
	}
	return fmt.Sprintf("op(%d)", byte(o))
}

// Command is one decoded state machine command.
type Command struct {
	Op  Op
	Msg Message
	// As is who the command acts for, when it came wrapped in OpAs; nil
	// for a command proposed without credentials.
	As *pb.RequestHeader
}

// Encode returns c's log entry: EncodeAs when c acts for a user (As
// set), Encode otherwise. Decode returns c again.
func (c Command) Encode() ([]byte, error) {
	if c.As != nil {
		return EncodeAs(c.Op, c.Msg, c.As)
	}
	return Encode(c.Op, c.Msg)
}

// Message is what every etcd request message implements (gogo protobuf).
type Message interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
	Size() int
}

// ErrUnknownFormat means the entry was written by a newer corenode.
var ErrUnknownFormat = errors.New("fsm: unknown command format")

// ErrNoSpace refuses a write that would grow the state while the NOSPACE
// alarm is raised (etcd's "database space exceeded"); reads, deletes and
// compaction still apply.
var ErrNoSpace = errors.New("fsm: database space exceeded")

// Encode returns the log entry for a command.
func Encode(op Op, msg Message) ([]byte, error) {
	buf := make([]byte, 2+msg.Size())
	buf[0] = formatV1
	buf[1] = byte(op)
	if _, err := msgMarshalTo(msg, buf[2:]); err != nil {
		return nil, fmt.Errorf("fsm: encode %s: %w", op, err)
	}
	return buf, nil
}

// msgMarshalTo uses the generated MarshalTo when there is one, which saves a
// copy on the proposal hot path.
func msgMarshalTo(msg Message, dst []byte) (int, error) {
	if m, ok := msg.(interface{ MarshalTo([]byte) (int, error) }); ok {
		return m.MarshalTo(dst)
	}
	b, err := msg.Marshal()
	if err != nil {
		return 0, err
	}
	return copy(dst, b), nil
}

// Decode parses a log entry written by Encode.
func Decode(data []byte) (Command, error) {
	if len(data) < 2 {
		return Command{}, fmt.Errorf("fsm: decode: entry of %d bytes is too short", len(data))
	}
	if data[0] != formatV1 {
		return Command{}, fmt.Errorf("%w: version %d", ErrUnknownFormat, data[0])
	}
	op := Op(data[1])
	var msg Message
	switch op {
	case OpPut:
		msg = &pb.PutRequest{}
	case OpDeleteRange:
		msg = &pb.DeleteRangeRequest{}
	case OpTxn:
		msg = &pb.TxnRequest{}
	case OpCompact:
		msg = &pb.CompactionRequest{}
	case OpPublish, OpMember:
		msg = &pb.Member{}
	case OpLeaseGrant:
		msg = &pb.LeaseGrantRequest{}
	case OpLeaseRevoke:
		msg = &pb.LeaseRevokeRequest{}
	case OpLeaseExpire:
		msg = &lease.Expire{}
	case OpLeaseCheckpoint:
		msg = &lease.Checkpoint{}
	case OpAlarm:
		msg = &pb.AlarmRequest{}
	case OpReadLeases:
		msg = &ReadLeases{}
	case OpAuth:
		msg = &pb.InternalRaftRequest{}
	case OpIncarnation:
		msg = &Incarnation{}
	case OpAs:
		return decodeAs(data[2:])
	default:
		return Command{}, fmt.Errorf("%w: op %d", ErrUnknownFormat, byte(op))
	}
	if err := msg.Unmarshal(data[2:]); err != nil {
		return Command{}, fmt.Errorf("fsm: decode %s: %w", op, err)
	}
	return Command{Op: op, Msg: msg}, nil
}

// ReadLeases is OpReadLeases's payload. A leader commits one with Grant
// set before its first read lease of a term: the entry's term becomes the
// last term that granted, and Horizon the longest a lease may stay valid
// after the start of the leadership confirmation it was granted under (the
// lease duration plus the confirmation window). A leader that has waited
// out every lease of earlier terms commits one with Cleared, the last
// granting term it waited out, so its successors need not wait again.
type ReadLeases struct {
	Grant   bool
	Horizon time.Duration
	Cleared uint64
}

// Marshal implements Message: a byte (1: Grant), then uvarints of the
// horizon in nanoseconds and of the cleared term.
func (r *ReadLeases) Marshal() ([]byte, error) {
	b := []byte{0}
	if r.Grant {
		b[0] = 1
	}
	b = binary.AppendUvarint(b, uint64(r.Horizon))
	return binary.AppendUvarint(b, r.Cleared), nil
}

// Unmarshal implements Message.
func (r *ReadLeases) Unmarshal(b []byte) error {
	bad := errors.New("fsm: bad read-leases payload")
	if len(b) < 1 || b[0] > 1 {
		return bad
	}
	r.Grant = b[0] == 1
	h, n := binary.Uvarint(b[1:])
	if n <= 0 || h > math.MaxInt64 {
		return bad
	}
	c, m := binary.Uvarint(b[1+n:])
	if m <= 0 || 1+n+m != len(b) {
		return bad
	}
	r.Horizon, r.Cleared = time.Duration(h), c
	return nil
}

// Size implements Message.
func (r *ReadLeases) Size() int {
	b, _ := r.Marshal()
	return len(b)
}

// EncodeAs returns the log entry for a client's write made as the user in
// as (OpAs).
func EncodeAs(op Op, msg Message, as *pb.RequestHeader) ([]byte, error) {
	r := &pb.InternalRaftRequest{Header: as}
	switch m := msg.(type) {
	case *pb.PutRequest:
		r.Put = m
	case *pb.DeleteRangeRequest:
		r.DeleteRange = m
	case *pb.TxnRequest:
		r.Txn = m
	case *pb.CompactionRequest:
		r.Compaction = m
	case *pb.LeaseGrantRequest:
		r.LeaseGrant = m
	case *pb.LeaseRevokeRequest:
		r.LeaseRevoke = m
	case *pb.AlarmRequest:
		r.Alarm = m
	default:
		return nil, fmt.Errorf("fsm: encode %s as a user: %T cannot carry credentials", op, msg)
	}
	if want, _ := innerOf(r); want != op {
		return nil, fmt.Errorf("fsm: encode %s as a user: payload %T is a %s", op, msg, want)
	}
	return Encode(OpAs, r)
}

func decodeAs(payload []byte) (Command, error) {
	r := &pb.InternalRaftRequest{}
	if err := r.Unmarshal(payload); err != nil {
		return Command{}, fmt.Errorf("fsm: decode %s: %w", OpAs, err)
	}
	op, msg := innerOf(r)
	if msg == nil {
		return Command{}, fmt.Errorf("fsm: decode %s: no request inside", OpAs)
	}
	as := r.Header
	if as == nil {
		as = &pb.RequestHeader{}
	}
	return Command{Op: op, Msg: msg, As: as}, nil
}

// innerOf returns the one client write an OpAs payload carries.
func innerOf(r *pb.InternalRaftRequest) (Op, Message) {
	switch {
	case r.Put != nil:
		return OpPut, r.Put
	case r.DeleteRange != nil:
		return OpDeleteRange, r.DeleteRange
	case r.Txn != nil:
		return OpTxn, r.Txn
	case r.Compaction != nil:
		return OpCompact, r.Compaction
	case r.LeaseGrant != nil:
		return OpLeaseGrant, r.LeaseGrant
	case r.LeaseRevoke != nil:
		return OpLeaseRevoke, r.LeaseRevoke
	case r.Alarm != nil:
		return OpAlarm, r.Alarm
	}
	return 0, nil
}
