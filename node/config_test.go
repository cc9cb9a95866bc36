package node

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestCandidateRetriesAfterHeartbeatTimeout: after the leader dies, a
// follower notices within two heartbeat timeouts of its last contact, and a
// candidate whose pre-vote was refused (the others had not noticed yet)
// tries again after raft's ElectionTimeout to twice that. Waiting the etcd
// election timeout there made the worst failover three election timeouts;
// it must stay within two.
func TestCandidateRetriesAfterHeartbeatTimeout(t *testing.T) {
	for _, c := range []struct{ heartbeat, election time.Duration }{
		{100 * time.Millisecond, time.Second}, // bench-vs-etcd, etcd's defaults
		{50 * time.Millisecond, 300 * time.Millisecond},
		{10 * time.Millisecond, 5 * time.Second},
	} {
		rc := raftConfig(Config{ID: 1, HeartbeatInterval: c.heartbeat, ElectionTimeout: c.election,
			CommitNotify: 50 * time.Millisecond, SnapshotCount: 10000, SnapshotInterval: 30 * time.Second}, nil)
		if err := raft.ValidateConfig(rc); err != nil {
			t.Fatalf("heartbeat %v, election %v: %v", c.heartbeat, c.election, err)
		}
		worst := 2*rc.HeartbeatTimeout + 2*rc.ElectionTimeout
		if worst > 2*c.election {
			t.Errorf("heartbeat %v, election %v: worst failover %v (heartbeat timeout %v, candidate wait %v), want at most %v",
				c.heartbeat, c.election, worst, rc.HeartbeatTimeout, rc.ElectionTimeout, 2*c.election)
		}
	}
}

// TestSnapshotCatchUpEntriesDefault: the entries kept behind a snapshot
// are etcd's 5000 by default, the snapshot interval when that is shorter,
// and what the config says when it says.
func TestSnapshotCatchUpEntriesDefault(t *testing.T) {
	for _, c := range []struct{ count, catchUp, want uint64 }{
		{0, 0, DefaultSnapshotCatchUpEntries},
		{10000, 0, 5000},
		{4, 0, 4},
		{10000, 7, 7},
		{4, 100, 100},
	} {
		cfg := Config{SnapshotCount: c.count, SnapshotCatchUpEntries: c.catchUp}.withDefaults()
		if got := raftConfig(cfg, nil).TrailingLogs; got != c.want {
			t.Errorf("snapshot count %d, catch-up entries %d: raft keeps %d entries behind a snapshot, want %d", c.count, c.catchUp, got, c.want)
		}
	}
}
