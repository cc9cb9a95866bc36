package member

import (
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/keepalive"
)

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
