package logstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/hashicorp/raft"
)

// errEntryChecksum is a wal entry whose bytes differ from those written.
var errEntryChecksum = errors.New("entry checksum mismatch")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// entrySumMagic marks the checksum trailer checkedStore adds to an entry's
// Extensions.
const entrySumMagic = 0xc5

// checkedStore adds a CRC-32C of every entry (index, term, type, data,
// extensions, append time) to what the store keeps, and checks it on every
// read. raft-wal's own CRCs cover a write batch and are checked only for
// the newest batch when the log opens, to tell a torn write; a byte changed
// later in an older entry would otherwise read back as a different entry
// and be applied. (raft-wal's pluggable Codec would be the natural place,
// but 0.4.2 records every segment as written with its built-in codec and
// then refuses to reopen a log written with any other.)
//
// The sum travels in raft.Log.Extensions, which hashicorp/raft stores and
// never reads; checkedStore copies entries before adding it, so raft's own
// (cached, replicated) entries never carry it. Concurrency is the wrapped
// store's: the methods keep no state of their own.
type checkedStore struct {
	backend
}

func (s checkedStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

func (s checkedStore) StoreLogs(logs []*raft.Log) error {
	summed := make([]raft.Log, len(logs))
	ptrs := make([]*raft.Log, len(logs))
	for i, l := range logs {
		summed[i] = *l
		ext := make([]byte, len(l.Extensions), len(l.Extensions)+5)
		copy(ext, l.Extensions)
		ext = append(ext, entrySumMagic)
		summed[i].Extensions = binary.LittleEndian.AppendUint32(ext, entrySum(l, l.Extensions))
		ptrs[i] = &summed[i]
	}
	return s.backend.StoreLogs(ptrs)
}

// IsMonotonic passes raft-wal's answer through (see isMonotonic).
func (s checkedStore) IsMonotonic() bool { return isMonotonic(s.backend) }

func (s checkedStore) GetLog(index uint64, l *raft.Log) error {
	if err := s.backend.GetLog(index, l); err != nil {
		return err
	}
	ext := l.Extensions
	if len(ext) < 5 || ext[len(ext)-5] != entrySumMagic {
		return fmt.Errorf("%w: no checksum stored", errEntryChecksum)
	}
	orig, sum := ext[:len(ext)-5], binary.LittleEndian.Uint32(ext[len(ext)-4:])
	if got := entrySum(l, orig); got != sum || l.Index != index {
		return fmt.Errorf("%w: crc32c %08x, written %08x", errEntryChecksum, got, sum)
	}
	if len(orig) == 0 {
		orig = nil
	}
	l.Extensions = orig
	return nil
}

// entrySum is the CRC-32C of l's fields, with ext as its extensions.
func entrySum(l *raft.Log, ext []byte) uint32 {
	var head [8 + 8 + 1 + 8 + 8 + 8]byte
	binary.LittleEndian.PutUint64(head[0:], l.Index)
	binary.LittleEndian.PutUint64(head[8:], l.Term)
	head[16] = byte(l.Type)
	binary.LittleEndian.PutUint64(head[17:], uint64(l.AppendedAt.UnixNano()))
	binary.LittleEndian.PutUint64(head[25:], uint64(len(l.Data)))
	binary.LittleEndian.PutUint64(head[33:], uint64(len(ext)))
	sum := crc32.Update(0, castagnoli, head[:])
	sum = crc32.Update(sum, castagnoli, l.Data)
	return crc32.Update(sum, castagnoli, ext)
}
