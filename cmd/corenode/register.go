package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/client/discovery"
)

// `corenode register SERVICE ADDR [-- CMD ARGS]` keeps ADDR registered for
// SERVICE, in client/discovery's format, while its health check passes
// (and, with CMD, while CMD runs), so that a service in any language can
// be found by etcd clients, client/discovery's resolver and the members'
// DNS.

const registerSynopsis = "corenode register [--endpoints E] [--ttl S] [--check-http URL | --check-tcp HOST:PORT | --check-exec CMD] " +
	"[--check-interval D] [--check-timeout D] [--metadata JSON] [--metrics-addr HOST:PORT] ... SERVICE ADDR [-- CMD [ARGS...]]"

type registerOptions struct {
	conn            connFlags
	ttl             int
	checkHTTP       string
	checkTCP        string
	checkExec       string
	interval        time.Duration
	timeout         time.Duration
	metadata        string
	metricsAddr     string
	service, addr   string
	command         []string
	metadataDecoded json.RawMessage
}

func parseRegister(args []string) (o registerOptions, code int) {
	fs := flag.NewFlagSet("corenode register", flag.ContinueOnError)
	o.conn.register(fs)
	fs.IntVar(&o.ttl, "ttl", 10, "lease TTL in seconds: how long the endpoint stays listed after this process dies without deregistering")
	fs.StringVar(&o.checkHTTP, "check-http", "", "health check: GET this URL; a 2xx answer passes")
	fs.StringVar(&o.checkTCP, "check-tcp", "", "health check: connect to HOST:PORT; a connection passes")
	fs.StringVar(&o.checkExec, "check-exec", "", "health check: run this command with sh -c; exit status 0 passes")
	fs.DurationVar(&o.interval, "check-interval", 10*time.Second, "time between the starts of two checks")
	fs.DurationVar(&o.timeout, "check-timeout", 0, "a check not done within this fails (default: half the interval, at most 5s)")
	fs.StringVar(&o.metadata, "metadata", "", "JSON stored in the endpoint record's Metadata field")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics of the registration on http://HOST:PORT/metrics")
	pos, command, err := parseCommandLine(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(fs, registerSynopsis)
		return o, 0
	}
	if err == nil {
		err = o.check(pos, command)
	}
	if err != nil {
		fmt.Fprint(os.Stderr, usageLines("corenode register", err, registerSynopsis))
		return o, exitHoldUsage
	}
	return o, -1
}

func (o *registerOptions) check(pos, command []string) error {
	if len(pos) != 2 || pos[0] == "" || pos[1] == "" {
		return fmt.Errorf("want SERVICE ADDR, got %q", pos)
	}
	o.service, o.addr, o.command = pos[0], pos[1], command
	if err := checkServiceName(o.service); err != nil {
		return err
	}
	if err := checkHostPort("ADDR", o.addr); err != nil {
		return err
	}
	checks := 0
	for _, c := range []string{o.checkHTTP, o.checkTCP, o.checkExec} {
		if c != "" {
			checks++
		}
	}
	switch {
	case checks > 1:
		return errors.New("give at most one of --check-http, --check-tcp and --check-exec")
	case o.ttl <= 0:
		return fmt.Errorf("--ttl %d is not positive", o.ttl)
	case o.interval <= 0:
		return fmt.Errorf("--check-interval %v is not positive", o.interval)
	case o.timeout < 0 || o.timeout > o.interval:
		return fmt.Errorf("--check-timeout %v must be between 0 and --check-interval %v", o.timeout, o.interval)
	}
	if o.timeout == 0 {
		o.timeout = min(o.interval/2, 5*time.Second)
	}
	if o.metadata != "" {
		if !json.Valid([]byte(o.metadata)) {
			return fmt.Errorf("--metadata %q is not JSON", o.metadata)
		}
		o.metadataDecoded = json.RawMessage(o.metadata)
	}
	if o.checkHTTP != "" {
		// A relative URL parses, and then fails every check without a word.
		if err := checkHTTPURL(o.checkHTTP); err != nil {
			return err
		}
	}
	if o.checkTCP != "" {
		if err := checkHostPort("--check-tcp", o.checkTCP); err != nil {
			return err
		}
	}
	return o.conn.check()
}

// healthCheck is one kind of check; nil error passes.
type healthCheck func(ctx context.Context) error

func (o *registerOptions) healthCheck() healthCheck {
	switch {
	case o.checkHTTP != "":
		return httpCheck(o.checkHTTP)
	case o.checkTCP != "":
		return tcpCheck(o.checkTCP)
	case o.checkExec != "":
		return execCheck(o.checkExec)
	}
	return nil
}

func httpCheck(url string) healthCheck {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

func tcpCheck(addr string) healthCheck {
	return func(ctx context.Context) error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	}
}

func execCheck(script string) healthCheck {
	return func(ctx context.Context) error {
		cmd := exec.CommandContext(ctx, "sh", "-c", script)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		// Its own group, so a timeout kills what the script started too.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = time.Second
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("sh -c %q: %w", script, err)
		}
		return nil
	}
}

// registerMetrics are the registration's Prometheus series.
type registerMetrics struct {
	checks        *prometheus.CounterVec
	checkDuration prometheus.Histogram
	registered    prometheus.Gauge
	registrations prometheus.Counter
	deregistered  *prometheus.CounterVec
	lost          prometheus.Counter
}

func newRegisterMetrics(reg prometheus.Registerer, service, addr string) *registerMetrics {
	labels := prometheus.Labels{"service": service, "addr": addr}
	m := &registerMetrics{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "corenode_register_checks_total",
			Help: "Health checks run, by result (pass, fail).", ConstLabels: labels}, []string{"result"}),
		checkDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "corenode_register_check_duration_seconds",
			Help: "How long health checks took.", ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}),
		registered: prometheus.NewGauge(prometheus.GaugeOpts{Name: "corenode_register_registered",
			Help: "1 while the endpoint is stored in the cluster, else 0.", ConstLabels: labels}),
		registrations: prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_register_registrations_total",
			Help: "Times the endpoint was stored, first or after a failed check.", ConstLabels: labels}),
		deregistered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "corenode_register_deregistrations_total",
			Help: "Times the endpoint was removed, by reason (check, exit).", ConstLabels: labels}, []string{"reason"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "corenode_register_leases_lost_total",
			Help: "Times the endpoint's lease was lost (expired in a partition, revoked by someone else) and stored again.", ConstLabels: labels}),
	}
	reg.MustRegister(m.checks, m.checkDuration, m.registered, m.registrations, m.deregistered, m.lost)
	return m
}

// register runs `corenode register`.
func register(args []string) int {
	o, code := parseRegister(args)
	if code >= 0 {
		return code
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).
		With("service", o.service, "addr", o.addr)
	reg := prometheus.NewRegistry()
	metrics := newRegisterMetrics(reg, o.service, o.addr)
	if o.metricsAddr != "" {
		ln, err := net.Listen("tcp", o.metricsAddr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "corenode register: --metrics-addr: %v\n", err)
			return exitHoldError
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}
	cli, err := o.conn.client()
	if err != nil {
		fmt.Fprintf(os.Stderr, "corenode register: %v\n", err)
		return exitHoldError
	}
	defer cli.Close()
	if err := checkAccess(cli, discovery.Prefix(o.service), o.conn.commandTimeout); err != nil {
		fmt.Fprintf(os.Stderr, "corenode register: %v\n", err)
		return exitHoldError
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	r := &registrar{o: o, cli: cli, log: log, metrics: metrics, check: o.healthCheck()}
	return r.run(sigs)
}

// registrar keeps one endpoint registered while its check passes.
type registrar struct {
	o       registerOptions
	cli     *clientv3.Client
	log     *slog.Logger
	metrics *registerMetrics
	check   healthCheck
	reg     *discovery.Registration // nil while not registered
	// failSaid: the current run of failing checks has been logged.
	failSaid bool
}

func (r *registrar) run(sigs <-chan os.Signal) int {
	var cmd *exec.Cmd
	exited := make(chan int, 1)
	if len(r.o.command) > 0 {
		cmd = exec.Command(r.o.command[0], r.o.command[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		// CMD gets SIGTERM if this process dies: the endpoint expires after
		// its TTL, and the service should not outlive its registration.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "corenode register: %v\n", err)
			return exitHoldError
		}
		go func() {
			_ = cmd.Wait()
			exited <- waitStatus(cmd.ProcessState.Sys().(syscall.WaitStatus))
		}()
	}
	// Without a check, the tick only retries a registration that failed.
	tick := time.NewTicker(r.o.interval)
	defer tick.Stop()
	r.runCheck()
	for {
		var done <-chan struct{}
		if r.reg != nil {
			done = r.reg.Done()
		}
		select {
		case <-tick.C:
			r.runCheck()
		case <-done:
			err := r.reg.Deregister(context.Background())
			fmt.Fprintf(os.Stderr, "corenode register: the registration ended: %v\n", err)
			r.reg = nil
			r.metrics.registered.Set(0)
			if cmd != nil {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				<-exited
			}
			return exitHoldError
		case sig := <-sigs:
			// Deregister first, so clients stop calling before CMD stops.
			r.setRegistered(false, "exit")
			if cmd == nil {
				return 0
			}
			_ = cmd.Process.Signal(sig)
			for {
				select {
				case code := <-exited:
					return code
				case sig := <-sigs:
					_ = cmd.Process.Signal(sig)
				}
			}
		case code := <-exited:
			r.setRegistered(false, "exit")
			return code
		}
	}
}

// runCheck runs the check once and registers or deregisters by its result;
// without a check it registers.
func (r *registrar) runCheck() {
	if r.check == nil {
		r.setRegistered(true, "")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.o.timeout)
	start := time.Now()
	err := r.check(ctx)
	cancel()
	r.metrics.checkDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		r.metrics.checks.WithLabelValues("fail").Inc()
		switch {
		case r.reg != nil:
			r.log.Warn("health check failed; deregistering", "err", err)
		case !r.failSaid:
			// Otherwise a check that never passes (a closed port, a wrong
			// URL) leaves the endpoint out without a word.
			r.log.Warn("health check failed; the endpoint is not registered until the check passes", "err", err)
		}
		r.failSaid = true
		r.setRegistered(false, "check")
		return
	}
	r.failSaid = false
	r.metrics.checks.WithLabelValues("pass").Inc()
	r.setRegistered(true, "")
}

// setRegistered stores or removes the endpoint; a failure to store is
// logged and tried again at the next check (every interval without one).
func (r *registrar) setRegistered(on bool, reason string) {
	switch {
	case on && r.reg == nil:
		opts := []discovery.Option{discovery.WithTryTimeout(r.o.conn.commandTimeout), discovery.WithLogger(slog.New(slog.DiscardHandler)), discovery.WithNotify(func(e discovery.Event) {
			if e.Kind == discovery.Lost {
				r.metrics.lost.Inc()
				r.metrics.registered.Set(0)
				r.log.Warn("endpoint lease lost; registering again", "err", e.Err)
			} else {
				r.metrics.registered.Set(1)
				r.log.Info("endpoint registered again", "lease", fmt.Sprintf("%x", e.Lease))
			}
		})}
		if r.o.metadataDecoded != nil {
			opts = append(opts, discovery.WithMetadata(r.o.metadataDecoded))
		}
		reg, err := discovery.Register(context.Background(), r.cli, r.o.service, r.o.addr, time.Duration(r.o.ttl)*time.Second, opts...)
		if err != nil {
			r.log.Error("register endpoint", "err", err)
			return
		}
		r.reg = reg
		r.metrics.registered.Set(1)
		r.metrics.registrations.Inc()
		r.log.Info("endpoint registered", "key", reg.Key(), "lease", fmt.Sprintf("%x", reg.Lease()), "ttl", reg.TTL())
	case !on && r.reg != nil:
		ctx, cancel := context.WithTimeout(context.Background(), r.o.conn.commandTimeout)
		defer cancel()
		err := r.reg.Deregister(ctx)
		r.reg = nil
		r.metrics.registered.Set(0)
		r.metrics.deregistered.WithLabelValues(reason).Inc()
		if err != nil {
			r.log.Warn("deregister endpoint; it stays until its lease expires", "err", err)
		} else {
			r.log.Info("endpoint deregistered", "reason", reason)
		}
	}
}
