package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/corenode/corenode/internal/testenv"
)

// debianPython is Debian's interpreter, which sees Debian's python3-*
// packages; a python3 earlier on PATH (pyenv, a virtualenv) may not.
const debianPython = "/usr/bin/python3"

// TestEtcd3gw drives the JSON gateway with python3-etcd3gw, a client that
// knows only etcd's HTTP/JSON API: KV, compare-and-swap, leases, a
// streaming watch and its lock recipe, across the three members.
func TestEtcd3gw(t *testing.T) {
	if err := exec.Command(debianPython, "-c", "import etcd3gw").Run(); err != nil {
		testenv.Unavailable(t, debianPython+" cannot import etcd3gw ("+err.Error()+"): install Debian's python3-etcd3gw, or run scripts/test, which does")
	}
	c := startCluster(t, buildBinary(t))
	args := []string{"testdata/etcd3gw_check.py"}
	for _, ep := range c.endpoints() {
		host, port, _ := strings.Cut(strings.TrimPrefix(ep, "http://"), ":")
		args = append(args, host, port)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, debianPython, args...).CombinedOutput()
	t.Logf("%s", strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("etcd3gw check: %v", err)
	}
}
