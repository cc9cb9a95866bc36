package node

import (
	"log/slog"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// raftConfig is hashicorp/raft's configuration for a member with cfg;
// notify receives raft's leadership changes.
func raftConfig(cfg Config, notify chan bool) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = ServerID(cfg.ID)
	// etcd users think in heartbeat interval and election timeout.
	// hashicorp/raft heartbeats every HeartbeatTimeout/10 to 2/10, and a
	// follower that hears nothing for HeartbeatTimeout to twice that starts
	// an election; so HeartbeatTimeout is ten heartbeat intervals, capped at
	// half the election timeout, which puts failure detection where etcd's
	// is (about one election timeout) rather than up to twice as late. A
	// leader that hears from no quorum for LeaderLeaseTimeout steps down;
	// raft requires it to be at most HeartbeatTimeout.
	//
	// raft's ElectionTimeout is how long a candidate waits (that to twice
	// that, at random) before it tries again, and a try often fails right
	// after a leader dies: the first follower to notice asks the others for
	// a pre-vote while they still have a leader, and they refuse. With the
	// etcd election timeout there, that wait put failover past 2 s in about
	// one run in eight (bench-vs-etcd failover). With HeartbeatTimeout
	// there, the next try comes at least two heartbeat timeouts after the
	// candidate last heard the leader, by when every follower has noticed.
	rc.HeartbeatTimeout = min(10*cfg.HeartbeatInterval, cfg.ElectionTimeout/2)
	rc.ElectionTimeout = rc.HeartbeatTimeout
	rc.LeaderLeaseTimeout = rc.HeartbeatTimeout
	rc.CommitTimeout = cfg.CommitNotify
	rc.SnapshotThreshold = cfg.SnapshotCount
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.SnapshotCatchUpEntries
	rc.MaxAppendEntries = 512
	rc.BatchApplyCh = true
	rc.NotifyCh = notify
	rc.Logger = raftLogger(cfg, "raft")
	return rc
}

// raftLogger is where hashicorp's libraries (raft, raft-wal) write their
// warnings: cfg.RaftLog in hclog's format when it is set (tests), or else
// the member's logger, so a member writes one format.
func raftLogger(cfg Config, name string) hclog.Logger {
	if cfg.RaftLog != nil {
		return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: cfg.RaftLog})
	}
	l := cfg.Logger
	if l == nil {
		l = slog.Default()
	}
	return newSlogHCLog(l, name)
}
