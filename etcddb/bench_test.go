package etcddb

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/fsm"
	"github.com/corenode/corenode/kv"
)

var benchKeys = flag.Int("keys", 100_000, "keys in the state BenchmarkFormats writes and reads")

// BenchmarkFormats writes and reads the same state (--keys keys of 8
// bytes with 100-byte values, one revision each) in corenode's snapshot
// format, which raft's snapshots keep, and as etcd's backend file, which
// the Snapshot RPC streams: the cost of each to a leader that saves a
// snapshot, and to a member that restores one.
//
//	go test -run '^$' -bench Formats -benchtime 3x ./etcddb/ -keys 1000000
func BenchmarkFormats(b *testing.B) {
	s := kv.NewStore(kv.Options{})
	for i := range *benchKeys {
		if _, err := s.Put(&pb.PutRequest{Key: fmt.Appendf(nil, "%08d", i), Value: make([]byte, 100)}); err != nil {
			b.Fatal(err)
		}
	}
	c := fsm.Contents{KV: s.Snapshot(), Auth: auth.State{Revision: 1}}
	dir := b.TempDir()
	corenodeFile, etcdFile := filepath.Join(dir, "state.bin"), filepath.Join(dir, "etcd.db")
	writeCorenode := func() {
		f, err := os.Create(corenodeFile)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := fsm.Seed(c, f, 1, 1); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	writeEtcd := func() {
		x, err := Export(context.Background(), dir, c, 1)
		if err != nil {
			b.Fatal(err)
		}
		defer x.Close()
		out, err := os.Create(etcdFile)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := x.WriteTo(out); err != nil {
			b.Fatal(err)
		}
		if err := out.Close(); err != nil {
			b.Fatal(err)
		}
	}
	writeCorenode()
	writeEtcd()
	sizes := func(b *testing.B) {
		cf, _ := os.Stat(corenodeFile)
		ef, _ := os.Stat(etcdFile)
		b.ReportMetric(float64(cf.Size())/float64(*benchKeys), "corenode-B/key")
		b.ReportMetric(float64(ef.Size())/float64(*benchKeys), "etcd-B/key")
	}

	// Write: the state to a file. Read: the file to a state a member
	// serves from (the kv index built).
	b.Run("corenode/write", func(b *testing.B) {
		for range b.N {
			writeCorenode()
		}
		sizes(b)
	})
	b.Run("corenode/read", func(b *testing.B) {
		for range b.N {
			f, err := os.Open(corenodeFile)
			if err != nil {
				b.Fatal(err)
			}
			if err := fsm.New(slog.New(slog.DiscardHandler), nil, nil).Restore(f); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("etcd/write", func(b *testing.B) {
		for range b.N {
			writeEtcd()
		}
		sizes(b)
	})
	b.Run("etcd/read", func(b *testing.B) {
		for range b.N {
			c, _, err := Read(etcdFile)
			if err != nil {
				b.Fatal(err)
			}
			kv.NewStore(kv.Options{}).Load(c.KV)
		}
	})
}
