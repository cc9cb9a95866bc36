package kv

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Snapshot format, all integers unsigned varints unless noted:
//
//	magic "CNKVSNAP" | format version (1 byte) | body length (8 bytes, big endian)
//	body:  rev | compactRev | record count | records...
//	record: flags (bit 0: tombstone) | modRev - previous modRev | sub | key length | key
//	        and, unless a tombstone: createRev | version | lease (zig-zag) | value length | value
//	trailer: CRC-32C of the body (4 bytes, big endian)
//
// The body length up front lets Restore read exactly the snapshot's bytes, so
// the caller may embed it in a larger stream. The derived indexes (keys,
// leases) are not written: Restore rebuilds them from the records.
const (
	snapMagic   = "CNKVSNAP"
	snapVersion = 1
	flagTomb    = 1
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Snapshot is an immutable capture of a Store's state.
type Snapshot struct {
	rev, compactRev int64
	log             []*record
}

// Snapshot captures the current state cheaply under the lock; the returned value is immutable
// and WriteTo may run concurrently with later writes.
func (s *Store) Snapshot() *Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	// Records are immutable and the log is only appended to past this
	// length or replaced, so keeping the prefix is a consistent copy. The
	// capacity is clipped so nothing can append through the snapshot.
	n := len(s.log)
	return &Snapshot{rev: s.rev, compactRev: s.compactRev, log: s.log[:n:n]}
}

// Rev returns the store revision the snapshot was taken at.
func (sn *Snapshot) Rev() int64 { return sn.rev }

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func varintLen(v int64) int { return uvarintLen(uint64(v<<1) ^ uint64(v>>63)) }

func (sn *Snapshot) bodyLen() int {
	n := uvarintLen(uint64(sn.rev)) + uvarintLen(uint64(sn.compactRev)) + uvarintLen(uint64(len(sn.log)))
	prev := int64(0)
	for _, r := range sn.log {
		kv := &r.kv
		n += 1 + uvarintLen(uint64(kv.ModRevision-prev)) + uvarintLen(uint64(r.sub)) +
			uvarintLen(uint64(len(kv.Key))) + len(kv.Key)
		if !r.tomb {
			n += uvarintLen(uint64(kv.CreateRevision)) + uvarintLen(uint64(kv.Version)) +
				varintLen(kv.Lease) + uvarintLen(uint64(len(kv.Value))) + len(kv.Value)
		}
		prev = kv.ModRevision
	}
	return n
}

type countWriter struct {
	w   io.Writer
	n   int64
	crc uint32
	sum bool
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if c.sum {
		c.crc = crc32.Update(c.crc, crcTable, p[:n])
	}
	return n, err
}

// WriteTo writes the snapshot in the format Restore reads.
func (sn *Snapshot) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	var hdr [len(snapMagic) + 1 + 8]byte
	copy(hdr[:], snapMagic)
	hdr[len(snapMagic)] = snapVersion
	binary.BigEndian.PutUint64(hdr[len(snapMagic)+1:], uint64(sn.bodyLen()))
	if _, err := cw.Write(hdr[:]); err != nil {
		return cw.n, fmt.Errorf("kv: write snapshot header: %w", err)
	}

	cw.sum = true
	bw := bufio.NewWriterSize(cw, 64<<10)
	var buf [binary.MaxVarintLen64]byte
	putU := func(v uint64) {
		bw.Write(buf[:binary.PutUvarint(buf[:], v)])
	}
	putU(uint64(sn.rev))
	putU(uint64(sn.compactRev))
	putU(uint64(len(sn.log)))
	var rb []byte
	prev := int64(0)
	for _, r := range sn.log {
		rb = appendRecord(rb[:0], r, prev)
		bw.Write(rb)
		prev = r.kv.ModRevision
	}
	// bufio.Writer keeps the first error and reports it here.
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("kv: write snapshot body: %w", err)
	}
	cw.sum = false
	var tr [4]byte
	binary.BigEndian.PutUint32(tr[:], cw.crc)
	if _, err := cw.Write(tr[:]); err != nil {
		return cw.n, fmt.Errorf("kv: write snapshot trailer: %w", err)
	}
	return cw.n, nil
}

// appendRecord appends r's encoding in the snapshot format, its revision
// relative to prev, the revision of the record before it.
func appendRecord(b []byte, r *record, prev int64) []byte {
	kv := &r.kv
	flags := byte(0)
	if r.tomb {
		flags = flagTomb
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(kv.ModRevision-prev))
	b = binary.AppendUvarint(b, uint64(r.sub))
	b = binary.AppendUvarint(b, uint64(len(kv.Key)))
	b = append(b, kv.Key...)
	if !r.tomb {
		b = binary.AppendUvarint(b, uint64(kv.CreateRevision))
		b = binary.AppendUvarint(b, uint64(kv.Version))
		b = binary.AppendVarint(b, kv.Lease)
		b = binary.AppendUvarint(b, uint64(len(kv.Value)))
		b = append(b, kv.Value...)
	}
	return b
}

type crcReader struct {
	r   io.Reader
	crc uint32
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.crc = crc32.Update(c.crc, crcTable, p[:n])
	return n, err
}

var errCorrupt = errors.New("corrupt snapshot")

// Restore replaces the whole state with what WriteTo wrote. It reads exactly
// the snapshot's bytes from r. On error the store is unchanged.
//
// Watchers are kept. Each one resumes from the revision it needs next: if the
// restored history still holds it, the watcher is caught up from it right away
// (as Resync would, so it may end up unsynced if its sink refuses). If not
// (compacted away, or the watcher has seen revisions beyond the restored
// state), a sink implementing CanceledSink gets Canceled with the restored
// compaction revision and the watcher is removed; otherwise the watcher is
// left unsynced and its next Resync returns ErrGRPCCompacted.
func (s *Store) Restore(r io.Reader) error {
	rev, compactRev, log, err := readSnapshot(r)
	if err != nil {
		return fmt.Errorf("kv: restore: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	oldRev := s.rev
	s.reset(rev, compactRev, log)
	s.resumeWatchers(oldRev)
	return nil
}

func readSnapshot(r io.Reader) (rev, compactRev int64, log []*record, err error) {
	var hdr [len(snapMagic) + 1 + 8]byte
	if _, err = io.ReadFull(r, hdr[:]); err != nil {
		return 0, 0, nil, fmt.Errorf("read header: %w", err)
	}
	if string(hdr[:len(snapMagic)]) != snapMagic {
		return 0, 0, nil, fmt.Errorf("%w: bad magic", errCorrupt)
	}
	if v := hdr[len(snapMagic)]; v != snapVersion {
		return 0, 0, nil, fmt.Errorf("unsupported snapshot format version %d", v)
	}
	size := binary.BigEndian.Uint64(hdr[len(snapMagic)+1:])
	if size > 1<<62 {
		return 0, 0, nil, fmt.Errorf("%w: body length %d", errCorrupt, size)
	}
	cr := &crcReader{r: io.LimitReader(r, int64(size))}
	br := bufio.NewReaderSize(cr, 64<<10)
	d := decoder{r: br}
	rev = d.int()
	compactRev = d.int()
	count := d.uint()
	if d.err == nil && (rev < 1 || compactRev < 0 || compactRev > rev) {
		d.fail("revisions rev=%d compact=%d", rev, compactRev)
	}
	// Grow as records arrive: a corrupt count must not allocate up front.
	log = make([]*record, 0, min(count, 1<<16))
	var prev *record
	for i := uint64(0); i < count && d.err == nil; i++ {
		rec := d.record(prev)
		if d.err != nil {
			break
		}
		if err := checkRecord(prev, rec, rev); err != nil {
			d.err = err
			break
		}
		log = append(log, rec)
		prev = rec
	}
	if d.err == nil {
		if _, e := br.ReadByte(); e != io.EOF {
			d.fail("trailing bytes in body")
		}
	}
	if d.err != nil {
		return 0, 0, nil, d.err
	}
	var tr [4]byte
	if _, err = io.ReadFull(r, tr[:]); err != nil {
		return 0, 0, nil, fmt.Errorf("read trailer: %w", err)
	}
	if got, want := cr.crc, binary.BigEndian.Uint32(tr[:]); got != want {
		return 0, 0, nil, fmt.Errorf("%w: checksum %08x, want %08x", errCorrupt, got, want)
	}
	return rev, compactRev, log, nil
}

// decoder keeps the first error so the parsing code reads straight through.
type decoder struct {
	r   *bufio.Reader
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{errCorrupt}, args...)...)
	}
}

func (d *decoder) setErr(err error) {
	if d.err == nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		d.err = fmt.Errorf("read body: %w", err)
	}
}

func (d *decoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(d.r)
	if err != nil {
		d.setErr(err)
	}
	return v
}

// int reads a non-negative int64 written as an unsigned varint.
func (d *decoder) int() int64 {
	v := d.uint()
	if v > 1<<63-1 {
		d.fail("value %d out of range", v)
		return 0
	}
	return int64(v)
}

// bytes reads a length-prefixed byte string, growing the buffer as data
// arrives so a corrupt length fails on EOF instead of allocating.
func (d *decoder) bytes() []byte {
	n := d.uint()
	if d.err != nil || n == 0 {
		return nil
	}
	const chunk = 1 << 20
	if n <= chunk {
		buf := make([]byte, n)
		if _, err := io.ReadFull(d.r, buf); err != nil {
			d.setErr(err)
		}
		return buf
	}
	buf := make([]byte, 0, chunk)
	for uint64(len(buf)) < n && d.err == nil {
		m := min(n-uint64(len(buf)), chunk)
		start := len(buf)
		buf = append(buf, make([]byte, m)...)
		if _, err := io.ReadFull(d.r, buf[start:]); err != nil {
			d.setErr(err)
		}
	}
	return buf
}

func (d *decoder) record(prev *record) *record {
	flags, err := d.r.ReadByte()
	if err != nil {
		d.setErr(err)
		return nil
	}
	if flags&^flagTomb != 0 {
		d.fail("record flags %#x", flags)
		return nil
	}
	r := &record{tomb: flags&flagTomb != 0}
	prevRev := int64(0)
	if prev != nil {
		prevRev = prev.kv.ModRevision
	}
	r.kv.ModRevision = prevRev + d.int()
	r.sub = d.int()
	r.kv.Key = d.bytes()
	if d.err != nil {
		return nil
	}
	if r.tomb {
		return r
	}
	r.kv.CreateRevision = d.int()
	r.kv.Version = d.int()
	if d.err == nil {
		lease, err := binary.ReadVarint(d.r)
		if err != nil {
			d.setErr(err)
		}
		r.kv.Lease = lease
	}
	r.kv.Value = d.bytes()
	return r
}
