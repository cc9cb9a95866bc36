package transport

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HTTPHandler serves /health (etcd's JSON form), /livez, /readyz and
// /metrics, the last from metrics (nil serves an empty set), and with
// profiles Go's /debug/pprof/.
func (s *Server) HTTPHandler(metrics prometheus.Gatherer, profiles bool) http.Handler {
	mux := http.NewServeMux()
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
		if err := s.ready(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
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
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(h)
	})
	return mux
}

// ready reports whether this member can serve a linearizable request now:
// there is a leader and it confirms leadership to this member's request.
func (s *Server) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	// A read index from the leader proves it holds a quorum.
	_, err := linearizable(s, ctx, func() (struct{}, error) { return struct{}{}, nil })
	return err
}
