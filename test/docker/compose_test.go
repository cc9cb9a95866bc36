// Package docker tests the container deployment: the image deploy/build
// makes and the cluster deploy/docker-compose.yml runs, driven from the host
// with etcdctl as an operator would.
package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corenode/corenode/internal/freeport"
	"github.com/corenode/corenode/internal/testenv"
)

// compose is the Compose command on this machine: the docker plugin, or
// the standalone docker-compose.
func compose(t *testing.T) []string {
	t.Helper()
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if _, err := exec.LookPath("docker-compose"); err == nil {
		return []string{"docker-compose"}
	}
	unavailable(t, "neither `docker compose` nor docker-compose is installed")
	return nil
}

func unavailable(t *testing.T, why string) { t.Helper(); testenv.Unavailable(t, why) }

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "deploy", "docker-compose.yml")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func run(t *testing.T, timeout time.Duration, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(environ(name), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// environ is this process's environment for a child, without the caller's
// ETCDCTL_* settings for etcdctl: they would point it elsewhere, and etcdctl
// 3.4 exits when a flag the test passes shadows one of them.
func environ(name string) []string {
	if name != "etcdctl" {
		return os.Environ()
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCDCTL_") {
			env = append(env, kv)
		}
	}
	return env
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	// Outside the ephemeral range: a stopped container's ports must still
	// be free when it starts again.
	ports, err := freeport.Ports("127.0.0.1", n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

type endpointStatus struct {
	Endpoint string
	Status   struct {
		Header struct {
			MemberID uint64 `json:"member_id"`
		}
		Leader uint64
	}
}

// TestComposeCluster brings the compose cluster up, uses it from the host,
// kills the leader's container, and checks that the cluster goes on and the
// restarted container rejoins with its data.
func TestComposeCluster(t *testing.T) {
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		unavailable(t, strings.TrimSpace(fmt.Sprintf("docker is not available (`docker info`): %v\n%s", err, out)))
	}
	if _, err := exec.LookPath("etcdctl"); err != nil {
		unavailable(t, "etcdctl is not on PATH (scripts/test installs Debian's etcd-client)")
	}
	dc := compose(t)
	root := repoRoot(t)
	image := fmt.Sprintf("corenode:test-%d", os.Getpid())
	if out, err := run(t, 5*time.Minute, nil, filepath.Join(root, "deploy", "build"), image); err != nil {
		t.Fatalf("deploy/build: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", image).Run() })

	ports := freePorts(t, 4)
	project := fmt.Sprintf("corenodetest%d", os.Getpid())
	env := []string{"CORENODE_IMAGE=" + image}
	var eps []string
	for i, p := range ports {
		env = append(env, fmt.Sprintf("M%d_CLIENT_PORT=%d", i+1, p))
		eps = append(eps, fmt.Sprintf("127.0.0.1:%d", p))
	}
	joiner := eps[3]
	eps = eps[:3]
	// Both files every time, as docker-compose.join.yml says: compose
	// knows m4 only then (down included).
	composeArgs := func(args ...string) []string {
		return append(append(dc[1:], "-p", project, "-f", filepath.Join(root, "deploy", "docker-compose.yml"),
			"-f", filepath.Join(root, "deploy", "docker-compose.join.yml")), args...)
	}
	dockerCompose := func(timeout time.Duration, args ...string) (string, error) {
		return run(t, timeout, env, dc[0], composeArgs(args...)...)
	}
	// The 5-member variant is only rendered, not started: it is the same
	// image and flags, and a second cluster would double the test's time.
	for _, files := range [][]string{{"docker-compose.yml"}, {"docker-compose.yml", "docker-compose.5.yml"}, {"docker-compose.yml", "docker-compose.join.yml"}} {
		args := append([]string{}, dc[1:]...)
		for _, f := range files {
			args = append(args, "-f", filepath.Join(root, "deploy", f))
		}
		if out, err := run(t, time.Minute, env, dc[0], append(args, "config", "-q")...); err != nil {
			t.Fatalf("compose config %v: %v\n%s", files, err, out)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := dockerCompose(time.Minute, "logs", "--no-color", "--tail", "50")
			t.Logf("compose logs:\n%s", out)
		}
		if out, err := dockerCompose(2*time.Minute, "down", "-v", "--remove-orphans"); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
	})
	if out, err := dockerCompose(2*time.Minute, "up", "-d", "m1", "m2", "m3"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}
	containers := map[string]string{} // client endpoint -> container
	for i, ep := range eps {
		out, err := dockerCompose(time.Minute, "ps", "-q", fmt.Sprintf("m%d", i+1))
		if err != nil || strings.TrimSpace(out) == "" {
			t.Fatalf("compose ps m%d: %v %s", i+1, err, out)
		}
		containers[ep] = strings.TrimSpace(out)
	}
	waitHealthy(t, containers, 60*time.Second)

	ctl := func(eps []string, args ...string) (string, error) {
		args = append([]string{"--endpoints", strings.Join(eps, ","), "--command-timeout=3s"}, args...)
		return run(t, 20*time.Second, []string{"ETCDCTL_API=3"}, "etcdctl", args...)
	}
	// Writes may fail while an election runs; an operator's client retries.
	putEventually := func(eps []string, key, value string) time.Duration {
		t.Helper()
		start := time.Now()
		var out string
		var err error
		for time.Since(start) < 20*time.Second {
			if out, err = ctl(eps, "put", key, value); err == nil {
				return time.Since(start)
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("put %s: %v\n%s", key, err, out)
		return 0
	}
	putEventually(eps, "/compose/before", "1")

	out, err := ctl(eps, "endpoint", "status", "-w", "json")
	if err != nil {
		t.Fatalf("endpoint status: %v\n%s", err, out)
	}
	var st []endpointStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("endpoint status JSON: %v\n%s", err, out)
	}
	var leader string
	for _, s := range st {
		if s.Status.Leader != 0 && s.Status.Leader == s.Status.Header.MemberID {
			leader = s.Endpoint
		}
	}
	if leader == "" {
		t.Fatalf("no endpoint is the leader:\n%s", out)
	}
	var survivors []string
	for _, ep := range eps {
		if ep != leader {
			survivors = append(survivors, ep)
		}
	}

	if out, err := run(t, time.Minute, nil, "docker", "kill", containers[leader]); err != nil {
		t.Fatalf("docker kill: %v\n%s", err, out)
	}
	took := putEventually(survivors, "/compose/during", "2")
	t.Logf("first write through the survivors %v after docker kill of the leader", took.Round(time.Millisecond))
	// restart: unless-stopped leaves a killed container down; if Docker ever
	// restarted it, the write above would not prove the cluster went on
	// without it, nor the read below that it caught up.
	if out, err := run(t, 10*time.Second, nil, "docker", "inspect", "-f", "{{.State.Running}}", containers[leader]); err != nil || strings.TrimSpace(out) != "false" {
		t.Fatalf("killed container %s should still be down: running=%s %v", containers[leader], strings.TrimSpace(out), err)
	}

	if out, err := run(t, time.Minute, nil, "docker", "start", containers[leader]); err != nil {
		t.Fatalf("docker start: %v\n%s", err, out)
	}
	waitHealthy(t, map[string]string{leader: containers[leader]}, 60*time.Second)
	// Serializable: answered from the restarted member's own data.
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := ctl([]string{leader}, "get", "/compose/", "--prefix", "--consistency=s")
		if err == nil && out == "/compose/before\n1\n/compose/during\n2\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted member's own data: %v\n%q", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	putEventually(eps, "/compose/after", "3")

	// docker-compose.join.yml's recipe: add m4, start it, and every member
	// answers etcdctl's --cluster commands from the host at what it
	// advertises.
	// The strict reconfiguration check refuses an add for 5 s after a
	// member (the restarted one) reconnected, with "unhealthy cluster".
	for deadline := time.Now().Add(20 * time.Second); ; {
		out, err = ctl(eps, "member", "add", "m4", "--peer-urls=http://m4:2380")
		if err == nil {
			break
		}
		if !strings.Contains(out, "unhealthy cluster") || time.Now().After(deadline) {
			t.Fatalf("member add m4: %v\n%s", err, out)
		}
		time.Sleep(time.Second)
	}
	if out, err := dockerCompose(2*time.Minute, "up", "-d", "m4"); err != nil {
		t.Fatalf("compose up m4: %v\n%s", err, out)
	}
	out, err = dockerCompose(time.Minute, "ps", "-q", "m4")
	if err != nil || strings.TrimSpace(out) == "" {
		t.Fatalf("compose ps m4: %v %s", err, out)
	}
	waitHealthy(t, map[string]string{joiner: strings.TrimSpace(out)}, 60*time.Second)
	for _, cmd := range [][]string{{"endpoint", "status", "--cluster"}, {"endpoint", "hashkv", "--cluster"}} {
		out, err := ctl(eps[:1], cmd...)
		if err != nil || strings.Count(strings.TrimSpace(out), "\n") != 3 || !strings.Contains(out, "http://"+joiner) {
			t.Fatalf("etcdctl %s after m4 joined: %v\n%s", strings.Join(cmd, " "), err, out)
		}
	}
	putEventually([]string{joiner}, "/compose/m4", "4")
}

// waitHealthy waits for Docker's health check (`corenode health` inside the
// container) to pass on every container.
func waitHealthy(t *testing.T, containers map[string]string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for ep, id := range containers {
		for {
			out, err := run(t, 10*time.Second, nil, "docker", "inspect", "-f", "{{.State.Health.Status}}", id)
			if err == nil && strings.TrimSpace(out) == "healthy" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("container %s (%s) not healthy after %v: %v %s", id, ep, timeout, err, out)
			}
			time.Sleep(time.Second)
		}
	}
}
