package cachereader

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/corenode/corenode/client/cache"
	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

const lease = time.Second

func newCache(t *testing.T) (*membertest.Cluster, *cache.Cache) {
	t.Helper()
	c := membertest.New(t, 1, membertest.WithConfig(func(i int, cfg *member.Config) { cfg.ReadLeaseDuration = lease }))
	cc, err := cache.New(c.Client())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return c, cc
}

func read(t *testing.T, c *cache.Cache, key string, hit bool, value string) Result {
	t.Helper()
	r := Read(c, key, 5*time.Second)
	if r.Err != "" {
		t.Fatalf("read %s: %s", key, r.Err)
	}
	if r.Key != key || r.Hit != hit || r.Value != value || r.Found != (value != "") || r.End < r.Start {
		t.Fatalf("read %s: %+v, want hit=%v value=%q", key, r, hit, value)
	}
	return r
}

// A read misses, the next hits; a write completes only once the entry is
// gone, so the read after it misses and sees it; an entry outlives its
// lease in no read.
func TestRead(t *testing.T) {
	c, cc := newCache(t)
	read(t, cc, "k", false, "")
	read(t, cc, "k", true, "")
	put, err := c.Client().Put(t.Context(), "k", "v1")
	if err != nil {
		t.Fatal(err)
	}
	r := read(t, cc, "k", false, "v1")
	if r.Rev != put.Header.Revision {
		t.Fatalf("read revision %d, the put's %d", r.Rev, put.Header.Revision)
	}
	r = read(t, cc, "k", true, "v1")
	if r.Stats.Hits != 2 || r.Stats.Misses != 2 || r.Stats.Invalidations == 0 {
		t.Fatalf("stats %+v", r.Stats)
	}
	// The process's clock runs on while it is stopped; so does ours
	// while we sleep.
	time.Sleep(lease + 100*time.Millisecond)
	read(t, cc, "k", false, "v1")
}

func TestServe(t *testing.T) {
	_, cc := newCache(t)
	var in, out bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, k := range []string{"a", "b", "a"} {
		if err := enc.Encode(Request{Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	if err := Serve(cc, &in, &out, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var got []string
	dec := json.NewDecoder(&out)
	for dec.More() {
		var r Result
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		if r.Err != "" {
			t.Fatalf("%+v", r)
		}
		got = append(got, r.Key+map[bool]string{true: " hit", false: " miss"}[r.Hit])
	}
	if s := strings.Join(got, ", "); s != "a miss, b miss, a hit" {
		t.Fatalf("results: %s", s)
	}
}

func TestArgs(t *testing.T) {
	cfg := Config{Endpoints: []string{"127.0.0.1:1", "127.0.0.1:2"}, Name: "reader-1#2", Timeout: 1500 * time.Millisecond}
	got, err := parse(cfg.Args())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got.Endpoints, ",") != "127.0.0.1:1,127.0.0.1:2" || got.Name != cfg.Name || got.Timeout != cfg.Timeout {
		t.Fatalf("parse(Args()) = %+v, want %+v", got, cfg)
	}
	if _, err := parse([]string{"-name", "x"}); err == nil {
		t.Fatal("no -endpoints: no error")
	}
}
