package node

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strconv"

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
