package etcddb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Bucket and key names, as etcd's storage schema spells them.
var (
	bucketKey            = []byte("key")
	bucketMeta           = []byte("meta")
	bucketLease          = []byte("lease")
	bucketAlarm          = []byte("alarm")
	bucketCluster        = []byte("cluster")
	bucketMembers        = []byte("members")
	bucketMembersRemoved = []byte("members_removed")
	bucketAuth           = []byte("auth")
	bucketAuthUsers      = []byte("authUsers")
	bucketAuthRoles      = []byte("authRoles")

	metaConsistentIndex = []byte("consistent_index")
	metaTerm            = []byte("term")
	metaScheduled       = []byte("scheduledCompactRev")
	metaFinished        = []byte("finishedCompactRev")
	metaStorageVersion  = []byte("storageVersion")
	clusterVersion      = []byte("clusterVersion")
	authEnabled         = []byte("authEnabled")
	authRevision        = []byte("authRevision")
)

// version is the etcd release whose storage schema the written file
// declares (meta storageVersion, cluster clusterVersion): etcd 3.6 opens it
// as its own, etcd 3.7 upgrades it as it upgrades a 3.6 member's.
const version = "3.6.0"

// ErrNotEtcd marks a file that is not an etcd backend file.
var ErrNotEtcd = errors.New("not an etcd backend file")

// ErrCorrupt marks an etcd backend file whose content etcd could not have
// written.
var ErrCorrupt = errors.New("corrupt etcd backend file")

// The bbolt file begins with a page header (16 bytes) and its first meta
// page: magic 0xED0CDAED, then format version 2, in the writer's byte
// order.
const (
	boltMagic   = 0xED0CDAED
	boltVersion = 2
	headerLen   = 24
)

// IsBackend reports whether head, a file's first bytes (at least 24),
// begins as a bbolt database, the form of every etcd backend file.
func IsBackend(head []byte) bool {
	if len(head) < headerLen {
		return false
	}
	for _, o := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		if o.Uint32(head[16:]) == boltMagic && o.Uint32(head[20:]) == boltVersion {
			return true
		}
	}
	return false
}

// revLen is the length of a revision key, markedRevLen that of a deletion's.
const (
	revLen       = 8 + 1 + 8
	markedRevLen = revLen + 1
	tombstone    = 't'
)

func appendRev(b []byte, main, sub int64, tomb bool) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(main))
	b = append(b, '_')
	b = binary.BigEndian.AppendUint64(b, uint64(sub))
	if tomb {
		b = append(b, tombstone)
	}
	return b
}

// parseRev decodes a key bucket key or a compaction revision.
func parseRev(b []byte) (main, sub int64, tomb bool, err error) {
	if len(b) != revLen && len(b) != markedRevLen || b[8] != '_' || len(b) == markedRevLen && b[revLen] != tombstone {
		return 0, 0, false, fmt.Errorf("%w: revision key %x", ErrCorrupt, b)
	}
	main, sub = int64(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint64(b[9:]))
	if main < 0 || sub < 0 {
		return 0, 0, false, fmt.Errorf("%w: negative revision in key %x", ErrCorrupt, b)
	}
	return main, sub, len(b) == markedRevLen, nil
}

// leaseRecord is etcd's leasepb.Lease:
//
//	message Lease { int64 ID = 1; int64 TTL = 2; int64 RemainingTTL = 3; }
//
// RemainingTTL, in seconds, is set once etcd has checkpointed the lease;
// zero means the lease restarts with its whole TTL.
type leaseRecord struct {
	ID, TTL, RemainingTTL int64
}

func (l leaseRecord) marshal() []byte {
	var b []byte
	for i, v := range []int64{l.ID, l.TTL, l.RemainingTTL} {
		if v != 0 {
			b = protowire.AppendTag(b, protowire.Number(i+1), protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(v))
		}
	}
	return b
}

func (l *leaseRecord) unmarshal(b []byte) error {
	*l = leaseRecord{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.VarintType && num >= 1 && num <= 3 {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			switch num {
			case 1:
				l.ID = int64(v)
			case 2:
				l.TTL = int64(v)
			case 3:
				l.RemainingTTL = int64(v)
			}
			b = b[n:]
			continue
		}
		// A field a later etcd added: skipped, as protobuf does.
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil
}

func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// readBE64 decodes an 8-byte big-endian value; absent (nil) is zero.
func readBE64(what string, b []byte) (uint64, error) {
	if b == nil {
		return 0, nil
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: %s of %d bytes", ErrCorrupt, what, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

var authOn = []byte{1}

func authFlag(on bool) []byte {
	if on {
		return authOn
	}
	return []byte{0}
}

func isAuthOn(b []byte) bool { return bytes.Equal(b, authOn) }
