package logstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// errBoltDamaged is a bolt file (raft.db, or raft-wal's wal-meta.db) whose
// structure checkBolt refused.
var errBoltDamaged = errors.New("damaged bolt file")

// boltDamage is what checkBolt found wrong with a bolt file; its message
// starts with the file's name as the data dir holds it ("raft.db: ..."), so
// the one line a member stops with says which file to blame.
type boltDamage struct {
	name, what string
}

func (e *boltDamage) Error() string { return e.name + ": " + e.what }
func (e *boltDamage) Is(target error) bool {
	return target == errBoltDamaged
}

// checkBolt reads the bolt database at path page by page and refuses it,
// with an errBoltDamaged that says what it found, unless every page bbolt
// can reach from the meta page it would pick is inside the file and well
// formed: a branch or leaf page (the freelist page a freelist), elements,
// keys and values inside their page, keys in order, every page used once,
// free pages not in use. name is the file as messages call it.
//
// bbolt trusts its pages: it reads them through an unchecked mmap, so a
// damaged page makes it panic (an invalid page type, a page id above the
// high-water mark), and a page past the end of a truncated file makes the
// process die of SIGBUS. Worse, two of those panics are raised on goroutines
// bbolt starts, where no recover can reach them: opening a file whose
// freelist is not synced (raft.db, NoFreelistSync) walks every page with
// Tx.check's page walk and panics on its error channel's reader goroutine
// (db.freepages), and Tx.Check itself runs on a goroutine of its own and
// panics there on a page it cannot read. So neither recover around the open
// nor bbolt's own consistency check can stop a damaged file from killing
// the member with a stack trace; this check runs first, reads the file with
// ReadAt into Go slices (bounds-checked, and a read error is an error, not
// a fault), and answers what bbolt would trip over as an error.
//
// An empty file is damage too: bbolt would initialize it as a new database
// and the member would start with no log, no term and no vote. The stores
// are created whole or not at all (createBolt, raft-wal's own init), so an
// empty file was never a store in the making.
//
// The cost is one read of every page in use; bbolt's open of raft.db walks
// the same pages to rebuild its freelist, and openStore then reads every
// entry (BenchmarkCheckBolt, on a raft.db of 100,000 entries, 79 MiB, in
// the page cache: about 70 ms, of the 370 ms the whole open takes; bbolt's
// own Tx.Check takes about 85).
//
// Concurrency: the caller holds the store's lock (checkBoltLocked; the
// wal's last-index flock), so no member writes the file while it is read.
func checkBolt(path, name string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	c := boltChecker{f: f, name: name, size: fi.Size()}
	return c.check()
}

// The bolt file format, as bbolt 1.3.6 writes it (page.go, db.go, bucket.go;
// integers in the host's byte order, as bbolt casts them in place).
const (
	boltMagic          = 0xED0CDAED
	boltVersion        = 2
	boltPageHeader     = 16 // id u64, flags u16, count u16, overflow u32
	boltElemSize       = 16 // branch: pos, ksize u32, pgid u64; leaf: flags, pos, ksize, vsize u32
	boltMetaSize       = 64 // magic, version, pageSize, flags u32; root, sequence, freelist, pgid, txid, checksum u64
	boltMetaSumOff     = 56 // the checksum covers the meta before it
	boltBucketHeader   = 16 // root pgid u64, sequence u64
	boltBranchPage     = 0x01
	boltLeafPage       = 0x02
	boltFreelistPage   = 0x10
	boltBucketLeafFlag = 0x01
	boltNoFreelist     = ^uint64(0)
	// boltMaxDepth bounds the walk: a tree of 4 KiB pages holding 2^64
	// keys is about 16 levels deep, nested buckets add their own.
	boltMaxDepth = 64
)

var boltEndian = binary.NativeEndian

// boltMeta is the part of a meta page the walk needs.
type boltMeta struct {
	pageSize uint32
	root     uint64 // the root bucket's page
	freelist uint64
	pgid     uint64 // the high-water mark: pages 0..pgid-1 exist
	txid     uint64
}

// parseBoltMeta decodes the meta at b (page header skipped) and validates
// it as bbolt does (meta.validate: magic, version, and the checksum unless
// it is zero).
func parseBoltMeta(b []byte) (boltMeta, error) {
	m := boltMeta{pageSize: boltEndian.Uint32(b[8:]), root: boltEndian.Uint64(b[16:]), freelist: boltEndian.Uint64(b[32:]),
		pgid: boltEndian.Uint64(b[40:]), txid: boltEndian.Uint64(b[48:])}
	switch {
	case boltEndian.Uint32(b[0:]) != boltMagic:
		return m, errors.New("not a bolt meta page (bad magic)")
	case boltEndian.Uint32(b[4:]) != boltVersion:
		return m, fmt.Errorf("bolt version %d, want %d", boltEndian.Uint32(b[4:]), boltVersion)
	}
	if sum := boltEndian.Uint64(b[boltMetaSumOff:]); sum != 0 {
		h := fnv.New64a()
		h.Write(b[:boltMetaSumOff])
		if h.Sum64() != sum {
			return m, errors.New("meta page checksum mismatch")
		}
	}
	return m, nil
}

type boltChecker struct {
	f        *os.File
	name     string
	size     int64
	pageSize int64
	meta     boltMeta
	used     map[uint64]uint64 // page -> the page it belongs to (overflow pages: their first)
}

func (c *boltChecker) damaged(format string, args ...any) error {
	return &boltDamage{name: c.name, what: fmt.Sprintf(format, args...)}
}

func (c *boltChecker) check() error {
	if c.size == 0 {
		return c.damaged("empty (0 bytes)")
	}
	// bbolt takes its page size from meta 0 when that is valid, else it
	// assumes the OS page size (DB.Open).
	var first [0x1000]byte
	if n, err := c.f.ReadAt(first[:], 0); n < len(first) {
		if err == io.EOF {
			return c.damaged("truncated: %d bytes", c.size)
		}
		return fmt.Errorf("%s: %w", c.name, err)
	}
	c.pageSize = int64(os.Getpagesize())
	if m, err := parseBoltMeta(first[boltPageHeader:]); err == nil {
		c.pageSize = int64(m.pageSize)
	}
	if c.pageSize < 1024 || c.pageSize > 1<<20 || c.pageSize&(c.pageSize-1) != 0 {
		return c.damaged("page size %d", c.pageSize)
	}
	if c.size < 2*c.pageSize {
		return c.damaged("truncated: %d bytes, less than its two meta pages", c.size)
	}
	var metas [2]boltMeta
	var errs [2]error
	for i := range metas {
		b := make([]byte, boltPageHeader+boltMetaSize)
		if _, err := c.f.ReadAt(b, int64(i)*c.pageSize); err != nil {
			return fmt.Errorf("%s: read meta page %d: %w", c.name, i, err)
		}
		metas[i], errs[i] = parseBoltMeta(b[boltPageHeader:])
	}
	if errs[0] != nil && errs[1] != nil {
		return c.damaged("both meta pages are damaged: %v; %v", errs[0], errs[1])
	}
	// As DB.meta: the newer transaction's meta, unless it is invalid.
	a, b := 0, 1
	if metas[1].txid > metas[0].txid {
		a, b = 1, 0
	}
	if errs[a] != nil {
		a = b
	}
	c.meta = metas[a]
	if int64(c.meta.pageSize) != c.pageSize {
		return c.damaged("meta page %d says pages are %d bytes, meta page 0 %d", a, c.meta.pageSize, c.pageSize)
	}
	if c.meta.pgid < 2 || c.meta.pgid > uint64(1<<62)/uint64(c.pageSize) {
		return c.damaged("meta page %d: high-water mark %d", a, c.meta.pgid)
	}
	// bbolt grows the file before it commits pages past its end, so a
	// whole file holds every page below the high-water mark.
	if end := int64(c.meta.pgid) * c.pageSize; c.size < end {
		return c.damaged("truncated: %d bytes, but its pages run to %d", c.size, end)
	}

	c.used = map[uint64]uint64{0: 0, 1: 1}
	if err := c.node(c.meta.root, uint64(a), nil, 0); err != nil {
		return err
	}
	if c.meta.freelist != boltNoFreelist {
		return c.freelist()
	}
	return nil
}

// read returns page id, referenced by page from (a meta page: 0 or 1),
// with its overflow pages, after checking that they are below the
// high-water mark, unused so far, and hold id's header.
func (c *boltChecker) read(id, from uint64) ([]byte, error) {
	ref := fmt.Sprintf("page %d", from)
	if from < 2 {
		ref = "the meta page"
	}
	if id < 2 || id >= c.meta.pgid {
		return nil, c.damaged("page %d (referenced by %s): outside the file's pages 2..%d", id, ref, c.meta.pgid-1)
	}
	p := make([]byte, c.pageSize)
	if _, err := c.f.ReadAt(p, int64(id)*c.pageSize); err != nil {
		return nil, fmt.Errorf("%s: read page %d: %w", c.name, id, err)
	}
	if got := boltEndian.Uint64(p); got != id {
		return nil, c.damaged("page %d (referenced by %s): its header says it is page %d", id, ref, got)
	}
	overflow := uint64(boltEndian.Uint32(p[12:]))
	if overflow >= c.meta.pgid-id {
		return nil, c.damaged("page %d: %d overflow pages run past the file's last page %d", id, overflow, c.meta.pgid-1)
	}
	for i := id; i <= id+overflow; i++ {
		if owner, ok := c.used[i]; ok {
			return nil, c.damaged("page %d (referenced by %s) is also part of page %d", i, ref, owner)
		}
		c.used[i] = id
	}
	if overflow > 0 {
		p = append(p, make([]byte, overflow*uint64(c.pageSize))...)
		if _, err := c.f.ReadAt(p[c.pageSize:], int64(id+1)*c.pageSize); err != nil {
			return nil, fmt.Errorf("%s: read page %d: %w", c.name, id, err)
		}
	}
	return p, nil
}

// node checks the tree of bucket pages at id, reached from page from, and
// every bucket below it, depth levels below the root bucket; inline is an
// inline bucket's page (id 0), which lives in its parent's value.
func (c *boltChecker) node(id, from uint64, inline []byte, depth int) error {
	if depth > boltMaxDepth {
		return c.damaged("page %d: more than %d levels of pages and buckets", id, boltMaxDepth)
	}
	p := inline
	where := fmt.Sprintf("page %d", id)
	if inline == nil {
		var err error
		if p, err = c.read(id, from); err != nil {
			return err
		}
	} else {
		where = fmt.Sprintf("the inline bucket in page %d", from)
		if len(p) < boltPageHeader {
			return c.damaged("%s: %d bytes, shorter than a page header", where, len(p))
		}
	}
	flags, count := boltEndian.Uint16(p[8:]), int(boltEndian.Uint16(p[10:]))
	if flags != boltBranchPage && flags != boltLeafPage || inline != nil && flags != boltLeafPage {
		return c.damaged("%s: invalid page type %#x", where, flags)
	}
	if flags == boltBranchPage && count == 0 {
		return c.damaged("%s: a branch page with no elements", where)
	}
	if boltPageHeader+count*boltElemSize > len(p) {
		return c.damaged("%s: %d elements do not fit in its %d bytes", where, count, len(p))
	}
	var prev []byte
	for i := range count {
		at := boltPageHeader + i*boltElemSize
		e := p[at : at+boltElemSize]
		var pos, ksize, vsize uint64
		if flags == boltBranchPage {
			pos, ksize = uint64(boltEndian.Uint32(e[0:])), uint64(boltEndian.Uint32(e[4:]))
		} else {
			pos, ksize, vsize = uint64(boltEndian.Uint32(e[4:])), uint64(boltEndian.Uint32(e[8:])), uint64(boltEndian.Uint32(e[12:]))
		}
		start := uint64(at) + pos
		if start+ksize+vsize > uint64(len(p)) {
			return c.damaged("%s: element %d (%d bytes at %d) runs past the page's %d bytes", where, i, ksize+vsize, start, len(p))
		}
		key, value := p[start:start+ksize], p[start+ksize:start+ksize+vsize]
		if i > 0 && bytes.Compare(prev, key) >= 0 {
			return c.damaged("%s: keys out of order at element %d", where, i)
		}
		prev = key
		if flags == boltBranchPage {
			if err := c.node(boltEndian.Uint64(e[8:]), id, nil, depth+1); err != nil {
				return err
			}
			continue
		}
		switch boltEndian.Uint32(e[0:]) {
		case 0:
		case boltBucketLeafFlag:
			if len(value) < boltBucketHeader {
				return c.damaged("%s: bucket %q: %d-byte header", where, key, len(value))
			}
			if root := boltEndian.Uint64(value); root != 0 {
				err := c.node(root, id, nil, depth+1)
				if err != nil {
					return err
				}
			} else if err := c.node(0, id, value[boltBucketHeader:], depth+1); err != nil {
				return err
			}
		default:
			return c.damaged("%s: element %d has unknown flags %#x", where, i, boltEndian.Uint32(e[0:]))
		}
	}
	return nil
}

// freelist checks the freelist page (a file whose freelist is synced, as
// raft-wal's meta database): every free page below the high-water mark,
// free once, and none in use.
func (c *boltChecker) freelist() error {
	id := c.meta.freelist
	p, err := c.read(id, 0)
	if err != nil {
		return err
	}
	if flags := boltEndian.Uint16(p[8:]); flags != boltFreelistPage {
		return c.damaged("freelist page %d: invalid page type %#x", id, flags)
	}
	ids := p[boltPageHeader:]
	count := uint64(boltEndian.Uint16(p[10:]))
	if count == 0xFFFF { // the count is too large for the header; the first id holds it
		count, ids = boltEndian.Uint64(ids), ids[8:]
	}
	if count > uint64(len(ids))/8 {
		return c.damaged("freelist page %d: %d free pages do not fit in it", id, count)
	}
	free := make(map[uint64]bool, count)
	for i := range count {
		f := boltEndian.Uint64(ids[i*8:])
		switch {
		case f < 2 || f >= c.meta.pgid:
			return c.damaged("freelist page %d: free page %d outside the file's pages 2..%d", id, f, c.meta.pgid-1)
		case free[f]:
			return c.damaged("freelist page %d: page %d is free twice", id, f)
		}
		if owner, ok := c.used[f]; ok {
			return c.damaged("freelist page %d: page %d is free but part of page %d", id, f, owner)
		}
		free[f] = true
	}
	return nil
}
