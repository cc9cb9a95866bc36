package proxy

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

// echo is member 1: it sends back what it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// Every connection comes from member 0 and goes to member 1.
func newProxy(t *testing.T) *Proxy {
	t.Helper()
	target := echo(t)
	p, err := New(2, func(int) string { return "127.0.0.1:0" }, func(int) string { return target },
		func(net.IP) int { return 0 }, 1, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func roundTrip(c net.Conn, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = c.SetDeadline(start.Add(timeout))
	if _, err := c.Write([]byte("ping")); err != nil {
		return 0, err
	}
	buf := make([]byte, 4)
	_, err := io.ReadFull(c, buf)
	return time.Since(start), err
}

func TestProxyFaults(t *testing.T) {
	p := newProxy(t)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", p.Addr(1).String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c := dial()
	if _, err := roundTrip(c, time.Second); err != nil {
		t.Fatalf("healthy link: %v", err)
	}

	p.Set(0, 1, Rule{Delay: 100 * time.Millisecond})
	p.Set(1, 0, Rule{Delay: 100 * time.Millisecond})
	if d, err := roundTrip(c, time.Second); err != nil || d < 200*time.Millisecond {
		t.Fatalf("slow link: round trip %v, %v; want >= 200ms", d, err)
	}

	p.Set(0, 1, Rule{Cut: true})
	if _, err := roundTrip(c, time.Second); err == nil {
		t.Fatal("a cut link still carried data on an old connection")
	}
	blackholed := dial() // accepted, but nothing comes back
	if _, err := roundTrip(blackholed, 300*time.Millisecond); err == nil {
		t.Fatal("a cut link carried data on a new connection")
	}

	p.Heal()
	if _, err := roundTrip(dial(), time.Second); err != nil {
		t.Fatalf("healed link: %v", err)
	}
}
