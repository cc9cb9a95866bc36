package cluster

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/corenode/corenode/internal/freeport"
)

// ComposeConfig says how to run the compose deployment.
type ComposeConfig struct {
	File    string // deploy/docker-compose.yml
	Members int    // 5 adds docker-compose.5.yml next to File
	// Image to run; empty: build one from the tree with Build (deploy/build)
	// under a tag of this run's own, removed on Close.
	Image  string
	Build  string
	LogDir string
	Log    *slog.Logger
}

// Compose is the deploy/docker-compose.yml cluster, under a project name of
// its own so that it never touches another engineer's containers. Faults
// are docker kill/start, pause/unpause and network disconnect/connect; the
// members share one bridge network, so only whole members can be cut off
// (no pair cuts, latency or loss without tools the scratch image lacks).
type Compose struct {
	files      []string
	project    string
	env        []string
	ports      []int
	containers []string
	network    string
	log        *slog.Logger
	logDir     string

	ownImage string // built for this run, removed on Close

	mu       sync.Mutex
	isolated map[int]bool
	closed   bool
	problems []string
}

// composeCmd finds docker-compose v1 or the compose plugin.
func composeCmd() ([]string, error) {
	if _, err := exec.LookPath("docker-compose"); err == nil {
		return []string{"docker-compose"}, nil
	}
	if err := exec.Command("docker", "compose", "version").Run(); err == nil {
		return []string{"docker", "compose"}, nil
	}
	return nil, fmt.Errorf("cluster: neither docker-compose nor the docker compose plugin is available")
}

func (c *Compose) compose(ctx context.Context, args ...string) ([]byte, error) {
	base, err := composeCmd()
	if err != nil {
		return nil, err
	}
	full := append([]string{}, base[1:]...)
	full = append(full, "-p", c.project)
	for _, f := range c.files {
		full = append(full, "-f", f)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, base[0], full...)
	cmd.Env = append(envWithout("CORENODE_", "M1_", "M2_", "M3_", "M4_", "M5_"), c.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("cluster: %s %s: %w\n%s", base[0], strings.Join(full, " "), err, out)
	}
	return out, nil
}

func docker(ctx context.Context, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("cluster: docker %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// StartCompose brings the deployment up on free client ports.
func StartCompose(ctx context.Context, cfg ComposeConfig) (*Compose, error) {
	if _, err := os.Stat(cfg.File); err != nil {
		return nil, fmt.Errorf("cluster: compose file: %w", err)
	}
	c := &Compose{
		files:    []string{cfg.File},
		project:  fmt.Sprintf("jepsenlite%d", os.Getpid()),
		log:      cfg.Log,
		logDir:   cfg.LogDir,
		isolated: map[int]bool{},
	}
	if cfg.Members == 5 {
		c.files = append(c.files, filepath.Join(filepath.Dir(cfg.File), "docker-compose.5.yml"))
	}
	// Outside the ephemeral range, so that a stopped container's published
	// port is still free when it starts again.
	ports, err := freeport.Ports("127.0.0.1", cfg.Members)
	if err != nil {
		return nil, fmt.Errorf("cluster: client ports: %w", err)
	}
	c.ports = ports
	for i, port := range ports {
		c.env = append(c.env, fmt.Sprintf("M%d_CLIENT_PORT=%d", i+1, port))
	}
	c.env = append(c.env, "CORENODE_CLUSTER_TOKEN="+c.project)
	uctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	image := cfg.Image
	if image == "" {
		// A tag of our own: corenode:dev may be someone else's build.
		image = "corenode:" + c.project
		cmd := exec.CommandContext(uctx, cfg.Build, image)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("cluster: %s %s: %w\n%s", cfg.Build, image, err, out)
		}
		c.ownImage = image
	}
	c.env = append(c.env, "CORENODE_IMAGE="+image)
	if _, err := c.compose(uctx, "up", "-d"); err != nil {
		c.Close()
		return nil, err
	}
	for i := range cfg.Members {
		out, err := c.compose(uctx, "ps", "-q", fmt.Sprintf("m%d", i+1))
		if err != nil {
			c.Close()
			return nil, err
		}
		id := strings.TrimSpace(string(out))
		if id == "" {
			c.Close()
			return nil, fmt.Errorf("cluster: no container for m%d in project %s", i+1, c.project)
		}
		c.containers = append(c.containers, id)
	}
	out, err := docker(uctx, "inspect", "-f", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}", c.containers[0])
	if err != nil {
		c.Close()
		return nil, err
	}
	nets := strings.Fields(string(out))
	if len(nets) != 1 {
		c.Close()
		return nil, fmt.Errorf("cluster: m1 is on networks %v; expected exactly one", nets)
	}
	c.network = nets[0]
	return c, nil
}

func (c *Compose) Size() int             { return len(c.containers) }
func (c *Compose) Name(i int) string     { return fmt.Sprintf("m%d", i+1) }
func (c *Compose) Endpoint(i int) string { return fmt.Sprintf("127.0.0.1:%d", c.ports[i]) }
func (c *Compose) Caps() Caps            { return Caps{} }

// ClockFile is "": the compose file passes no test clock to the members.
func (c *Compose) ClockFile(i int) string { return "" }

func (c *Compose) Kill(ctx context.Context, i int) error {
	_, err := docker(ctx, "kill", "--signal", "KILL", c.containers[i])
	return err
}

func (c *Compose) Start(ctx context.Context, i int) error {
	_, err := docker(ctx, "start", c.containers[i])
	return err
}

func (c *Compose) Pause(ctx context.Context, i int) error {
	_, err := docker(ctx, "pause", c.containers[i])
	return err
}

func (c *Compose) Resume(ctx context.Context, i int) error {
	out, err := docker(ctx, "unpause", c.containers[i])
	if err != nil && bytes.Contains(out, []byte("is not paused")) {
		return fmt.Errorf("cluster: unpause m%d: %w", i+1, ErrNotRunning)
	}
	return err
}

func (c *Compose) Isolate(ctx context.Context, i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Marked before the attempt: a disconnect that fails or is cut short
	// (its context ended as the run's faults did) may still have taken
	// effect in the daemon, and HealNetwork must then reconnect it.
	c.isolated[i] = true
	_, err := docker(ctx, "network", "disconnect", c.network, c.containers[i])
	return err
}

func (c *Compose) Cut(ctx context.Context, a, b int) error { return ErrUnsupported }
func (c *Compose) Slow(ctx context.Context, delay, jitter time.Duration) error {
	return ErrUnsupported
}
func (c *Compose) Lossy(ctx context.Context, stallProb float64, maxStall time.Duration, resetProb float64) error {
	return ErrUnsupported
}

// HealNetwork reconnects every isolated member under its service name,
// which is how the others find it.
func (c *Compose) HealNetwork(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []string
	for i := range c.isolated {
		out, err := docker(ctx, "inspect", "--format", "{{range $net, $_ := .NetworkSettings.Networks}}{{$net}} {{end}}", c.containers[i])
		if err == nil && slices.Contains(strings.Fields(string(out)), c.network) {
			delete(c.isolated, i) // the disconnect never took effect
			continue
		}
		if _, err := docker(ctx, "network", "connect", "--alias", c.Name(i), c.network, c.containers[i]); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		delete(c.isolated, i)
	}
	if len(errs) > 0 {
		return fmt.Errorf("cluster: reconnect: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Problems reads the containers' logs (saved by Close) for crashes and
// asks docker whether the restart policy had to restart a member.
func (c *Compose) Problems() []string {
	c.mu.Lock()
	out := append([]string(nil), c.problems...)
	c.mu.Unlock()
	for i := range c.containers {
		b, err := os.ReadFile(filepath.Join(c.logDir, c.Name(i)+".log"))
		if err != nil {
			continue
		}
		for _, bad := range []string{"panic:", "fatal error:", "WARNING: DATA RACE"} {
			if j := bytes.Index(b, []byte(bad)); j >= 0 {
				out = append(out, fmt.Sprintf("%s log contains %q:\n%s", c.Name(i), bad, b[j:min(len(b), j+2000)]))
			}
		}
	}
	return out
}

// Close saves each member's log, then removes the containers, network and
// volumes of the project.
func (c *Compose) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, id := range c.containers {
		// A paused container can be neither logged nor stopped quickly.
		_, _ = docker(ctx, "unpause", id)
		if c.logDir != "" {
			if b, err := exec.CommandContext(ctx, "docker", "logs", id).CombinedOutput(); err == nil {
				_ = os.WriteFile(filepath.Join(c.logDir, c.Name(i)+".log"), b, 0o644)
			}
			if out, err := docker(ctx, "inspect", "-f", "{{.RestartCount}}", id); err == nil && strings.TrimSpace(string(out)) != "0" {
				p := fmt.Sprintf("docker restarted %s on its own %s times (it exited without being killed)", c.Name(i), strings.TrimSpace(string(out)))
				c.log.Error(p)
				c.mu.Lock()
				c.problems = append(c.problems, p)
				c.mu.Unlock()
			}
		}
	}
	_, _ = c.compose(ctx, "kill")
	_, err := c.compose(ctx, "down", "-v", "--remove-orphans")
	if c.ownImage != "" {
		_, _ = docker(ctx, "rmi", c.ownImage)
	}
	return err
}

// KillNow removes the project's containers without saving anything.
func (c *Compose) KillNow() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = c.compose(ctx, "kill")
	_, _ = c.compose(ctx, "down", "-v", "--remove-orphans")
	if c.ownImage != "" {
		_, _ = docker(ctx, "rmi", c.ownImage)
	}
}
