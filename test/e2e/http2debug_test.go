package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestHTTP2DebugAuthority is etcd 3.7's TestAuthority (tests/common) in
// small: members started with GODEBUG=http2debug=2 write Go's line naming
// the :authority of each HTTP/2 request they get, and etcd's test reads a
// member's first such line, as the end of a line of its output, as what its
// clients sent. Two things failed it on corenode: the log package's lines
// went through corenode's JSON logger (their quotes escaped), and a
// follower asked its leader for read indexes (from its start, before it
// says it is ready) with gRPC calls on the peer port, so the leader's first
// line named its own peer address. etcd's members send one another no
// HTTP/2 request.
func TestHTTP2DebugAuthority(t *testing.T) {
	requireEtcdctl(t)
	c := newCluster(t, buildBinary(t), 1)
	for _, m := range c.members {
		m.env = []string{"GODEBUG=http2debug=2"}
	}
	if err := c.startAll(); err != nil {
		t.Fatal(err)
	}
	if err := c.waitHealthy(c.members, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range c.members {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.clientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		// Linearizable reads on a follower ask the leader for a read index.
		for range 10 {
			if _, err := cli.Put(ctx, "foo", "bar"); err != nil {
				t.Fatal(err)
			}
			if _, err := cli.Get(ctx, "foo"); err != nil {
				t.Fatal(err)
			}
		}
		cli.Close()
	}
	const line = `http2: decoded hpack field header field ":authority" = `
	for _, m := range c.members {
		want := line + fmt.Sprintf("%q", strings.TrimPrefix(m.clientURL, "http://"))
		var got string
		for got == "" {
			got = firstLineWith(t, m.logPath, line)
			if got == "" && ctx.Err() != nil {
				t.Fatalf("%s wrote no line with %s", m.name, line)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !strings.HasSuffix(got, want) {
			t.Errorf("%s's first :authority line is %q, want one ending in %s", m.name, got, want)
		}
	}
}

// firstLineWith returns the first line of the file at path that contains
// s, without its line end, or "".
func firstLineWith(t *testing.T, path, s string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			return strings.TrimSuffix(sc.Text(), "\r")
		}
	}
	return ""
}
