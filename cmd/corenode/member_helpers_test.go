package main

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/corenode/corenode/internal/freeport"
	"github.com/corenode/corenode/member"
)

// startReady starts a member from args as main does, with its series on
// reg, and waits until it serves; the member and its log close when the
// test ends.
func startReady(t *testing.T, args []string, reg prometheus.Registerer) *member.Member {
	t.Helper()
	s, err := parseFlags(args, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _, closeLog, err := start(s, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeLog)
	t.Cleanup(func() { m.Close() })
	select {
	case <-m.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("not ready after 20 s")
	}
	return m
}

// oneMember starts a one-member cluster named m on loopback ports of its
// own, with args after its URLs and data dir, and returns its client URL.
func oneMember(t *testing.T, reg prometheus.Registerer, args ...string) string {
	t.Helper()
	ports, err := freeport.Ports("127.0.0.1", 2)
	if err != nil {
		t.Fatal(err)
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	startReady(t, append([]string{"--name=m", "--data-dir=" + filepath.Join(t.TempDir(), "data"),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer}, args...), reg)
	return client
}

// configOf is the member configuration args make, or the error that stops
// the start.
func configOf(t *testing.T, args ...string) (member.Config, error) {
	t.Helper()
	s, err := parseFlags(args, nil)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return memberConfig(&s.o, slog.New(slog.NewTextHandler(io.Discard, nil)))
}
