//go:build linux

package node

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkLogAppend is what one raft append costs on this machine's disk:
// a one-entry append (300 bytes, a put's size in bench-vs-etcd) to the log
// as members open it, and for scale the write-ahead-log append etcd makes
// instead: one write to a preallocated file and one fdatasync. writers=3 is
// three members appending at once on one disk, as in bench-vs-etcd, where a
// write commits only after the leader's own append. ns/op is the time one
// append takes.
//
//	go test -run '^$' -bench LogAppend -benchtime 2000x ./node/
func BenchmarkLogAppend(b *testing.B) {
	data := make([]byte, 300)
	for _, writers := range []int{1, 3} {
		b.Run(fmt.Sprintf("bolt/writers=%d", writers), func(b *testing.B) {
			appends := make([]func(i int) error, writers)
			for w := range appends {
				s, err := openLog(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { s.Close() })
				appends[w] = func(i int) error {
					return s.StoreLogs([]*raft.Log{{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data}})
				}
			}
			runWriters(b, appends)
		})
		b.Run(fmt.Sprintf("wal/writers=%d", writers), func(b *testing.B) {
			appends := make([]func(i int) error, writers)
			for w := range appends {
				f, err := os.Create(filepath.Join(b.TempDir(), "wal"))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { f.Close() })
				// etcd preallocates its segments, so an append changes no size.
				if err := f.Truncate(int64(b.N+1) * int64(len(data))); err != nil {
					b.Fatal(err)
				}
				appends[w] = func(i int) error {
					if _, err := f.WriteAt(data, int64(i)*int64(len(data))); err != nil {
						return err
					}
					return syscall.Fdatasync(int(f.Fd()))
				}
			}
			runWriters(b, appends)
		})
	}
}

// runWriters runs b.N appends on every writer at once.
func runWriters(b *testing.B, appends []func(i int) error) {
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, appendOne := range appends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range b.N {
				if err := appendOne(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
