package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestVersionNamesRevision: a binary built from a checkout says which
// revision (`corenode version`), next to the etcd API version it serves in
// etcd's --version format, which etcd's harnesses parse.
func TestVersionNamesRevision(t *testing.T) {
	if os.Getenv(binaryEnv) != "" {
		t.Skipf("%s names another binary; this checks corenode's own build", binaryEnv)
	}
	bin := buildBinary(t)
	head, err := exec.Command("git", "-C", repoRoot(t), "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD in the checkout: %v", err)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("corenode version: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	rev := strings.TrimSpace(string(head))
	if !strings.HasPrefix(lines[0], "corenode Version: ") || !strings.Contains(lines[0], "("+rev) {
		t.Errorf("first line %q does not name revision %s", lines[0], rev)
	}
	if len(lines) < 2 || !strings.HasPrefix(lines[1], "etcd Version: 3.") {
		t.Errorf("no etcd Version line in %q", out)
	}
}
