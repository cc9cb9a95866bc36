package transport

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// GRPCMetrics counts and times the client-facing gRPC calls, by method and
// status code, for the interceptors of the client gRPC server. A stream
// (Watch, LeaseKeepAlive) is observed once, when it ends.
type GRPCMetrics struct {
	calls   *prometheus.CounterVec
	latency *prometheus.HistogramVec
}

// NewGRPCMetrics creates the series and registers them with reg.
func NewGRPCMetrics(reg prometheus.Registerer) *GRPCMetrics {
	m := &GRPCMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "corenode_grpc_requests_total",
			Help: "gRPC calls handled, by full method name and status code."}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "corenode_grpc_request_seconds",
			Help:    "gRPC call duration by full method name; streams count once, for their whole life.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"method"}),
	}
	reg.MustRegister(m.calls, m.latency)
	return m
}

func (m *GRPCMetrics) observe(method string, start time.Time, err error) {
	m.calls.WithLabelValues(method, status.Code(err).String()).Inc()
	m.latency.WithLabelValues(method).Observe(time.Since(start).Seconds())
}

// ServerOptions returns the interceptors that feed m.
func (m *GRPCMetrics) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			start := time.Now()
			resp, err := h(ctx, req)
			m.observe(info.FullMethod, start, err)
			return resp, err
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			start := time.Now()
			err := h(srv, ss)
			m.observe(info.FullMethod, start, err)
			return err
		}),
	}
}
