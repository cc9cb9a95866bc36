package member_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
	"github.com/corenode/corenode/transport"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// gw calls etcd's JSON gateway on member i with a JSON body and returns the
// status and the decoded answer.
func gw(t *testing.T, c *membertest.Cluster, i int, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(c.ClientURL(i)+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read: %v", path, err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("POST %s: answer %q is not JSON: %v", path, raw, err)
	}
	return resp.StatusCode, m
}

// field walks a decoded JSON answer: field(m, "kvs", 0, "value").
func field(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not an object at %q", v, k)
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				t.Fatalf("%v: no element %d", v, k)
			}
			v = a[k]
		}
	}
	return v
}

func wantOK(t *testing.T, what string, code int, m map[string]any) {
	t.Helper()
	if code != http.StatusOK {
		t.Fatalf("%s: status %d, body %v", what, code, m)
	}
	if field(t, m, "header", "cluster_id") == nil || field(t, m, "header", "member_id") == nil {
		t.Fatalf("%s: header without cluster_id/member_id: %v", what, m)
	}
}

func TestGatewayRoutes(t *testing.T) {
	c := membertest.New(t, 3)
	leader := c.WaitLeader()
	f := follower(c, leader)

	t.Run("version", func(t *testing.T) {
		resp, err := http.Get(c.ClientURL(f) + "/version")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]string
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		if v["etcdserver"] != transport.APIVersion || v["etcdcluster"] == "" {
			t.Fatalf("/version = %v", v)
		}
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "*" {
			t.Fatalf("CORS header %q, want * as etcd's default", got)
		}
	})

	t.Run("kv", func(t *testing.T) {
		code, m := gw(t, c, f, "/v3/kv/put", `{"key":"`+b64("/gw/a")+`","value":"`+b64("1")+`"}`)
		wantOK(t, "put", code, m)
		code, m = gw(t, c, f, "/v3/kv/put", `{"key":"`+b64("/gw/b")+`","value":"`+b64("2")+`","prev_kv":true}`)
		wantOK(t, "put b", code, m)
		code, m = gw(t, c, leader, "/v3/kv/range", `{"key":"`+b64("/gw/")+`","range_end":"`+b64("/gw0")+`"}`)
		wantOK(t, "range", code, m)
		// Int64s are JSON strings and bytes base64, in proto field names.
		if got := field(t, m, "count"); got != "2" {
			t.Fatalf("count = %v, want \"2\"", got)
		}
		if got := field(t, m, "kvs", 1, "value"); got != b64("2") {
			t.Fatalf("kvs[1].value = %v", got)
		}
		if _, ok := field(t, m, "kvs", 0).(map[string]any)["mod_revision"]; !ok {
			t.Fatalf("kvs[0] lacks mod_revision: %v", m)
		}
		code, m = gw(t, c, f, "/v3/kv/txn", `{"compare":[{"key":"`+b64("/gw/a")+`","result":"EQUAL","target":"VALUE","value":"`+b64("1")+`"}],`+
			`"success":[{"request_put":{"key":"`+b64("/gw/a")+`","value":"`+b64("3")+`"}}]}`)
		wantOK(t, "txn", code, m)
		if field(t, m, "succeeded") != true {
			t.Fatalf("txn did not succeed: %v", m)
		}
		code, m = gw(t, c, f, "/v3/kv/deleterange", `{"key":"`+b64("/gw/b")+`"}`)
		wantOK(t, "deleterange", code, m)
		if field(t, m, "deleted") != "1" {
			t.Fatalf("deleterange: %v", m)
		}
		code, m = gw(t, c, f, "/v3/kv/range", `{"key":"`+b64("/gw/a")+`","serializable":true}`)
		wantOK(t, "serializable range", code, m)
	})

	t.Run("lease", func(t *testing.T) {
		code, m := gw(t, c, f, "/v3/lease/grant", `{"TTL":30}`)
		wantOK(t, "grant", code, m)
		id, ok := field(t, m, "ID").(string)
		if !ok || id == "" || field(t, m, "TTL") != "30" {
			t.Fatalf("grant: %v", m)
		}
		code, m = gw(t, c, f, "/v3/kv/put", `{"key":"`+b64("/gw/leased")+`","value":"`+b64("x")+`","lease":"`+id+`"}`)
		wantOK(t, "put with lease", code, m)
		// The keep-alive route is a stream: one JSON object per answer.
		code, m = gw(t, c, f, "/v3/lease/keepalive", `{"ID":"`+id+`"}`)
		if code != http.StatusOK || field(t, m, "result", "ID") != id || field(t, m, "result", "TTL") != "30" {
			t.Fatalf("keepalive: %d %v", code, m)
		}
		code, m = gw(t, c, f, "/v3/lease/timetolive", `{"ID":"`+id+`","keys":true}`)
		wantOK(t, "timetolive", code, m)
		if field(t, m, "keys", 0) != b64("/gw/leased") {
			t.Fatalf("timetolive keys: %v", m)
		}
		code, m = gw(t, c, f, "/v3/lease/leases", `{}`)
		wantOK(t, "leases", code, m)
		if field(t, m, "leases", 0, "ID") != id {
			t.Fatalf("leases: %v", m)
		}
		code, m = gw(t, c, f, "/v3/lease/revoke", `{"ID":"`+id+`"}`)
		wantOK(t, "revoke", code, m)
		code, m = gw(t, c, f, "/v3/kv/range", `{"key":"`+b64("/gw/leased")+`"}`)
		wantOK(t, "range after revoke", code, m)
		if m["kvs"] != nil {
			t.Fatalf("the revoked lease's key is still there: %v", m)
		}
	})

	t.Run("cluster and maintenance", func(t *testing.T) {
		code, m := gw(t, c, f, "/v3/cluster/member/list", `{}`)
		wantOK(t, "member list", code, m)
		if ms, _ := m["members"].([]any); len(ms) != 3 || field(t, ms[0], "clientURLs", 0) == nil {
			t.Fatalf("member list: %v", m)
		}
		code, m = gw(t, c, f, "/v3/maintenance/status", `{}`)
		wantOK(t, "status", code, m)
		if field(t, m, "version") != transport.APIVersion || field(t, m, "leader") == nil {
			t.Fatalf("status: %v", m)
		}
		code, m = gw(t, c, f, "/v3/maintenance/hashkv", `{}`)
		wantOK(t, "hashkv", code, m)
		if field(t, m, "hash") == nil || field(t, m, "hash_revision") == nil {
			t.Fatalf("hashkv: %v", m)
		}
	})

	t.Run("errors", func(t *testing.T) {
		cases := []struct {
			name, path, body string
			status           int
			code             float64
			message          string
		}{
			{"bad JSON", "/v3/kv/range", `{"key":`, http.StatusBadRequest, 3, ""},
			{"bad base64", "/v3/kv/range", `{"key":"%%%"}`, http.StatusBadRequest, 3, ""},
			{"empty key", "/v3/kv/put", `{"value":"` + b64("v") + `"}`, http.StatusBadRequest, 3, "etcdserver: key is not provided"},
			{"unknown lease", "/v3/lease/revoke", `{"ID":"12345"}`, http.StatusNotFound, 5, "etcdserver: requested lease not found"},
			{"future revision", "/v3/kv/range", `{"key":"` + b64("/gw/a") + `","revision":"1000000"}`, http.StatusBadRequest, 11, "etcdserver: mvcc: required revision is a future revision"},
		}
		for _, tc := range cases {
			code, m := gw(t, c, f, tc.path, tc.body)
			if code != tc.status || m["code"] != tc.code {
				t.Errorf("%s: status %d body %v, want status %d code %v", tc.name, code, m, tc.status, tc.code)
				continue
			}
			if tc.message != "" && m["message"] != tc.message {
				t.Errorf("%s: message %q, want %q", tc.name, m["message"], tc.message)
			}
		}
		// A compacted revision, as etcd says it.
		ctx := ctxT(t)
		cli := c.Client(f)
		p, err := cli.Put(ctx, "/gw/compact", "1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, "/gw/compact", "2"); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, p.Header.Revision+1); err != nil {
			t.Fatal(err)
		}
		code, m := gw(t, c, f, "/v3/kv/range", `{"key":"`+b64("/gw/compact")+`","revision":"`+jsonInt(p.Header.Revision)+`"}`)
		if code != http.StatusBadRequest || m["code"] != float64(11) || m["message"] != "etcdserver: mvcc: required revision has been compacted" {
			t.Fatalf("compacted: %d %v", code, m)
		}
	})
}

func jsonInt(v int64) string { b, _ := json.Marshal(v); return string(b) }

// TestGatewayWatchStreams: a watch through the gateway answers as a stream
// of JSON objects and keeps delivering after the gateway has forwarded the
// request body (a half-close of the gRPC stream); when the HTTP client goes
// away, the watcher goes too.
func TestGatewayWatchStreams(t *testing.T) {
	c := membertest.New(t, 3)
	leader := c.WaitLeader()
	f := follower(c, leader)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.ClientURL(f)+"/v3/watch",
		strings.NewReader(`{"create_request":{"key":"`+b64("/gw/w")+`","prev_kv":true}}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan map[string]any)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
	}()
	next := func() map[string]any {
		t.Helper()
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatal("the watch stream ended")
			}
			return m
		case <-ctx.Done():
			t.Fatal("no watch answer in time")
		}
		return nil
	}
	if m := next(); field(t, m, "result", "created") != true {
		t.Fatalf("first answer %v, want created", m)
	}
	cli := c.Client(leader)
	for _, v := range []string{"1", "2"} {
		if _, err := cli.Put(ctx, "/gw/w", v); err != nil {
			t.Fatal(err)
		}
		m := next()
		if field(t, m, "result", "events", 0, "kv", "value") != b64(v) {
			t.Fatalf("event %v, want value %s", m, v)
		}
	}
	store := c.Members[f].Node().Store()
	if n := store.WatcherCount(); n != 1 {
		t.Fatalf("%d watchers on the member, want 1", n)
	}
	cancel()
	resp.Body.Close()
	membertest.Eventually(t, 10*time.Second, func() bool { return store.WatcherCount() == 0 }, "the watcher outlived its HTTP client")
}

// TestWatchSurvivesHalfClose: a gRPC client that closes its send side after
// creating a watch still hears events, as from etcd, and the watcher ends
// with the connection (TestGatewayWatchStreams covers a cancelled stream).
func TestWatchSurvivesHalfClose(t *testing.T) {
	c := membertest.New(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Endpoint(0)}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	stream, err := pb.NewWatchClient(cli.ActiveConnection()).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{
		CreateRequest: &pb.WatchCreateRequest{Key: []byte("/hc")}}}); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || !r.Created {
		t.Fatalf("create: %v %v", r, err)
	}
	if _, err := cli.Put(ctx, "/hc", "v"); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatalf("after half-close the stream ended: %v", err)
	}
	if len(r.Events) != 1 || string(r.Events[0].Kv.Value) != "v" {
		t.Fatalf("event %v", r)
	}
	store := c.Members[0].Node().Store()
	cli.Close()
	membertest.Eventually(t, 10*time.Second, func() bool { return store.WatcherCount() == 0 }, "the watcher outlived its connection")
}

// TestWatchProgressNotifyInterval: the operator's interval, not etcd's
// 10-minute default, paces progress notifications.
func TestWatchProgressNotifyInterval(t *testing.T) {
	c := membertest.New(t, 1, membertest.WithConfig(func(_ int, cfg *member.Config) {
		cfg.WatchProgressNotify = 200 * time.Millisecond
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli := c.Client(0)
	put, err := cli.Put(ctx, "/pn", "v")
	if err != nil {
		t.Fatal(err)
	}
	wch := cli.Watch(ctx, "/pn", clientv3.WithProgressNotify(), clientv3.WithRev(put.Header.Revision+1))
	start := time.Now()
	for n := 0; n < 2; {
		select {
		case wr, ok := <-wch:
			if !ok {
				t.Fatal("watch ended")
			}
			if wr.IsProgressNotify() {
				if wr.Header.Revision != put.Header.Revision {
					t.Fatalf("progress at revision %d, want %d", wr.Header.Revision, put.Header.Revision)
				}
				n++
			}
		case <-ctx.Done():
			t.Fatalf("fewer than 2 progress notifications in %v", time.Since(start))
		}
	}
}

// TestWatchRequireLeader: a watch opened with clientv3.WithRequireLeader (as
// the Kubernetes API server opens its watches) ends with ErrNoLeader once
// its member has lost the leader, as on etcd, instead of staying silent on
// a member cut off from the cluster.
func TestWatchRequireLeader(t *testing.T) {
	c := membertest.New(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := c.WaitLeader()
	f := follower(c, leader)
	cli := c.Client(f)
	wch := cli.Watch(clientv3.WithRequireLeader(ctx), "/rl", clientv3.WithCreatedNotify())
	if wr := <-wch; !wr.Created {
		t.Fatalf("first answer %+v, want created", wr)
	}
	plain := cli.Watch(ctx, "/rl", clientv3.WithCreatedNotify())
	<-plain
	for i := range c.Members {
		if i != f {
			c.Stop(i)
		}
	}
	select {
	case wr := <-wch:
		if !errors.Is(wr.Err(), rpctypes.ErrNoLeader) {
			t.Fatalf("watch answered %v (err %v), want %v", wr, wr.Err(), rpctypes.ErrNoLeader)
		}
	case <-ctx.Done():
		st := c.Members[f].Node().Raft().Stats()
		id, _ := c.Members[f].Node().Leader()
		t.Fatalf("the watch that requires a leader outlived the leader (the member names leader %x, raft state %s, last contact %s)", id, st["state"], st["last_contact"])
	}
	select {
	case wr := <-plain:
		t.Fatalf("a watch without WithRequireLeader ended too: %+v", wr)
	default:
	}
}
