package etcdrelease

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corenode/corenode/internal/testenv"
)

// Release is one etcd release's binaries.
type Release struct {
	Version                string
	Etcd, Etcdctl, Etcdutl string
}

// The module each binary is built from.
var binaries = []struct{ name, pkg string }{
	{"etcd", "go.etcd.io/etcd/server/v3"},
	{"etcdctl", "go.etcd.io/etcd/etcdctl/v3"},
	{"etcdutl", "go.etcd.io/etcd/etcdutl/v3"},
}

// Build returns the binaries of release version (such as "v3.6.16"),
// building them on this machine's first call: a minute or two, and the Go
// module proxy must be reachable. Concurrent test processes wait for one
// build. A machine that cannot build them stops t through
// testenv.Unavailable: a skip on a developer's machine, a failure in CI.
func Build(t testing.TB, version string) Release {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		testenv.Unavailable(t, "etcd "+version+": no cache directory to keep its binaries in: "+err.Error())
	}
	dir := filepath.Join(cache, "corenode", "etcd-"+version)
	r := Release{Version: version, Etcd: filepath.Join(dir, "etcd"), Etcdctl: filepath.Join(dir, "etcdctl"), Etcdutl: filepath.Join(dir, "etcdutl")}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		testenv.Unavailable(t, "etcd "+version+": "+err.Error())
	}
	unlock, err := lock(filepath.Join(dir, ".lock"))
	if err != nil {
		testenv.Unavailable(t, "etcd "+version+": lock the build: "+err.Error())
	}
	defer unlock()
	var missing []string
	for _, b := range binaries {
		if _, err := os.Stat(filepath.Join(dir, b.name)); err != nil {
			missing = append(missing, b.name)
		}
	}
	if len(missing) == 0 {
		return r
	}
	start := time.Now()
	if err := build(dir, version, missing); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("could not build etcd %s (%s) from Go modules: %v", version, strings.Join(missing, ", "), err))
	}
	t.Logf("built etcd %s (%s) from Go modules into %s in %v", version, strings.Join(missing, ", "), dir, time.Since(start).Round(time.Second))
	return r
}

// build builds the named binaries of version into dir, each under a
// temporary name first, so a build cut short leaves none half-written.
func build(dir, version string, names []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	work, err := os.MkdirTemp("", "etcd-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	goCmd := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := goCmd("mod", "init", "etcd-release"); err != nil {
		return err
	}
	get := []string{"get"}
	for _, b := range binaries {
		get = append(get, b.pkg+"@"+version)
	}
	if err := goCmd(get...); err != nil {
		return err
	}
	for _, b := range binaries {
		if !slices.Contains(names, b.name) {
			continue
		}
		out := filepath.Join(dir, b.name)
		if err := goCmd("build", "-o", out+".tmp", b.pkg); err != nil {
			return err
		}
		if err := os.Rename(out+".tmp", out); err != nil {
			return err
		}
	}
	return nil
}
