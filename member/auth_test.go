package member_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"

	"github.com/corenode/corenode/internal/authmatrix"
	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// cheapBcrypt keeps password hashing fast under the race detector.
var cheapBcrypt = membertest.WithConfig(func(_ int, cfg *member.Config) { cfg.BcryptCost = 4 })

// loginAs is a client of cfg's endpoints that logs in as user.
func loginAs(t *testing.T, cfg clientv3.Config, user, password string) *clientv3.Client {
	t.Helper()
	cfg.Username, cfg.Password = user, password
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("log in as %s: %v", user, err)
	}
	return cli
}

// matrixDifferences are the rows where corenode answers other than etcd
// 3.6 for a reason that is not auth's, with corenode's answer: none now.
var matrixDifferences = map[string]string{}

// TestAuthMatrixMatchesEtcd runs every RPC as four callers (no
// credentials, a user with no role, a user with readwrite on /svc/a/, and
// root) through a follower, so forwarded writes and reads carry the
// caller, and compares each answer with etcd 3.6's (testdata/
// authmatrix.golden, made by test/authmatrix against etcd v3.6.16).
// It runs with simple tokens and with JWTs: etcd answers alike with
// either.
func TestAuthMatrixMatchesEtcd(t *testing.T) {
	t.Run("simple", func(t *testing.T) { testAuthMatrix(t) })
	t.Run("jwt", func(t *testing.T) { testAuthMatrix(t, membertest.WithJWT(t)) })
}

// authCluster starts 3 members with opts and the matrix's users, roles and
// auth enabled (authmatrix.Setup), and returns the cluster, its leader and
// a client config for every endpoint.
func authCluster(t *testing.T, opts ...membertest.Option) (*membertest.Cluster, int, clientv3.Config) {
	t.Helper()
	c := membertest.New(t, 3, append(opts, cheapBcrypt)...)
	t.Cleanup(c.Close)
	leader := c.WaitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if _, _, err := authmatrix.Setup(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return c, leader, cfg
}

func testAuthMatrix(t *testing.T, opts ...membertest.Option) {
	c := membertest.New(t, 3, append(opts, cheapBcrypt)...)
	defer c.Close()
	leader := c.WaitLeader()
	follower := (leader + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := clientv3.Config{Endpoints: []string{c.Endpoint(follower)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	la, lb, err := authmatrix.Setup(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := authmatrix.Run(ctx, cfg, la, lb)
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile("testdata/authmatrix.golden")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(golden)), "\n")[1:] {
		name, outcomes, _ := strings.Cut(line, " | ")
		want[name] = outcomes
	}
	if len(want) != len(rows) {
		t.Errorf("golden has %d rows, the matrix %d: remake it (see test/authmatrix)", len(want), len(rows))
	}
	for _, r := range rows {
		got := strings.Join(r.Outcomes, " | ")
		w, ok := matrixDifferences[r.Name]
		if !ok {
			w = want[r.Name]
		}
		if got != w {
			t.Errorf("%s:\n  corenode: %s\n  etcd:     %s", r.Name, got, w)
		}
	}
}

// TestAuthSurvivesSnapshotAndRestart: users, roles and the enabled flag are
// replicated state, carried by snapshots and a whole-cluster restart; a
// member that joins from a snapshot enforces them too.
func TestAuthSurvivesSnapshotAndRestart(t *testing.T) {
	c, _, cfg := authCluster(t, membertest.WithConfig(func(_ int, cfg *member.Config) { cfg.SnapshotCount = 20 }))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rcli := loginAs(t, cfg, "root", "rootpw")
	defer rcli.Close()
	// Enough writes for every member to snapshot and truncate its log past
	// the auth entries, so only a snapshot holds them.
	for i := 0; i < 60; i++ {
		if _, err := rcli.Put(ctx, "/svc/a/fill", "x"); err != nil {
			t.Fatal(err)
		}
	}
	rcli.Close()
	for i := range c.Members {
		c.Stop(i)
	}
	for i := range c.Members {
		c.Restart(i)
	}
	c.WaitLeader()
	acli := loginAs(t, cfg, "alice", "pw")
	defer acli.Close()
	if _, err := acli.Put(ctx, "/svc/a/after", "v"); err != nil {
		t.Fatalf("alice writes her prefix after the restart: %v", err)
	}
	if _, err := acli.Get(ctx, "/svc/b/k"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("alice reads /svc/b/ after the restart: %v, want permission denied", err)
	}
	anon, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.Get(ctx, "/svc/a/k"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Fatalf("no credentials after the restart: %v, want user name is empty", err)
	}
}

// TestAuthTokenInvalidation: a token stops working when its user's
// password changes and when auth is disabled and enabled again, as in etcd;
// a revoked permission applies to a token issued before the revocation.
func TestAuthTokenInvalidation(t *testing.T) {
	c, leader, _ := authCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := c.Client((leader + 1) % 3) // a raw client: the token is ours to send
	login := func(name, password string) context.Context {
		t.Helper()
		resp, err := cli.Auth.Authenticate(ctx, name, password)
		if err != nil {
			t.Fatalf("authenticate %s: %v", name, err)
		}
		c.CatchUp(leader) // every member has applied the token's entry
		return metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, resp.Token)
	}
	kv := pb.NewKVClient(cli.ActiveConnection())
	get := func(ctx context.Context, key string) error {
		_, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte(key)})
		return err
	}
	asRoot := login("root", "rootpw")
	asAlice := login("alice", "pw")
	if err := get(asAlice, "/svc/a/k"); err != nil {
		t.Fatalf("alice's token: %v", err)
	}
	if err := get(metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, "forged.1"), "/svc/a/k"); !errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken) {
		t.Fatalf("a forged token: %v, want invalid auth token", err)
	}

	// A revoked permission holds against the old token at once.
	authc := pb.NewAuthClient(cli.ActiveConnection())
	if _, err := authc.RoleRevokePermission(asRoot, &pb.AuthRoleRevokePermissionRequest{Role: "svc-a", Key: []byte("/svc/a/"), RangeEnd: []byte("/svc/a0")}); err != nil {
		t.Fatal(err)
	}
	c.CatchUp(leader)
	if err := get(asAlice, "/svc/a/k"); !errors.Is(err, rpctypes.ErrGRPCPermissionDenied) {
		t.Fatalf("after the revocation: %v, want permission denied", err)
	}
	if _, err := authc.RoleGrantPermission(asRoot, &pb.AuthRoleGrantPermissionRequest{Name: "svc-a",
		Perm: &authpb.Permission{Key: []byte("/svc/a/"), RangeEnd: []byte("/svc/a0"), PermType: authpb.READWRITE}}); err != nil {
		t.Fatal(err)
	}

	// A password change ends the user's tokens.
	if _, err := authc.UserChangePassword(asRoot, &pb.AuthUserChangePasswordRequest{Name: "alice", Password: "new"}); err != nil {
		t.Fatal(err)
	}
	c.CatchUp(leader)
	if err := get(asAlice, "/svc/a/k"); !errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken) {
		t.Fatalf("after the password change: %v, want invalid auth token", err)
	}
	if _, err := cli.Auth.Authenticate(ctx, "alice", "pw"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Fatalf("the old password: %v, want authentication failed", err)
	}
	asAlice = login("alice", "new")

	// Disable and enable again: every token issued before is gone.
	if _, err := authc.AuthDisable(asRoot, &pb.AuthDisableRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	c.CatchUp(leader)
	for who, ctx := range map[string]context.Context{"root": asRoot, "alice": asAlice} {
		if err := get(ctx, "/svc/a/k"); !errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken) {
			t.Errorf("%s's token after disable and enable: %v, want invalid auth token", who, err)
		}
	}
}

// TestJWTTokens: with --auth-token jwt a token is verified, not looked
// up, so it outlives a whole-cluster restart (a simple token does not);
// it carries the auth revision it was issued at, so any auth change
// retires it with etcd's "revision in header is old", which clientv3
// answers by logging in again.
func TestJWTTokens(t *testing.T) {
	c, leader, cfg := authCluster(t, membertest.WithJWT(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := c.Client(leader)
	resp, err := cli.Auth.Authenticate(ctx, "alice", "pw")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(resp.Token, ".") != 2 {
		t.Fatalf("token %q is not a JWT", resp.Token)
	}
	cli.Close()
	for i := range c.Members {
		c.Stop(i)
	}
	for i := range c.Members {
		c.Restart(i)
	}
	leader = c.WaitLeader()
	// A restarted member's state is its snapshot's until it hears of the
	// commits after it; until then it takes auth for disabled and forwards
	// the put without alice's name (a CI flake; the gap is in
	// operations.md, "What happens when things fail").
	if err := c.Members[leader].Node().ReadBarrier(ctx); err != nil {
		t.Fatal(err)
	}
	c.CatchUp(leader)
	other := c.Client((leader + 1) % 3)
	defer other.Close()
	asAlice := metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, resp.Token)
	kv := pb.NewKVClient(other.ActiveConnection())
	if _, err := kv.Put(asAlice, &pb.PutRequest{Key: []byte("/svc/a/k"), Value: []byte("v")}); err != nil {
		t.Fatalf("alice's token after a whole-cluster restart: %v", err)
	}
	if _, err := kv.Range(asAlice, &pb.RangeRequest{Key: []byte("/svc/b/k")}); !errors.Is(err, rpctypes.ErrGRPCPermissionDenied) {
		t.Fatalf("alice reads /svc/b/: %v, want permission denied", err)
	}

	// A client that logs in itself carries on across an auth change.
	acli := loginAs(t, cfg, "alice", "pw")
	defer acli.Close()
	if _, err := acli.Put(ctx, "/svc/a/k", "1"); err != nil {
		t.Fatal(err)
	}
	rcli := loginAs(t, cfg, "root", "rootpw")
	defer rcli.Close()
	if _, err := rcli.UserAdd(ctx, "carol", "pw"); err != nil {
		t.Fatal(err)
	}
	c.CatchUp(leader)
	if _, err := kv.Range(asAlice, &pb.RangeRequest{Key: []byte("/svc/a/k")}); !errors.Is(err, rpctypes.ErrGRPCAuthOldRevision) {
		t.Fatalf("a token from before an auth change: %v, want revision in header is old", err)
	}
	if _, err := acli.Put(ctx, "/svc/a/k", "2"); err != nil {
		t.Fatalf("clientv3 after an auth change: %v", err)
	}
}

// TestGatewayAuth: the JSON gateway authenticates and carries the token in
// the Authorization header, as etcd's does (Patroni's way in).
func TestGatewayAuth(t *testing.T) {
	c := membertest.New(t, 1, cheapBcrypt)
	defer c.Close()
	c.WaitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := c.Client()
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	post := func(path, token, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.ClientURL(0)+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, m
	}
	if code, m := post("/v3/kv/range", "", `{"key":"`+b64("k")+`"}`); code == http.StatusOK || m["message"] != "etcdserver: user name is empty" {
		t.Fatalf("range without a token: %d %v", code, m)
	}
	if code, m := post("/v3/auth/authenticate", "", `{"name":"root","password":"bad"}`); code == http.StatusOK || m["message"] != "etcdserver: authentication failed, invalid user ID or password" {
		t.Fatalf("a wrong password: %d %v", code, m)
	}
	code, m := post("/v3/auth/authenticate", "", `{"name":"root","password":"rootpw"}`)
	token, _ := m["token"].(string)
	if code != http.StatusOK || token == "" {
		t.Fatalf("authenticate: %d %v", code, m)
	}
	code, m = post("/v3/kv/put", token, `{"key":"`+b64("k")+`","value":"`+b64("v")+`"}`)
	wantOK(t, "put with the token", code, m)
	code, m = post("/v3/kv/range", "Bearer "+token, `{"key":"`+b64("k")+`"}`)
	wantOK(t, "range with the token", code, m)
	if field(t, m, "kvs", 0, "value") != b64("v") {
		t.Fatalf("range with the token: %v", m)
	}
}

// TestCertificateUsers: with --client-cert-auth, a client certificate's
// common name is the user of a call that carries no token, as in etcd; a
// certificate that names no user has no credentials.
func TestCertificateUsers(t *testing.T) {
	ca := membertest.NewCA(t, "cluster")
	server := ca.Issue("member", net.ParseIP("127.0.0.1"))
	info := member.TLSInfo{CertFile: server.CertFile, KeyFile: server.KeyFile, TrustedCAFile: ca.File, ClientCertAuth: true}
	c := membertest.New(t, 3, cheapBcrypt, membertest.WithTLS(info, info, ca.ClientConfig(ca.Issue("root"))))
	defer c.Close()
	leader := c.WaitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := c.Client()
	for _, step := range []func() error{
		func() error { _, err := root.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.RoleAdd(ctx, "svc-a"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "svc-a", "/svc/a/", "/svc/a0", clientv3.PermissionType(authpb.READWRITE))
			return err
		},
		func() error {
			_, err := root.UserAddWithOptions(ctx, "alice", "", &clientv3.UserAddOptions{NoPassword: true})
			return err
		},
		func() error { _, err := root.UserGrantRole(ctx, "alice", "svc-a"); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	c.CatchUp(leader)
	as := func(cn string) *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), TLS: ca.ClientConfig(ca.Issue(cn)),
			DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	if _, err := root.Put(ctx, "/svc/b/k", "v"); err != nil {
		t.Fatalf("root by its certificate: %v", err)
	}
	alice := as("alice")
	if _, err := alice.Put(ctx, "/svc/a/k", "v"); err != nil {
		t.Fatalf("alice by her certificate writes her prefix: %v", err)
	}
	if _, err := alice.Get(ctx, "/svc/b/k"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("alice by her certificate reads /svc/b/: %v, want permission denied", err)
	}
	if _, err := as("nobody").Get(ctx, "/svc/a/k"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Fatalf("a certificate naming no user: %v, want user name is empty", err)
	}
}
