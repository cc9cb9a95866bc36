package node

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/raft"
)

// MemberID derives a member's ID from its peer URLs and the cluster token, as
// etcd does, so a member started to join an existing cluster knows its own ID
// without asking anyone.
func MemberID(peerURLs []string, token string) uint64 {
	urls := slices.Clone(peerURLs)
	slices.Sort(urls)
	h := sha256.New()
	for _, u := range urls {
		h.Write([]byte(u))
		h.Write([]byte{0})
	}
	h.Write([]byte(token))
	id := binary.BigEndian.Uint64(h.Sum(nil)[:8])
	if id == 0 { // zero means "none" in the etcd API
		id = 1
	}
	return id
}

// ServerID is the raft server ID of a member ID.
func ServerID(id uint64) raft.ServerID { return raft.ServerID(strconv.FormatUint(id, 16)) }

// ParseServerID is the inverse of ServerID.
func ParseServerID(s raft.ServerID) (uint64, error) {
	return strconv.ParseUint(string(s), 16, 64)
}

// idKey is where a member keeps its ID in its stable store. The ID is the
// member's for good once it has joined: its peer URLs may change (etcdctl
// member update), and a member that joined a running cluster learned its
// ID from the cluster rather than derived it.
var idKey = []byte("CorenodeMemberID")

// settleID decides this member's ID and keeps it in stable: the one the
// data dir keeps, when it holds raft state; for a data dir that holds none
// and joins a running cluster, the one resolve learns from the cluster;
// else the one the configuration derived (a new cluster's member, or a
// data dir of a corenode that kept none). A data dir without raft state
// may keep an ID from a start that failed; the cluster or the
// configuration decides again.
func settleID(stable raft.StableStore, hasState bool, cfg Config) (uint64, error) {
	id := cfg.ID
	switch {
	case hasState:
		kept, err := stable.GetUint64(idKey)
		if err != nil && !isNotFound(err) {
			return 0, fmt.Errorf("read this member's ID: %w", err)
		}
		if kept != 0 {
			return kept, nil
		}
	case !cfg.Bootstrap && cfg.ResolveID != nil:
		var err error
		if id, err = cfg.ResolveID(); err != nil {
			return 0, err
		}
	}
	if err := stable.SetUint64(idKey, id); err != nil {
		return 0, fmt.Errorf("keep this member's ID: %w", err)
	}
	return id, nil
}

// isNotFound reports a stable store's "no such key" (raft-boltdb's
// ErrKeyNotFound; raft-wal answers zero instead).
func isNotFound(err error) bool { return err != nil && strings.Contains(err.Error(), "not found") }
