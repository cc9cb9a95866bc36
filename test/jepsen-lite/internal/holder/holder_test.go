package holder

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/member/membertest"
)

// start runs a holder of mode in-process against c, its events on the
// returned channel (closed when it returns) and its exit status on the
// other.
func start(t *testing.T, ctx context.Context, c *membertest.Cluster, mode, prefix string) (<-chan Event, <-chan int) {
	t.Helper()
	cfg := Config{Mode: mode, Endpoints: c.Endpoints(), Prefix: prefix, Name: "h1", TTL: 2 * time.Second,
		ActEvery: 5 * time.Millisecond, WriteEvery: 20 * time.Millisecond, Register: prefix + "-register"}
	for i, ep := range cfg.Endpoints {
		cfg.Endpoints[i] = strings.TrimPrefix(ep, "http://")
	}
	pr, pw := io.Pipe()
	h := &holder{cfg: cfg, cli: c.Client(), log: membertest.Logger(), out: json.NewEncoder(pw)}
	events := make(chan Event, 1024)
	status := make(chan int, 1)
	go func() {
		if err := ReadEvents(pr, func(ev Event) { events <- ev }); err != nil {
			t.Errorf("read events: %v", err)
		}
		close(events)
	}()
	go func() {
		status <- h.run(ctx)
		pw.Close()
	}()
	return events, status
}

// next waits for the next event of kind ev, skipping others.
func next(t *testing.T, events <-chan Event, ev string) Event {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("holder ended before a %q event", ev)
			}
			if e.Ev == ev {
				return e
			}
		case <-timeout:
			t.Fatalf("no %q event in 20s", ev)
		}
	}
}

func TestModes(t *testing.T) {
	if got := strings.Join(Modes(), ","); got != "library,naive" {
		t.Fatalf("modes %s", got)
	}
}

func TestHolderActsAndWritesUntilItsLeaseIsGone(t *testing.T) {
	for _, mode := range Modes() {
		t.Run(mode, func(t *testing.T) { testActsUntilLeaseGone(t, mode) })
	}
}

func testActsUntilLeaseGone(t *testing.T, mode string) {
	c := membertest.New(t, 1)
	cli := c.Client()
	events, status := start(t, t.Context(), c, mode, "el")

	won := next(t, events, EvElected)
	resp, err := cli.Get(t.Context(), "el/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != won.Key || resp.Kvs[0].CreateRevision != won.Token {
		t.Fatalf("elected with key %s token %d; election keys %v", won.Key, won.Token, resp.Kvs)
	}
	if won.End < won.Mono {
		t.Fatalf("elected at %d before campaigning at %d", won.End, won.Mono)
	}
	if a := next(t, events, EvAct); a.Token != won.Token || a.Mono < won.End {
		t.Fatalf("action %+v after election %+v", a, won)
	}
	var w Event
	for !w.Committed {
		w = next(t, events, EvWrite)
		if w.Err != "" {
			t.Fatalf("fenced write: %s", w.Err)
		}
	}
	reg, err := cli.Get(t.Context(), "el-register")
	if err != nil || len(reg.Kvs) != 1 || !strings.HasPrefix(string(reg.Kvs[0].Value), "h1 token=") {
		t.Fatalf("register after a committed fenced write: %v %v", reg, err)
	}

	// The lease gone, the session learns it from its next keep-alive;
	// the holder must stop acting, say so and exit "lost".
	if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	lost := next(t, events, EvLost)
	if lost.Token != won.Token {
		t.Fatalf("lost token %d, elected with %d", lost.Token, won.Token)
	}
	for e := range events {
		if e.Ev == EvAct || e.Ev == EvWrite && e.Mono > lost.Mono {
			t.Fatalf("%s after it said it lost: %+v", e.Ev, e)
		}
	}
	if s := <-status; s != ExitLost {
		t.Fatalf("exit status %d, want %d", s, ExitLost)
	}
}

func TestHolderResignsWhenStopped(t *testing.T) {
	for _, mode := range Modes() {
		t.Run(mode, func(t *testing.T) { testResignsWhenStopped(t, mode) })
	}
}

func testResignsWhenStopped(t *testing.T, mode string) {
	c := membertest.New(t, 1)
	cli := c.Client()
	ctx, stop := context.WithCancel(t.Context())
	events, status := start(t, ctx, c, mode, "el")
	next(t, events, EvAct)
	stop()
	if lost := next(t, events, EvLost); !strings.HasPrefix(lost.Err, "resigned: <nil>") {
		t.Fatalf("lost: %+v", lost)
	}
	if s := <-status; s != ExitResigned {
		t.Fatalf("exit status %d, want %d", s, ExitResigned)
	}
	resp, err := cli.Get(t.Context(), "el/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("election keys after resigning: %v %v", resp, err)
	}
}
