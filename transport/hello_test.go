package transport

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"
)

// testIdentity admits peers of its own incarnation or of none, and records
// whom it judged.
type testIdentity struct {
	id, inc uint64
	mu      sync.Mutex
	met     map[uint64]uint64
}

var errForeign = errors.New("another history")

func (i *testIdentity) Local() (uint64, uint64) { return i.id, i.inc }
func (i *testIdentity) Admit(id, inc uint64) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.met == nil {
		i.met = map[uint64]uint64{}
	}
	i.met[id] = inc
	if inc != 0 && i.inc != 0 && inc != i.inc {
		return errForeign
	}
	return nil
}

func (i *testIdentity) judged(id uint64) (uint64, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	inc, ok := i.met[id]
	return inc, ok
}

// acceptRaft reads one byte from every raft connection a accepts and
// echoes it, so a dial can prove its connection reached raft.
func acceptRaft(a *PeerMux) {
	go func() {
		for {
			c, err := a.raft.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var b [1]byte
				if _, err := io.ReadFull(c, b[:]); err == nil {
					c.Write(b[:])
				}
			}()
		}
	}()
}

func TestRaftHandshake(t *testing.T) {
	for _, tc := range []struct {
		name               string
		dialInc, acceptInc uint64
		admitted           bool
	}{
		{"same incarnation", 7, 7, true},
		{"dialer knows none yet", 0, 7, true},
		{"acceptor knows none yet", 7, 0, true},
		{"another history", 7, 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, d := newTestPeerMux(t), newTestPeerMux(t)
			ai, di := &testIdentity{id: 1, inc: tc.acceptInc}, &testIdentity{id: 2, inc: tc.dialInc}
			a.SetIdentity(ai)
			d.SetIdentity(di)
			acceptRaft(a)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := d.dialRaft(ctx, a.Addr().String())
			if !tc.admitted {
				if err == nil {
					c.Close()
					t.Fatal("a member of another history got a raft connection")
				}
				if !errors.Is(err, errForeign) {
					t.Fatalf("refusal %v, want the dialer's own judgement of the acceptor", err)
				}
			} else {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				defer c.Close()
				if _, err := c.Write([]byte{42}); err != nil {
					t.Fatal(err)
				}
				var b [1]byte
				if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 42 {
					t.Fatalf("the connection did not reach raft: %v %v", b, err)
				}
			}
			// Each side judged the other by what it stated.
			if inc, ok := ai.judged(2); !ok || inc != tc.dialInc {
				t.Errorf("the acceptor judged the dialer by %x (%v), want %x", inc, ok, tc.dialInc)
			}
			if inc, ok := di.judged(1); !ok || inc != tc.acceptInc {
				t.Errorf("the dialer judged the acceptor by %x (%v), want %x", inc, ok, tc.acceptInc)
			}
		})
	}
}

// TestRaftHandshakeFallsBackForAnEarlierVersion: a member of an earlier
// version closes a connection whose first byte it does not know; the
// dialer opens a plain raft connection instead and remembers to.
func TestRaftHandshakeFallsBackForAnEarlierVersion(t *testing.T) {
	raftRoute, ln := earlierVersionMux(t, streamRaft)
	acceptRaft(&PeerMux{raft: raftRoute})

	d := newTestPeerMux(t)
	d.SetIdentity(&testIdentity{id: 2, inc: 7})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addr := ln.Addr().String()
	c, err := d.dialRaft(ctx, addr)
	if err != nil {
		t.Fatalf("no raft connection to a member of an earlier version: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{42}); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 42 {
		t.Fatalf("the plain connection did not reach raft: %v %v", b, err)
	}
	if !d.legacy.is(addr) {
		t.Fatal("the dialer did not remember the member of an earlier version")
	}
}
