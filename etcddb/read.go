package etcddb

import (
	"cmp"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/kv"
	"github.com/corenode/corenode/lease"
)

// Info describes an etcd backend file beyond the state it holds.
type Info struct {
	// StorageVersion is the storage schema the file declares, "3.6.0" from
	// etcd 3.6 on; empty for etcd 3.4 and 3.5.
	StorageVersion string
	// ConsistentIndex and Term name the writing cluster's raft entry the
	// state is as of.
	ConsistentIndex, Term uint64
}

// Read returns the state held in the etcd backend file at path: a snapshot
// that etcd's Snapshot RPC streamed (its SHA-256 may still follow the
// database: bbolt ignores it; check it first) or a member's member/snap/db.
// The file is opened read-only and left as it was.
//
// The state is etcd's as its members restore it: every revision the key
// bucket holds, the current revision the newest of them or of a
// compaction, a compaction etcd had scheduled but not finished carried out
// now, and leases that restart with their remaining TTL if etcd
// checkpointed one, else their whole TTL.
func Read(path string) (c fsm.Contents, info Info, err error) {
	f, err := os.Open(path)
	if err != nil {
		return c, info, fmt.Errorf("etcddb: %w", err)
	}
	head := make([]byte, headerLen)
	_, err = f.ReadAt(head, 0)
	fi, serr := f.Stat()
	f.Close()
	if err != nil || !IsBackend(head) {
		return c, info, fmt.Errorf("etcddb: %s: %w (no bbolt header)", path, ErrNotEtcd)
	}
	if serr != nil {
		return c, info, fmt.Errorf("etcddb: %w", serr)
	}
	// bbolt panics on some damaged pages, and a file cut short faults
	// when a page past its end is read; see check.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("etcddb: %s: %w: %v", path, ErrCorrupt, r)
		}
	}()
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return c, info, fmt.Errorf("etcddb: open %s: %w", path, err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		if err := check(tx, fi.Size()); err != nil {
			return err
		}
		var err error
		c, info, err = read(tx)
		return err
	})
	if err != nil {
		return fsm.Contents{}, Info{}, fmt.Errorf("etcddb: %s: %w", path, err)
	}
	return c, info, nil
}

// check makes sure every page the database names is in the file: a read
// past the end of a file cut short faults. It checks no more. Whether the
// pages hold what etcd wrote is the SHA-256's to tell: bbolt cannot be
// relied on for that (1.3's and 1.4's consistency checks go round in
// circles on a zeroed branch page, as do its cursors), nor can etcd,
// which opens what `etcdutl snapshot restore --skip-hash-check` copied as
// it is.
func check(tx *bolt.Tx, fileSize int64) error {
	if tx.Size() > fileSize {
		return fmt.Errorf("%w: its pages reach byte %d, but the file ends at %d: cut short", ErrCorrupt, tx.Size(), fileSize)
	}
	return nil
}

func read(tx *bolt.Tx) (c fsm.Contents, info Info, err error) {
	keys, meta := tx.Bucket(bucketKey), tx.Bucket(bucketMeta)
	if keys == nil || meta == nil {
		return c, info, fmt.Errorf("%w: no %q or %q bucket (a bbolt file, but not etcd's)", ErrNotEtcd, bucketKey, bucketMeta)
	}
	if info.ConsistentIndex, err = readBE64("consistent index", meta.Get(metaConsistentIndex)); err != nil {
		return c, info, err
	}
	if info.Term, err = readBE64("term", meta.Get(metaTerm)); err != nil {
		return c, info, err
	}
	info.StorageVersion = string(meta.Get(metaStorageVersion))
	var compact [2]int64 // finished, scheduled
	for i, name := range [][]byte{metaFinished, metaScheduled} {
		if b := meta.Get(name); b != nil {
			if compact[i], _, _, err = parseRev(b); err != nil {
				return c, info, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	finished, scheduled := compact[0], compact[1]

	recs, last, err := readKeys(keys)
	if err != nil {
		return c, info, err
	}
	// etcd's rule on restart: a compaction may have removed the newest
	// revisions (deletions), so the current revision is at least the
	// compaction's.
	rev := max(1, last, finished, scheduled)
	sn, err := kv.NewSnapshot(rev, finished, recs)
	if err != nil {
		return c, info, err
	}
	if scheduled > finished {
		// etcd resumes a compaction its member had not finished when the
		// file was written; so does this, with corenode's own.
		s := kv.NewStore(kv.Options{})
		s.Load(sn)
		if _, err := s.Compact(scheduled); err != nil {
			return c, info, fmt.Errorf("%w: scheduled compaction at %d of revision %d: %v", ErrCorrupt, scheduled, rev, err)
		}
		sn = s.Snapshot()
	}
	c.KV = sn
	if c.Leases, err = readLeases(tx.Bucket(bucketLease)); err != nil {
		return c, info, err
	}
	if c.Auth, err = readAuth(tx); err != nil {
		return c, info, err
	}
	return c, info, nil
}

// readKeys reads the key bucket in revision order, and the newest revision
// it names.
func readKeys(b *bolt.Bucket) ([]kv.Record, int64, error) {
	// Counting first walks the bucket's pages, not its values: far less
	// than growing a slice of a million records as they come.
	recs := make([]kv.Record, 0, b.Stats().KeyN)
	var last int64
	cur := b.Cursor()
	for k, v := cur.First(); k != nil; k, v = cur.Next() {
		main, sub, tomb, err := parseRev(k)
		if err != nil {
			return nil, 0, err
		}
		last = max(last, main)
		if len(v) == 0 {
			// `etcdutl snapshot restore --bump-revision` marks the bumped
			// revision with an empty value: a revision, but no change.
			continue
		}
		r := kv.Record{Sub: sub, Tombstone: tomb}
		if err := r.KV.Unmarshal(v); err != nil {
			return nil, 0, fmt.Errorf("%w: key bucket value at revision %d: %v", ErrCorrupt, main, err)
		}
		if tomb {
			// etcd writes only the key of a deletion.
			r.KV = mvccpb.KeyValue{Key: r.KV.Key, ModRevision: main}
		} else if r.KV.ModRevision != main {
			return nil, 0, fmt.Errorf("%w: key %q under revision %d says it was modified at %d", ErrCorrupt, r.KV.Key, main, r.KV.ModRevision)
		}
		recs = append(recs, r)
	}
	return recs, last, nil
}

// readLeases reads the lease bucket. A lease etcd checkpointed restarts
// with the remaining TTL it recorded, as etcd's lessor restarts it; the
// others with their TTL.
func readLeases(b *bolt.Bucket) ([]lease.Lease, error) {
	var out []lease.Lease
	if b == nil {
		return nil, nil
	}
	err := b.ForEach(func(k, v []byte) error {
		var l leaseRecord
		if err := l.unmarshal(v); err != nil {
			return fmt.Errorf("%w: lease %x: %v", ErrCorrupt, k, err)
		}
		if id, err := readBE64("lease ID", k); err != nil || int64(id) != l.ID || l.ID == 0 || l.TTL < 1 || l.RemainingTTL < 0 {
			return fmt.Errorf("%w: lease %x: %+v", ErrCorrupt, k, l)
		}
		// Expiry is on the restored lease clock, which starts at zero.
		out = append(out, lease.Lease{ID: l.ID, TTL: l.TTL, Expiry: l.RemainingTTL * 1000})
		return nil
	})
	slices.SortFunc(out, func(a, b lease.Lease) int { return cmp.Compare(a.ID, b.ID) })
	return out, err
}

// readAuth reads the auth buckets; an etcd that never used auth may lack
// them.
func readAuth(tx *bolt.Tx) (auth.State, error) {
	st := auth.State{Revision: 1}
	if b := tx.Bucket(bucketAuth); b != nil {
		st.Enabled = isAuthOn(b.Get(authEnabled))
		rev, err := readBE64("auth revision", b.Get(authRevision))
		if err != nil {
			return st, err
		}
		st.Revision = max(rev, 1)
	}
	var err error
	if st.Users, err = readNamed(tx.Bucket(bucketAuthUsers), "user", func(u *authpb.User) []byte { return u.Name }); err != nil {
		return st, err
	}
	st.Roles, err = readNamed(tx.Bucket(bucketAuthRoles), "role", func(r *authpb.Role) []byte { return r.Name })
	return st, err
}

// readNamed reads a bucket of messages kept under their names, as etcd
// keeps users and roles.
func readNamed[M any, PM interface {
	*M
	Unmarshal([]byte) error
}](b *bolt.Bucket, what string, name func(PM) []byte) ([]PM, error) {
	if b == nil {
		return nil, nil
	}
	var out []PM
	err := b.ForEach(func(k, v []byte) error {
		m := PM(new(M))
		if err := m.Unmarshal(v); err != nil {
			return fmt.Errorf("%w: %s %q: %v", ErrCorrupt, what, k, err)
		}
		if n := name(m); string(n) != string(k) {
			return fmt.Errorf("%w: %s under %q is named %q", ErrCorrupt, what, k, n)
		}
		out = append(out, m)
		return nil
	})
	return out, err
}
