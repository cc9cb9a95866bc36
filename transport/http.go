package transport

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/status"
)

// HTTPHandler serves /health (etcd's JSON form), /livez, /readyz,
// /version and /metrics, the last from metrics (nil serves an empty set),
// etcd's JSON gateway under /v3/ when gateway is set (see NewGateway), and
// with profiles Go's /debug/pprof/.
func (s *Server) HTTPHandler(metrics prometheus.Gatherer, profiles bool, gateway http.Handler) http.Handler {
	mux := http.NewServeMux()
	if gateway != nil {
		mux.Handle("/v3/", gateway)
	}
	mux.HandleFunc("/version", serveVersion)
	if profiles {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if metrics == nil {
		metrics = prometheus.NewRegistry()
	}
	mux.Handle("/metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) {
		// Alive means the process serves requests; it says nothing of quorum,
		// so an orchestrator does not restart members of a partitioned cluster.
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		// The gRPC health service's verdict: both are what orchestrators
		// ask before they send a member traffic.
		if err := s.req.Serving(r.Context()); err != nil {
			http.Error(w, status.Convert(mapErr(r.Context(), err)).Message(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		type health struct {
			Health string `json:"health"`
			Reason string `json:"reason"`
		}
		h := health{Health: "true"}
		code := http.StatusOK
		if err := s.ready(r.Context()); err != nil {
			h = health{Health: "false", Reason: err.Error()}
			code = http.StatusServiceUnavailable
		} else if a := s.alarm(r.URL.Query()["exclude"]); a != "" {
			// As etcd: a raised alarm makes the member unhealthy unless the
			// caller excludes its type (/health?exclude=NOSPACE).
			h = health{Health: "false", Reason: "ALARM " + a}
			code = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(h)
	})
	return withCORS(mux)
}

// alarm names the first raised alarm whose type is not in exclude, or "".
func (s *Server) alarm(exclude []string) string {
	for _, a := range s.req.Alarms() {
		if !slices.Contains(exclude, a.Alarm.String()) {
			return a.Alarm.String()
		}
	}
	return ""
}

// ready reports whether this member can serve a linearizable request now:
// it has caught up after its restart, and there is a leader that confirms
// its leadership to this member's request.
func (s *Server) ready(ctx context.Context) error {
	select {
	case <-s.req.CaughtUp():
	default:
		return errGRPCCatchingUp
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	// A read index from the leader proves it holds a quorum.
	return s.req.AwaitLinearizable(ctx)
}
