package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/corenode/corenode/client/election"
)

var update = flag.Bool("update", false, "rewrite testdata/rbac-guide.golden from this run (run it against etcd 3.6: "+binaryEnv+"=/path/to/etcd)")

// rbacGuide is etcd's role-based access control guide, command by command,
// as an operator types it, with a service role on /svc/a/.
var rbacGuide = []struct {
	stdin string
	args  string
}{
	{"", "role add svc-a"},
	{"", "role grant-permission svc-a readwrite /svc/a/ --prefix"},
	{"", "role grant-permission svc-a read /cfg"},
	{"", "role get svc-a"},
	{"", "role revoke-permission svc-a /cfg"},
	{"", "role get svc-a"},
	{"", "user add alice:pw"},
	{"", "user grant-role alice svc-a"},
	{"", "user get alice"},
	{"", "user add root:rootpw"},
	{"", "user grant-role root root"},
	{"", "auth enable"},
	{"", "put /svc/a/k v"},
	{"", "--user alice:pw put /svc/a/k v"},
	{"", "--user alice:pw get /svc/a/k"},
	{"", "--user alice:pw put /svc/b/k v"},
	{"", "--user alice:pw get /svc/b/k"},
	{"", "--user alice:pw get /svc/a/ --prefix --keys-only"},
	{"", "--user alice:pw get /svc/ --prefix"},
	{"", "--user alice:wrong get /svc/a/k"},
	{"", "--user root:rootpw user list"},
	{"", "--user root:rootpw role list"},
	{"", "--user root:rootpw role get root"},
	{"", "--user alice:pw user list"},
	{"", "--user alice:pw user get alice"},
	{"", "--user alice:pw role get svc-a"},
	{"pw2\n", "--user alice:pw user passwd alice --interactive=false"},
	{"pw2\n", "--user root:rootpw user passwd alice --interactive=false"},
	{"", "--user alice:pw get /svc/a/k"},
	{"", "--user alice:pw2 get /svc/a/k --print-value-only"},
	{"", "--user root:rootpw user revoke-role alice svc-a"},
	{"", "--user alice:pw2 get /svc/a/k"},
	{"", "--user root:rootpw user grant-role alice svc-a"},
	{"", "--user root:rootpw auth disable"},
	{"", "get /svc/a/k --print-value-only"},
	{"", "user delete alice"},
	{"", "role delete svc-a"},
	{"", "user list"},
}

// TestRBACGuide follows etcd's RBAC guide with etcdctl and compares each
// command's output and exit status with etcd 3.6's (testdata/
// rbac-guide.golden, made by this test against etcd v3.6.16 with
// -update). Then a client with the /svc/a/ role elects a leader there and
// is refused a read or a watch of /svc/b/.
func TestRBACGuide(t *testing.T) {
	requireEtcdctl(t)
	c := startCluster(t, buildBinary(t))
	t.Cleanup(c.killAll)
	eps := c.endpoints()
	var transcript strings.Builder
	for _, step := range rbacGuide {
		r := ctl(eps, step.stdin, strings.Fields(step.args)...)
		fmt.Fprintf(&transcript, "$ etcdctl %s\n%s", step.args, r.stdout)
		for _, line := range strings.Split(r.stderr, "\n") {
			// etcdctl 3.4 logs each retry as a JSON line; only what it
			// tells the operator is compared.
			if strings.HasPrefix(line, "Error:") {
				fmt.Fprintln(&transcript, line)
			}
		}
		code := 0
		var exit interface{ ExitCode() int }
		if errors.As(r.err, &exit) {
			code = exit.ExitCode()
		} else if r.err != nil {
			t.Fatalf("etcdctl %s: %v", step.args, r)
		}
		fmt.Fprintf(&transcript, "[exit %d]\n", code)
	}
	got := transcript.String()
	const golden = "testdata/rbac-guide.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	gotSteps, wantSteps := strings.SplitAfter(got, "\n$ "), strings.SplitAfter(string(want), "\n$ ")
	for i := range max(len(gotSteps), len(wantSteps)) {
		var g, w string
		if i < len(gotSteps) {
			g = gotSteps[i]
		}
		if i < len(wantSteps) {
			w = wantSteps[i]
		}
		if g != w {
			t.Errorf("step %d differs from etcd 3.6:\ncorenode:\n%s\netcd:\n%s", i, g, w)
		}
	}

	// A service with the guide's role elects a leader under its prefix and
	// cannot read or watch another service's. The guide left root in place
	// and auth disabled.
	mustCtl(t, eps, "role", "add", "svc-a")
	mustCtl(t, eps, "role", "grant-permission", "svc-a", "readwrite", "/svc/a/", "--prefix")
	mustCtl(t, eps, "user", "add", "svc-a:pw")
	mustCtl(t, eps, "user", "grant-role", "svc-a", "svc-a")
	mustCtl(t, eps, "auth", "enable")
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Username: "svc-a", Password: "pw", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := election.Campaign(ctx, cli, "/svc/a/leader", "a-1", election.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("svc-a campaigns under its prefix: %v", err)
	}
	if _, ok := l.Leading(); !ok {
		t.Fatal("svc-a won the election but does not lead")
	}
	if got := mustCtl(t, eps, "--user", "root:rootpw", "get", "/svc/a/leader", "--prefix", "--print-value-only"); got != "a-1" {
		t.Errorf("the election key as root sees it: %q, want a-1", got)
	}
	if _, err := cli.Get(ctx, "/svc/b/k"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("svc-a reads /svc/b/: %v, want permission denied", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	resp, ok := <-cli.Watch(wctx, "/svc/b/", clientv3.WithPrefix())
	if !ok || !resp.Canceled || !strings.Contains(resp.Err().Error(), "permission denied") {
		t.Errorf("svc-a watches /svc/b/: open=%v canceled=%v err=%v, want canceled with permission denied", ok, resp.Canceled, resp.Err())
	}
	if err := l.Resign(ctx); err != nil {
		t.Errorf("resign: %v", err)
	}
}
