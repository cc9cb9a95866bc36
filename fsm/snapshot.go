package fsm

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/kv"
	"github.com/corenode/corenode/lease"
)

// Snapshot format, version 6 (version 5 lacks the incarnation, version 4
// also the auth state, version 3 also the read-lease horizon, version 2
// also the alarms, version 1 also the applied index):
//
//	magic "corenode-fsm\n", version byte (6)
//	uvarint applied index (the raft index the state is as of)
//	uvarint cluster ID
//	uvarint length + pb.MemberListResponse (published members, by ID order)
//	uvarint lease clock, uvarint lease count, then per lease varint ID, TTL, Expiry
//	uvarint alarm count, then per alarm uvarint member ID, uvarint type
//	uvarint read-lease grant term, horizon in nanoseconds, cleared term
//	uvarint length + the auth state
//	uvarint incarnation (0: none yet)
//	the kv snapshot (the lease-to-keys index is rebuilt from it, never stored)
const snapshotMagic = "corenode-fsm\n"
const (
	snapshotV1 byte = 1
	snapshotV2 byte = 2
	snapshotV3 byte = 3
	snapshotV4 byte = 4
	// snapshotV5 adds the auth state after the read-lease record.
	snapshotV5 byte = 5
	// snapshotV6 adds the cluster's incarnation (uvarint) after the auth state.
	snapshotV6 byte = 6
)

type snapshot struct {
	applied     uint64
	clusterID   uint64
	members     []*pb.Member
	leaseClock  int64
	leases      []lease.Lease
	alarms      []*pb.AlarmMember
	readLeases  ReadLeaseState
	auth        []byte
	authErr     error
	incarnation uint64
	kv          *kv.Snapshot
}

// Snapshot implements raft.FSM. It copies only pointers to immutable data;
// the encoding happens in Persist, off the apply goroutine.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	s := f.capture()
	s.applied = f.Applied()
	return s, nil
}

// capture takes the replicated state between two commands: every command
// applies under lmu.
func (f *FSM) capture() *snapshot {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	f.mu.RLock()
	s := &snapshot{clusterID: f.clusterID}
	for _, m := range f.members {
		s.members = append(s.members, m)
	}
	s.alarms = f.Alarms()
	s.readLeases = f.readLeases
	s.incarnation = f.incarnation
	f.mu.RUnlock()
	s.auth, s.authErr = f.auth.Marshal()
	slices.SortFunc(s.members, func(a, b *pb.Member) int { return cmp.Compare(a.ID, b.ID) })
	s.leaseClock, s.leases = f.leases.Clock(), f.leases.Leases()
	s.kv = f.store.Snapshot()
	return s
}

// Hash checksums the whole replicated state (cluster ID, published
// members, the lease table, every key revision kept) as etcd's Hash
// checksums its whole backend, and returns the revision it was taken at.
// Members agree on it when they have applied the same entries. The raft
// index is left out: it advances per batch, not per command, so it could
// disagree with the state captured between two commands of one batch.
func (f *FSM) Hash() (uint32, int64, error) {
	s := f.capture()
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	if err := s.write(h); err != nil {
		return 0, 0, fmt.Errorf("fsm: hash state: %w", err)
	}
	return h.Sum32(), s.kv.Rev(), nil
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("fsm: persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *snapshot) write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	bw.WriteString(snapshotMagic)
	if s.authErr != nil {
		return fmt.Errorf("fsm: snapshot auth state: %w", s.authErr)
	}
	bw.WriteByte(snapshotV6)
	bw.Write(binary.AppendUvarint(nil, s.applied))
	bw.Write(binary.AppendUvarint(nil, s.clusterID))
	ml, err := (&pb.MemberListResponse{Members: s.members}).Marshal()
	if err != nil {
		return err
	}
	bw.Write(binary.AppendUvarint(nil, uint64(len(ml))))
	bw.Write(ml)
	bw.Write(binary.AppendUvarint(nil, uint64(s.leaseClock)))
	bw.Write(binary.AppendUvarint(nil, uint64(len(s.leases))))
	var buf []byte
	for _, l := range s.leases {
		buf = binary.AppendVarint(buf[:0], l.ID)
		buf = binary.AppendVarint(buf, l.TTL)
		buf = binary.AppendVarint(buf, l.Expiry)
		bw.Write(buf)
	}
	bw.Write(binary.AppendUvarint(nil, uint64(len(s.alarms))))
	for _, a := range s.alarms {
		buf = binary.AppendUvarint(buf[:0], a.MemberID)
		buf = binary.AppendUvarint(buf, uint64(a.Alarm))
		bw.Write(buf)
	}
	buf = binary.AppendUvarint(buf[:0], s.readLeases.GrantTerm)
	buf = binary.AppendUvarint(buf, uint64(s.readLeases.Horizon))
	buf = binary.AppendUvarint(buf, s.readLeases.Cleared)
	bw.Write(buf)
	bw.Write(binary.AppendUvarint(nil, uint64(len(s.auth))))
	bw.Write(s.auth)
	bw.Write(binary.AppendUvarint(nil, s.incarnation))
	if _, err := s.kv.WriteTo(bw); err != nil {
		return err
	}
	return bw.Flush()
}

func (s *snapshot) Release() {}

// Restore implements raft.FSM: it replaces all state with the snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 1<<20)
	magic := make([]byte, len(snapshotMagic)+1)
	if _, err := io.ReadFull(br, magic); err != nil {
		return fmt.Errorf("fsm: restore: read header: %w", err)
	}
	if string(magic[:len(snapshotMagic)]) != snapshotMagic {
		return errors.New("fsm: restore: not a corenode snapshot")
	}
	var applied uint64
	version := magic[len(snapshotMagic)]
	switch version {
	case snapshotV1:
	case snapshotV2, snapshotV3, snapshotV4, snapshotV5, snapshotV6:
		var err error
		if applied, err = binary.ReadUvarint(br); err != nil {
			return fmt.Errorf("fsm: restore: applied index: %w", err)
		}
	default:
		return fmt.Errorf("fsm: restore: %w: snapshot version %d", ErrUnknownFormat, version)
	}
	clusterID, err := binary.ReadUvarint(br)
	if err != nil {
		return fmt.Errorf("fsm: restore: cluster id: %w", err)
	}
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return fmt.Errorf("fsm: restore: members length: %w", err)
	}
	if n > 64<<20 {
		return fmt.Errorf("fsm: restore: members section of %d bytes is corrupt", n)
	}
	ml := make([]byte, n)
	if _, err := io.ReadFull(br, ml); err != nil {
		return fmt.Errorf("fsm: restore: members: %w", err)
	}
	var list pb.MemberListResponse
	if err := list.Unmarshal(ml); err != nil {
		return fmt.Errorf("fsm: restore: members: %w", err)
	}
	leaseClock, err := binary.ReadUvarint(br)
	if err != nil {
		return fmt.Errorf("fsm: restore: lease clock: %w", err)
	}
	count, err := binary.ReadUvarint(br)
	if err != nil {
		return fmt.Errorf("fsm: restore: lease count: %w", err)
	}
	var leases []lease.Lease
	for i := uint64(0); i < count; i++ {
		var l lease.Lease
		for _, p := range []*int64{&l.ID, &l.TTL, &l.Expiry} {
			if *p, err = binary.ReadVarint(br); err != nil {
				return fmt.Errorf("fsm: restore: lease %d of %d: %w", i, count, err)
			}
		}
		leases = append(leases, l)
	}
	var alarms []*pb.AlarmMember
	if version >= snapshotV3 {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return fmt.Errorf("fsm: restore: alarm count: %w", err)
		}
		for i := uint64(0); i < n; i++ {
			a := &pb.AlarmMember{}
			var t uint64
			if a.MemberID, err = binary.ReadUvarint(br); err == nil {
				t, err = binary.ReadUvarint(br)
			}
			if err != nil {
				return fmt.Errorf("fsm: restore: alarm %d of %d: %w", i, n, err)
			}
			a.Alarm = pb.AlarmType(t)
			alarms = append(alarms, a)
		}
	}
	var readLeases ReadLeaseState
	if version >= snapshotV4 {
		var v [3]uint64
		for i := range v {
			if v[i], err = binary.ReadUvarint(br); err != nil {
				return fmt.Errorf("fsm: restore: read-lease record: %w", err)
			}
		}
		if v[1] > math.MaxInt64 {
			return fmt.Errorf("fsm: restore: read-lease horizon %d out of range", v[1])
		}
		readLeases = ReadLeaseState{GrantTerm: v[0], Horizon: time.Duration(v[1]), Cleared: v[2]}
	}
	var authState []byte
	if version >= snapshotV5 {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return fmt.Errorf("fsm: restore: auth length: %w", err)
		}
		if n > 64<<20 {
			return fmt.Errorf("fsm: restore: auth section of %d bytes is corrupt", n)
		}
		authState = make([]byte, n)
		if _, err := io.ReadFull(br, authState); err != nil {
			return fmt.Errorf("fsm: restore: auth: %w", err)
		}
	}
	var incarnation uint64
	if version >= snapshotV6 {
		if incarnation, err = binary.ReadUvarint(br); err != nil {
			return fmt.Errorf("fsm: restore: incarnation: %w", err)
		}
	}
	f.lmu.Lock()
	defer f.lmu.Unlock()
	if err := f.store.Restore(br); err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	f.leases.Restore(int64(leaseClock), leases)
	if authState == nil {
		// A snapshot from before auth existed: auth off, no users.
		authState, _ = auth.New(auth.Config{}).Marshal()
	}
	if err := f.auth.Restore(authState); err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	members := make(map[uint64]*pb.Member, len(list.Members))
	for _, m := range list.Members {
		members[m.ID] = m
	}
	f.mu.Lock()
	f.clusterID = clusterID
	f.members = members
	f.alarms.Store(&alarms)
	f.readLeases = readLeases
	f.incarnation = incarnation
	f.mu.Unlock()
	f.tellIncarnation(incarnation)
	// A restore may move the index back (a reseeded snapshot starts a new
	// log at 1), so it is set, not advanced.
	f.amu.Lock()
	f.applied = applied
	close(f.appliedCh)
	f.appliedCh = make(chan struct{})
	f.amu.Unlock()
	f.log.Info("restored state from snapshot", "revision", f.store.Rev(), "members", len(members), "leases", len(leases))
	return nil
}

// SnapshotStats describes a snapshot's contents.
type SnapshotStats struct {
	Revision int64
	Keys     int
	Leases   int
}

// ReadSnapshot reads a corenode snapshot from src, checking that it
// decodes completely, and returns what a new cluster seeded from it keeps
// (see Contents and Seed).
func ReadSnapshot(src io.Reader, logger *slog.Logger) (Contents, error) {
	f := New(logger, nil, nil)
	if err := f.Restore(io.NopCloser(src)); err != nil {
		return Contents{}, err
	}
	return f.Contents(), nil
}
