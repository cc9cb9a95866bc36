package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corenode/corenode/internal/freeport"
	"github.com/corenode/corenode/internal/rateclock"
	"github.com/corenode/corenode/test/jepsen-lite/internal/proxy"
)

// Build compiles ./cmd/corenode of the module at root into dir.
func Build(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "corenode")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/corenode")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cluster: go build ./cmd/corenode: %w\n%s", err, out)
	}
	return bin, nil
}

// ModuleRoot is the directory holding go.mod, searched upward from the
// working directory (go run leaves it where the command was typed).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("cluster: working directory: %w", err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/corenode/corenode\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cluster: no corenode go.mod above the working directory")
		}
		dir = parent
	}
}

// Members listen for peers on 127.0.0.(11+i) and are advertised at
// 127.0.0.(21+i), where the proxy listens: the source address of a dialed
// peer connection is the dialer's listen IP, which names it to the proxy.
func listenIP(i int) net.IP { return net.IPv4(127, 0, 0, byte(11+i)) }
func proxyIP(i int) net.IP  { return net.IPv4(127, 0, 0, byte(21+i)) }

type proc struct {
	name       string
	clientPort int
	peerPort   int
	dataDir    string
	logPath    string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	expected bool // the exit was ours (Kill or Close)
	paused   bool
	logs     *os.File
}

// Processes is a cluster of local corenode processes.
type Processes struct {
	bin      string
	dir      string
	clockDir string
	token    string
	settings Settings
	log      *slog.Logger
	px       *proxy.Proxy
	members  []*proc

	mu       sync.Mutex
	problems []string
}

// ProcessConfig says how to start a local cluster.
type ProcessConfig struct {
	Binary   string
	Members  int
	DataDir  string // data dirs go here
	LogDir   string // member logs go here
	Settings Settings
	Seed     uint64
	Log      *slog.Logger
	// ClockDir, if set, holds a rate file per member (NAME.rate, written
	// here at 1 before the members start): each member's lease clock runs
	// at the rate in its file, through the test-only variable
	// rateclock.Env.
	ClockDir string
}

// StartProcesses starts the proxy and every member; it returns when all
// processes are running (not yet healthy: see WaitHealthy).
func StartProcesses(ctx context.Context, cfg ProcessConfig) (*Processes, error) {
	var lastErr error
	for attempt := 1; attempt <= 3; attempt++ {
		p, err := startProcesses(ctx, cfg, attempt)
		if err == nil {
			return p, nil
		}
		lastErr = err
		cfg.Log.Warn("cluster start failed, retrying on other ports", "attempt", attempt, "err", err)
	}
	return nil, lastErr
}

func startProcesses(ctx context.Context, cfg ProcessConfig, attempt int) (*Processes, error) {
	n := cfg.Members
	p := &Processes{
		bin: cfg.Binary, dir: cfg.DataDir, clockDir: cfg.ClockDir, settings: cfg.Settings, log: cfg.Log,
		token: fmt.Sprintf("jepsen-lite-%d-%d", os.Getpid(), attempt),
	}
	px, err := proxy.New(n,
		func(i int) string { return net.JoinHostPort(proxyIP(i).String(), "0") },
		func(i int) string {
			return net.JoinHostPort(listenIP(i).String(), fmt.Sprint(p.members[i].peerPort))
		},
		func(ip net.IP) int {
			for i := range n {
				if ip.Equal(listenIP(i)) {
					return i
				}
			}
			return -1
		}, cfg.Seed, cfg.Log)
	if err != nil {
		return nil, err
	}
	p.px = px
	// Outside the ephemeral range, so that clients' connections cannot
	// take a killed member's port before it restarts.
	clientPorts, err := freeport.Ports("127.0.0.1", n)
	if err != nil {
		px.Close()
		return nil, fmt.Errorf("cluster: client ports: %w", err)
	}
	for i := range n {
		port := px.Addr(i).Port
		// The member's own peer port is the proxy's port on another IP;
		// probe it so a clash shows up here rather than as a member exit.
		ln, err := net.Listen("tcp", net.JoinHostPort(listenIP(i).String(), fmt.Sprint(port)))
		if err != nil {
			px.Close()
			return nil, fmt.Errorf("cluster: peer port %d for member %d: %w", port, i, err)
		}
		ln.Close()
		name := fmt.Sprintf("m%d", i+1)
		p.members = append(p.members, &proc{
			name:       name,
			clientPort: clientPorts[i],
			peerPort:   port,
			dataDir:    filepath.Join(cfg.DataDir, fmt.Sprintf("%s.%d.data", name, attempt)),
			logPath:    filepath.Join(cfg.LogDir, name+".log"),
		})
	}
	for i := range n {
		if f := p.ClockFile(i); f != "" {
			if err := rateclock.WriteRate(f, 1); err != nil {
				p.Close()
				return nil, fmt.Errorf("cluster: clock of %s: %w", p.members[i].name, err)
			}
		}
	}
	for i := range n {
		if err := p.Start(ctx, i); err != nil {
			p.Close()
			return nil, err
		}
	}
	// A port clash makes a member exit within moments of starting.
	time.Sleep(300 * time.Millisecond)
	for i, m := range p.members {
		if !m.running() {
			p.Close()
			return nil, fmt.Errorf("cluster: %s exited right after start (see %s)", p.members[i].name, m.logPath)
		}
	}
	return p, nil
}

func (p *Processes) Size() int         { return len(p.members) }
func (p *Processes) Name(i int) string { return p.members[i].name }
func (p *Processes) Endpoint(i int) string {
	return fmt.Sprintf("127.0.0.1:%d", p.members[i].clientPort)
}
func (p *Processes) Caps() Caps {
	return Caps{PairCuts: true, Slow: true, Lossy: true, ClockRate: p.clockDir != ""}
}

func (p *Processes) ClockFile(i int) string {
	if p.clockDir == "" {
		return ""
	}
	return filepath.Join(p.clockDir, p.members[i].name+".rate")
}

func (p *Processes) initialCluster() string {
	var parts []string
	for i, m := range p.members {
		parts = append(parts, fmt.Sprintf("%s=http://%s:%d", m.name, proxyIP(i), m.peerPort))
	}
	return strings.Join(parts, ",")
}

func (p *Processes) args(i int) []string {
	m := p.members[i]
	client := fmt.Sprintf("http://127.0.0.1:%d", m.clientPort)
	return append([]string{
		"--name", m.name,
		"--data-dir", m.dataDir,
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", fmt.Sprintf("http://%s:%d", listenIP(i), m.peerPort),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://%s:%d", proxyIP(i), m.peerPort),
		"--initial-cluster", p.initialCluster(),
		// A member with data ignores "new", so restarts need no change.
		"--initial-cluster-state", "new",
		"--initial-cluster-token", p.token,
	}, p.settings.flags()...)
}

func (m *proc) running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runningLocked()
}

func (m *proc) runningLocked() bool {
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// Start starts member i (again); a no-op if it runs.
func (p *Processes) Start(ctx context.Context, i int) error {
	m := p.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runningLocked() {
		return nil
	}
	if m.logs == nil {
		f, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("cluster: log of %s: %w", m.name, err)
		}
		m.logs = f
	}
	args := p.args(i)
	fmt.Fprintf(m.logs, "=== %s jepsen-lite: start %s %s\n", time.Now().Format(time.RFC3339Nano), p.bin, strings.Join(args, " "))
	cmd := exec.Command(p.bin, args...)
	cmd.Env = envWithout("CORENODE_", "ETCD_")
	if f := p.ClockFile(i); f != "" {
		cmd.Env = append(cmd.Env, rateclock.Env+"=file:"+f)
	}
	cmd.Stdout, cmd.Stderr = m.logs, m.logs
	// Its own process group, so that a Ctrl-C meant for jepsen-lite does
	// not stop members before the history is written; Pdeathsig so that
	// they die with us even if we are SIGKILLed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cluster: start %s: %w", m.name, err)
	}
	m.cmd, m.exited, m.expected, m.paused = cmd, make(chan struct{}), false, false
	go func(cmd *exec.Cmd, exited chan struct{}) {
		err := cmd.Wait()
		m.mu.Lock()
		expected := m.expected || m.cmd != cmd
		m.mu.Unlock()
		close(exited)
		if !expected {
			p.problem(fmt.Sprintf("%s exited on its own: %v (see %s)", m.name, err, m.logPath))
		}
	}(cmd, m.exited)
	return nil
}

func (p *Processes) problem(s string) {
	p.log.Error("member problem", "problem", s)
	p.mu.Lock()
	p.problems = append(p.problems, s)
	p.mu.Unlock()
}

// Kill sends SIGKILL to member i's process group and waits for the exit.
func (p *Processes) Kill(ctx context.Context, i int) error {
	m := p.members[i]
	m.mu.Lock()
	if !m.runningLocked() {
		m.mu.Unlock()
		return nil
	}
	m.expected = true
	pid, exited := m.cmd.Process.Pid, m.exited
	m.mu.Unlock()
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-exited:
	case <-ctx.Done():
		return fmt.Errorf("cluster: %s did not exit after SIGKILL: %w", m.name, ctx.Err())
	case <-time.After(10 * time.Second):
		return fmt.Errorf("cluster: %s (pid %d) did not exit 10s after SIGKILL", m.name, pid)
	}
	fmt.Fprintf(m.logs, "=== %s jepsen-lite: killed with SIGKILL\n", time.Now().Format(time.RFC3339Nano))
	return nil
}

func (p *Processes) signal(i int, sig syscall.Signal, paused bool) error {
	m := p.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.runningLocked() {
		return fmt.Errorf("cluster: %v to %s: %w", sig, m.name, ErrNotRunning)
	}
	if err := syscall.Kill(-m.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("cluster: %v to %s: %w", sig, m.name, err)
	}
	m.paused = paused
	fmt.Fprintf(m.logs, "=== %s jepsen-lite: %v\n", time.Now().Format(time.RFC3339Nano), sig)
	return nil
}

// Pause is SIGSTOP: the member keeps its sockets and state but does
// nothing, its clock running on, until Resume.
func (p *Processes) Pause(ctx context.Context, i int) error {
	return p.signal(i, syscall.SIGSTOP, true)
}

// Resume is SIGCONT.
func (p *Processes) Resume(ctx context.Context, i int) error {
	return p.signal(i, syscall.SIGCONT, false)
}

func (p *Processes) Isolate(ctx context.Context, i int) error {
	for j := range p.members {
		if j != i {
			p.px.Set(i, j, proxy.Rule{Cut: true})
			p.px.Set(j, i, proxy.Rule{Cut: true})
		}
	}
	return nil
}

func (p *Processes) Cut(ctx context.Context, a, b int) error {
	p.px.Set(a, b, proxy.Rule{Cut: true})
	p.px.Set(b, a, proxy.Rule{Cut: true})
	return nil
}

func (p *Processes) Slow(ctx context.Context, delay, jitter time.Duration) error {
	for a := range p.members {
		for b := range p.members {
			if a != b {
				p.px.Set(a, b, proxy.Rule{Delay: delay, Jitter: jitter})
			}
		}
	}
	return nil
}

func (p *Processes) Lossy(ctx context.Context, stallProb float64, maxStall time.Duration, resetProb float64) error {
	for a := range p.members {
		for b := range p.members {
			if a != b {
				p.px.Set(a, b, proxy.Rule{StallProb: stallProb, MaxStall: maxStall, ResetProb: resetProb})
			}
		}
	}
	return nil
}

func (p *Processes) HealNetwork(ctx context.Context) error {
	p.px.Heal()
	return nil
}

// Problems adds to the unexpected exits what the members' logs show.
func (p *Processes) Problems() []string {
	p.mu.Lock()
	out := append([]string(nil), p.problems...)
	p.mu.Unlock()
	for _, m := range p.members {
		b, err := os.ReadFile(m.logPath)
		if err != nil {
			continue
		}
		for _, bad := range []string{"panic:", "fatal error:", "WARNING: DATA RACE"} {
			if i := bytes.Index(b, []byte(bad)); i >= 0 {
				end := min(len(b), i+2000)
				out = append(out, fmt.Sprintf("%s log contains %q:\n%s", m.name, bad, b[i:end]))
			}
		}
	}
	return out
}

// Close kills every member (a paused one too: SIGKILL needs no SIGCONT)
// and the proxy. Data dirs are left to the caller, who made them.
func (p *Processes) Close() error {
	var wg sync.WaitGroup
	for i := range p.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if err := p.Kill(ctx, i); err != nil {
				p.log.Error("cleanup", "err", err)
			}
		}()
	}
	wg.Wait()
	for _, m := range p.members {
		m.mu.Lock()
		if m.logs != nil {
			m.logs.Close()
			m.logs = nil
		}
		m.mu.Unlock()
	}
	if p.px != nil {
		p.px.Close()
	}
	return nil
}

// KillNow is the last-resort cleanup for a hard deadline or a second
// signal: SIGKILL to every member's group without waiting.
func (p *Processes) KillNow() {
	for _, m := range p.members {
		m.mu.Lock()
		if m.cmd != nil && m.cmd.Process != nil {
			m.expected = true
			_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		}
		m.mu.Unlock()
	}
}

func envWithout(prefixes ...string) []string {
	var env []string
next:
	for _, kv := range os.Environ() {
		for _, pre := range prefixes {
			if strings.HasPrefix(kv, pre) {
				continue next
			}
		}
		env = append(env, kv)
	}
	return env
}
