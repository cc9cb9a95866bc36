package etcddb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/kv"
)

// File is an etcd backend file that Export wrote, open for reading. It is
// not safe for concurrent use.
type File struct {
	file *os.File
	size int64
}

// Size is the file's length in bytes.
func (f *File) Size() int64 { return f.size }

// WriteTo writes the whole file to w.
func (f *File) WriteTo(w io.Writer) (int64, error) {
	return io.Copy(w, io.NewSectionReader(f.file, 0, f.size))
}

// Close releases the file; its space comes back to the disk.
func (f *File) Close() error { return f.file.Close() }

// batch is how many revisions go into one bbolt transaction: a transaction
// holds its changed pages in memory until it commits.
const batch = 100_000

// Export writes c as an etcd backend file in dir, the state of an etcd 3.6
// member at raft entry c.Applied of term term, and returns it open for
// reading. Its name is removed from dir as soon as it is open, so nothing
// stays behind whatever happens to the process. It stops early with ctx's
// error.
//
// Leases keep their TTL, and a lease corenode had checkpointed carries its
// remaining TTL as etcd's checkpoint does, which etcd's lessor resumes
// from; alarms and members are the writing cluster's and are left out, as
// `etcdutl snapshot restore` drops the members of the cluster it restores.
func Export(ctx context.Context, dir string, c fsm.Contents, term uint64) (_ *File, err error) {
	tmp, err := os.CreateTemp(dir, "etcd-export-*.db")
	if err != nil {
		return nil, fmt.Errorf("etcddb: export: %w", err)
	}
	path := tmp.Name()
	// A second descriptor of the same file outlives its name: bbolt reopens
	// by path, so the name goes once bbolt has it open.
	defer func() {
		if err != nil {
			tmp.Close()
		}
	}()
	// Nothing needs the file after a crash, so bbolt skips its fsyncs. Its
	// map starts at the size the file will about reach: bbolt remaps as
	// the file grows, and each remap copies every page in use.
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoGrowSync: true, Timeout: time.Second,
		InitialMmapSize: estimate(c.KV)})
	os.Remove(path)
	if err != nil {
		return nil, fmt.Errorf("etcddb: export: open %s: %w", path, err)
	}
	if err := write(ctx, db, c, term); err != nil {
		db.Close()
		return nil, fmt.Errorf("etcddb: export: %w", err)
	}
	var size int64
	err = db.View(func(tx *bolt.Tx) error {
		// The pages up to the high-water mark are the database: what
		// bbolt's Tx.WriteTo copies, and a file etcd opens as it is.
		size = tx.Size()
		return nil
	})
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("etcddb: export: %w", err)
	}
	return &File{file: tmp, size: size}, nil
}

func write(ctx context.Context, db *bolt.DB, c fsm.Contents, term uint64) error {
	err := db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketKey, bucketMeta, bucketLease, bucketAlarm, bucketCluster,
			bucketMembers, bucketMembersRemoved, bucketAuth, bucketAuthUsers, bucketAuthRoles} {
			if _, err := tx.CreateBucket(name); err != nil {
				return fmt.Errorf("bucket %s: %w", name, err)
			}
		}
		var puts []error
		put := func(bucket, k, v []byte) { puts = append(puts, tx.Bucket(bucket).Put(k, v)) }

		put(bucketMeta, metaConsistentIndex, be64(c.Applied))
		put(bucketMeta, metaTerm, be64(term))
		put(bucketMeta, metaStorageVersion, []byte(version))
		if cr := c.KV.CompactRev(); cr > 0 {
			// Scheduled and finished alike: the compaction is done.
			put(bucketMeta, metaScheduled, appendRev(nil, cr, 0, false))
			put(bucketMeta, metaFinished, appendRev(nil, cr, 0, false))
		}
		put(bucketCluster, clusterVersion, []byte(version))

		for _, l := range c.Leases {
			r := leaseRecord{ID: l.ID, TTL: l.TTL}
			if l.Expiry != 0 {
				// Seconds left as of the last checkpoint, rounded up as
				// etcd's checkpoints round; one at least, since zero would
				// mean the whole TTL.
				r.RemainingTTL = max((l.Expiry-c.LeaseClock+999)/1000, 1)
			}
			put(bucketLease, be64(uint64(l.ID)), r.marshal())
		}

		put(bucketAuth, authEnabled, authFlag(c.Auth.Enabled))
		put(bucketAuth, authRevision, be64(c.Auth.Revision))
		for _, u := range c.Auth.Users {
			v, err := u.Marshal()
			if err != nil {
				return fmt.Errorf("user %q: %w", u.Name, err)
			}
			put(bucketAuthUsers, u.Name, v)
		}
		for _, r := range c.Auth.Roles {
			v, err := r.Marshal()
			if err != nil {
				return fmt.Errorf("role %q: %w", r.Name, err)
			}
			put(bucketAuthRoles, r.Name, v)
		}
		return errors.Join(puts...)
	})
	if err != nil {
		return err
	}
	return writeKeys(ctx, db, c.KV)
}

// estimate is about the size of c's key bucket in bytes: each revision's
// key, value and the rest of its KeyValue, its revision key, bbolt's
// element header, and pages filled to about nine tenths.
func estimate(sn *kv.Snapshot) int {
	n := 1 << 20
	for r := range sn.Records() {
		n += len(r.KV.Key) + len(r.KV.Value) + 64
	}
	return n + n/8
}

// writeKeys fills the key bucket, a batch of revisions per transaction.
func writeKeys(ctx context.Context, db *bolt.DB, sn *kv.Snapshot) error {
	next, stop := iter.Pull(sn.Records())
	defer stop()
	for done := false; !done; {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketKey)
			// Revisions only ever go at the end: full pages, as etcd's
			// own sequential writes leave them nearly.
			b.FillPercent = 1
			for range batch {
				r, ok := next()
				if !ok {
					done = true
					return nil
				}
				kv := &r.KV
				if r.Tombstone {
					// etcd writes only the key of a deletion.
					kv = &mvccpb.KeyValue{Key: r.KV.Key}
				}
				// bbolt keeps both slices until the transaction commits.
				val, err := kv.Marshal()
				if err == nil {
					err = b.Put(appendRev(make([]byte, 0, markedRevLen), r.KV.ModRevision, r.Sub, r.Tombstone), val)
				}
				if err != nil {
					return fmt.Errorf("revision %d: %w", r.KV.ModRevision, err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
