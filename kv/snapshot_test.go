package kv

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func snapshotInto(t *testing.T, from, to *Store) {
	t.Helper()
	var buf bytes.Buffer
	n, err := from.Snapshot().WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo reported %d bytes, wrote %d", n, buf.Len())
	}
	if err := to.Restore(&buf); err != nil {
		t.Fatal(err)
	}
}

// randomHistory applies a seeded mix of puts (with and without leases),
// deletes, txns and compactions.
func randomHistory(t *testing.T, s *Store, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 1))
	key := func() string { return fmt.Sprintf("k%02d", rng.IntN(30)) }
	for i := 0; i < steps; i++ {
		switch op := rng.IntN(20); {
		case op < 10:
			putLease(t, s, key(), fmt.Sprint(i), int64(rng.IntN(3)))
		case op < 13:
			del(t, s, key(), "")
		case op < 14:
			a, b := key(), key()
			if a > b {
				a, b = b, a
			}
			del(t, s, a, b)
		case op < 18:
			a, b := key(), key()
			if a == b {
				b += "x"
			}
			if _, err := s.Txn(&pb.TxnRequest{
				Compare: []*pb.Compare{cmpVersion(a, pb.Compare_GREATER, 1)},
				Success: []*pb.RequestOp{opPut(a, fmt.Sprint(i)), opDel(b, "")},
				Failure: []*pb.RequestOp{opPut(b, fmt.Sprint(i)), opGet(a, "")},
			}); err != nil {
				t.Fatal(err)
			}
		case op < 19:
			s.DeleteKeys(s.LeaseKeys(int64(1 + rng.IntN(2))))
		default:
			if c := s.CompactRev() + 1 + rng.Int64N(max(1, (s.Rev()-s.CompactRev())/2)); c <= s.Rev() {
				if _, err := s.Compact(c); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func leaseState(s *Store) string {
	var parts []string
	for _, id := range []int64{1, 2} {
		var keys []string
		for _, k := range s.LeaseKeys(id) {
			keys = append(keys, string(k))
		}
		parts = append(parts, fmt.Sprintf("%d:%s", id, strings.Join(keys, ",")))
	}
	return strings.Join(parts, " ")
}

func TestSnapshotRoundTrip(t *testing.T) {
	s := newStore(1, 2)
	randomHistory(t, s, 1, 400)
	rev, compact := s.Rev(), s.CompactRev()
	want := rangesAt(t, s, compact, rev)
	wantLeases, wantCount := leaseState(s), s.KeyCount()

	sn := s.Snapshot()
	// The snapshot is written while the store keeps changing.
	var buf bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := sn.WriteTo(&buf); err != nil {
			t.Error(err)
		}
	}()
	randomHistory(t, s, 2, 200)
	wg.Wait()
	if sn.Rev() != rev {
		t.Errorf("snapshot rev %d, want %d", sn.Rev(), rev)
	}

	r := newStore(1, 2)
	put(t, r, "stale", "x")
	if err := r.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if r.Rev() != rev || r.CompactRev() != compact || r.KeyCount() != wantCount {
		t.Fatalf("restored rev %d compact %d keys %d, want %d %d %d", r.Rev(), r.CompactRev(), r.KeyCount(), rev, compact, wantCount)
	}
	if got := rangesAt(t, r, compact, rev); !slices.Equal(got, want) {
		t.Errorf("ranges differ after restore:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := leaseState(r); got != wantLeases {
		t.Errorf("lease index %s, want %s", got, wantLeases)
	}

	// A restored store behaves like the original from there on.
	orig := newStore(1, 2)
	randomHistory(t, orig, 1, 400)
	randomHistory(t, orig, 3, 200)
	randomHistory(t, r, 3, 200)
	if got, want := rangesAt(t, r, r.CompactRev(), r.Rev()), rangesAt(t, orig, orig.CompactRev(), orig.Rev()); !slices.Equal(got, want) {
		t.Errorf("diverged after restore")
	}
	if leaseState(r) != leaseState(orig) {
		t.Errorf("lease index diverged: %s vs %s", leaseState(r), leaseState(orig))
	}

	// Two snapshots of the same state are byte for byte the same.
	var a, b bytes.Buffer
	if _, err := r.Snapshot().WriteTo(&a); err != nil {
		t.Fatal(err)
	}
	if _, err := orig.Snapshot().WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Errorf("snapshots of equal states differ")
	}
}

func TestSnapshotEmptyAndEmbedded(t *testing.T) {
	var buf bytes.Buffer
	if _, err := newStore().Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	s := newStore()
	put(t, s, "a", "1")
	del(t, s, "a", "")
	// Restore must stop at the end of its snapshot: the caller may follow it
	// with other data in the same stream.
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("trailer")
	r := newStore()
	put(t, r, "x", "y")
	if err := r.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if r.Rev() != 1 || r.KeyCount() != 0 {
		t.Fatalf("empty restore: rev %d keys %d", r.Rev(), r.KeyCount())
	}
	if err := r.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if r.Rev() != 3 || r.KeyCount() != 0 {
		t.Fatalf("second restore: rev %d keys %d", r.Rev(), r.KeyCount())
	}
	if rest, _ := io.ReadAll(&buf); string(rest) != "trailer" {
		t.Errorf("Restore consumed %q too much", "trailer"[:7-len(rest)])
	}
}

func TestRestoreCorrupt(t *testing.T) {
	s := newStore(1, 2)
	randomHistory(t, s, 4, 100)
	var buf bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	cases := map[string][]byte{
		"empty":     nil,
		"truncated": good[:len(good)/2],
		"no crc":    good[:len(good)-4],
		"magic":     append([]byte("XXXXXXXX"), good[8:]...),
		"version":   append(append(append([]byte(nil), good[:8]...), 9), good[9:]...),
	}
	for i := 17; i < len(good); i += 37 {
		b := bytes.Clone(good)
		b[i] ^= 0x5a
		cases[fmt.Sprintf("flip %d", i)] = b
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			r := newStore()
			put(t, r, "keep", "me")
			if err := r.Restore(bytes.NewReader(data)); err == nil {
				t.Fatal("corrupt snapshot accepted")
			}
			if r.Rev() != 2 || fmtKV(get(t, r, "keep")) != "keep@2/2/1=me" {
				t.Errorf("failed restore changed the store")
			}
		})
	}
}

type failWriter struct{ left int }

func (f *failWriter) Write(p []byte) (int, error) {
	if len(p) > f.left {
		n := f.left
		f.left = 0
		return n, io.ErrShortWrite
	}
	f.left -= len(p)
	return len(p), nil
}

func TestSnapshotWriteError(t *testing.T) {
	s := newStore(1, 2)
	randomHistory(t, s, 5, 300)
	var buf bytes.Buffer
	total, err := s.Snapshot().WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{0, 10, 100, int(total) - 2} {
		n, err := s.Snapshot().WriteTo(&failWriter{left: at})
		if !errors.Is(err, io.ErrShortWrite) || n != int64(at) {
			t.Errorf("fail at %d: n=%d err=%v", at, n, err)
		}
	}
}
