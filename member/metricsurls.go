package member

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/keepalive"
)

// listenMetrics opens etcd's --listen-metrics-urls: plain or TLS
// listeners, https:// ones with the client TLS settings, as etcd does.
func listenMetrics(cfg Config) ([]net.Listener, error) {
	var lns []net.Listener
	fail := func(err error) ([]net.Listener, error) {
		for _, ln := range lns {
			ln.Close()
		}
		return nil, err
	}
	var tlsCfg *tls.Config
	for _, u := range cfg.ListenMetricsURLs {
		hp, err := hostPort(u)
		if err != nil {
			return fail(fmt.Errorf("--listen-metrics-urls: %w", err))
		}
		ln, err := net.Listen("tcp", hp)
		if err != nil {
			return fail(fmt.Errorf("listen for metrics: %w", err))
		}
		if isHTTPS(u) {
			if tlsCfg == nil {
				if cfg.ClientTLS.CertFile == "" {
					ln.Close()
					return fail(errors.New("--listen-metrics-urls " + u + " is https:// but --cert-file is not set"))
				}
				if tlsCfg, err = cfg.ClientTLS.serverConfig(""); err != nil {
					ln.Close()
					return fail(err)
				}
				tlsCfg = tlsCfg.Clone()
				tlsCfg.NextProtos = []string{"http/1.1"}
			}
			ln = tls.NewListener(ln, tlsCfg)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// metricsOnly passes the paths etcd serves on a metrics URL to next, and
// answers 404 for the rest: a metrics port is no client port.
func metricsOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == "/metrics", p == "/health", strings.HasPrefix(p, "/livez"), strings.HasPrefix(p, "/readyz"):
			next.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// keepaliveParams are the server's pings, or nil for gRPC's defaults
// (which are etcd's: 2 h, 20 s).
func keepaliveParams(k GRPCKeepalive) *keepalive.ServerParameters {
	if k.Interval == 0 && k.Timeout == 0 {
		return nil
	}
	p := keepalive.ServerParameters{Time: k.Interval, Timeout: k.Timeout}
	if p.Time == 0 {
		p.Time = 2 * time.Hour
	}
	if p.Time < 0 {
		p.Time = time.Duration(1<<63 - 1) // never
	}
	if p.Timeout <= 0 {
		p.Timeout = 20 * time.Second
	}
	return &p
}
