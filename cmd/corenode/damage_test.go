package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corenode/corenode/internal/freeport"
	"github.com/corenode/corenode/member/membertest"
)

// TestDamagedStoreExitsWithOneLine runs the corenode binary a user runs on
// each log store, stops it, changes bytes all over its bolt file (raft.db;
// the wal's meta database) and starts it again: it exits 1 having written
// one line, the damage and the commands that bring the member back, and no
// panic trace (bbolt panics on such a file, some of it on a goroutine of
// its own that no recover reaches).
func TestDamagedStoreExitsWithOneLine(t *testing.T) {
	bin := buildCorenode(t)
	for _, tc := range []struct{ store, file string }{{"boltdb", "raft.db"}, {"wal", "wal/wal-meta.db"}} {
		t.Run(tc.store, func(t *testing.T) {
			ports, err := freeport.Ports("127.0.0.1", 2)
			if err != nil {
				t.Fatal(err)
			}
			client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
			peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
			dataDir := filepath.Join(t.TempDir(), "data")
			args := []string{"--name", "a", "--data-dir", dataDir, "--log-store", tc.store,
				"--listen-client-urls", client, "--advertise-client-urls", client,
				"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer}

			first := exec.Command(bin, args...)
			var firstOut bytes.Buffer // read once first exited
			first.Stderr = &firstOut
			if err := first.Start(); err != nil {
				t.Fatal(err)
			}
			var firstErr error
			exited := make(chan struct{})
			go func() {
				firstErr = first.Wait()
				close(exited)
			}()
			t.Cleanup(func() {
				first.Process.Kill()
				<-exited
			})
			membertest.Eventually(t, 30*time.Second, func() bool {
				select {
				case <-exited:
					t.Fatalf("corenode exited before it was healthy: %v\n%s", firstErr, firstOut.String())
				default:
				}
				resp, err := http.Get(client + "/health")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			}, "corenode never became healthy")
			if err := first.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			<-exited
			if firstErr != nil {
				t.Fatalf("corenode stopped with %v\n%s", firstErr, firstOut.String())
			}

			path := filepath.Join(dataDir, tc.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// Every 7th byte past the two meta pages.
			for i := 2 * os.Getpagesize(); i < len(data); i += 7 {
				data[i] ^= 0x5a
			}
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			second := exec.CommandContext(ctx, bin, args...)
			var stdout, stderr bytes.Buffer
			second.Stdout, second.Stderr = &stdout, &stderr
			err = second.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("corenode on a damaged %s: %v, want exit status 1; stderr:\n%s", tc.file, err, stderr.String())
			}
			out := strings.TrimSuffix(stderr.String(), "\n")
			if strings.Contains(out, "\n") || stdout.Len() > 0 {
				t.Fatalf("corenode on a damaged %s wrote more than one line:\n%s%s", tc.file, stdout.String(), out)
			}
			for _, want := range []string{"corenode: ", "is damaged: " + tc.file + ": ", "etcdctl member remove", "--initial-cluster-state existing"} {
				if !strings.Contains(out, want) {
					t.Errorf("corenode's line %q does not say %q", out, want)
				}
			}
		})
	}
}
