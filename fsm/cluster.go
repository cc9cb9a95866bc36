package fsm

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"slices"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// The cluster as the state machine records it: its ID, the members' published
// attributes, raft's configuration, and the alarms raised.

// ClusterID is derived from the cluster's first configuration entry, so every
// member computes the same value without coordination. Zero until applied.
func (f *FSM) ClusterID() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.clusterID
}

// Member returns the cluster's record of member id, or nil: the peer URLs
// and kind it was added with, the name and client URLs it published.
func (f *FSM) Member(id uint64) *pb.Member {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if m, ok := f.members[id]; ok {
		c := *m
		return &c
	}
	return nil
}

// publish records what a member says of itself: its name and client URLs.
// The peer URLs the cluster recorded when it added the member (or changed
// them since) stay, as etcd keeps them apart from the published attributes;
// a member that the cluster has no peer URLs for gives its own.
func (f *FSM) publish(m *pb.Member) *pb.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec := &pb.Member{ID: m.ID, Name: m.Name, ClientURLs: m.ClientURLs, PeerURLs: m.PeerURLs}
	if old, ok := f.members[m.ID]; ok {
		rec.IsLearner = old.IsLearner
		if len(old.PeerURLs) > 0 {
			rec.PeerURLs = old.PeerURLs
		}
	}
	f.members[m.ID] = rec
	return rec
}

// recordMember records a member as added, or its new peer URLs (OpMember);
// what it published about itself stays.
func (f *FSM) recordMember(m *pb.Member) *pb.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec := &pb.Member{ID: m.ID, PeerURLs: m.PeerURLs, IsLearner: m.IsLearner}
	if old, ok := f.members[m.ID]; ok {
		rec.Name, rec.ClientURLs = old.Name, old.ClientURLs
	}
	f.members[m.ID] = rec
	return rec
}

func (f *FSM) applyConfiguration(l *raft.Log) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.clusterID != 0 {
		return
	}
	cfg := raft.DecodeConfiguration(l.Data)
	ids := make([]string, 0, len(cfg.Servers))
	for _, s := range cfg.Servers {
		ids = append(ids, string(s.ID))
	}
	f.clusterID = ClusterIDOf(ids)
}

// ClusterIDOf derives a cluster ID from the member IDs of its first
// configuration, independent of their order.
func ClusterIDOf(serverIDs []string) uint64 {
	ids := slices.Clone(serverIDs)
	slices.Sort(ids)
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	return binary.BigEndian.Uint64(h.Sum(nil)[:8])
}

// applyAlarm raises or clears one alarm and answers the alarms it changed,
// as etcd's alarm store does.
func (f *FSM) applyAlarm(r *pb.AlarmRequest) *pb.AlarmResponse {
	resp := &pb.AlarmResponse{Header: &pb.ResponseHeader{Revision: f.store.Rev()}}
	a := &pb.AlarmMember{MemberID: r.MemberID, Alarm: r.Alarm}
	f.mu.Lock()
	defer f.mu.Unlock()
	alarms := f.Alarms()
	i, found := slices.BinarySearchFunc(alarms, a, compareAlarms)
	switch r.Action {
	case pb.AlarmRequest_ACTIVATE:
		if r.Alarm == pb.AlarmType_NONE {
			break
		}
		if !found {
			alarms = slices.Insert(slices.Clone(alarms), i, a)
			f.alarms.Store(&alarms)
		}
		resp.Alarms = []*pb.AlarmMember{a}
	case pb.AlarmRequest_DEACTIVATE:
		if found {
			alarms = slices.Delete(slices.Clone(alarms), i, i+1)
			f.alarms.Store(&alarms)
			resp.Alarms = []*pb.AlarmMember{a}
		}
	}
	return resp
}

func compareAlarms(a, b *pb.AlarmMember) int {
	if c := cmp.Compare(a.MemberID, b.MemberID); c != 0 {
		return c
	}
	return cmp.Compare(a.Alarm, b.Alarm)
}

// Alarms returns the raised alarms, ordered by member ID and type. The
// caller must not modify the slice or its elements.
func (f *FSM) Alarms() []*pb.AlarmMember {
	if p := f.alarms.Load(); p != nil {
		return *p
	}
	return nil
}

// HasAlarm reports whether a member has raised an alarm of type t; member 0
// means any member. It takes no lock, for the request path.
func (f *FSM) HasAlarm(member uint64, t pb.AlarmType) bool {
	for _, a := range f.Alarms() {
		if a.Alarm == t && (member == 0 || a.MemberID == member) {
			return true
		}
	}
	return false
}

// ForgetMembers drops the records and the alarms of every member that keep
// rejects, and returns the alarms it dropped. It is no command: only a
// member that forces a new cluster from its own data (node's
// --force-new-cluster) calls it, on state no other member shares, before
// that state becomes the snapshot every later member starts from. The
// dropped members are gone for good, so what they published and the alarms
// raised by or against them (a NOSPACE of theirs would refuse every write)
// would only outlive them.
func (f *FSM) ForgetMembers(keep func(id uint64) bool) []*pb.AlarmMember {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.members {
		if !keep(id) {
			delete(f.members, id)
		}
	}
	var kept, dropped []*pb.AlarmMember
	for _, a := range f.Alarms() {
		if keep(a.MemberID) {
			kept = append(kept, a)
		} else {
			dropped = append(dropped, a)
		}
	}
	if len(dropped) > 0 {
		f.alarms.Store(&kept)
	}
	return dropped
}
