package transport

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// healthService is the standard gRPC health service (grpc.health.v1) on
// the client port, as etcd serves it: Kubernetes gRPC probes and etcd's
// robustness harness ask it. The whole server is service ""; it is
// SERVING when the member would serve a linearizable read
// (server.Serving), which says more than etcd's, SERVING whenever the
// server serves. No other service name is known.
type healthService struct {
	healthpb.UnimplementedHealthServer
	s *Server
}

func servingStatus(serving bool) healthpb.HealthCheckResponse_ServingStatus {
	if serving {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

// errUnknownService is grpc-go's own health server's answer for a name it
// does not know.
var errUnknownService = status.Error(codes.NotFound, "unknown service")

func (h *healthService) Check(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if r.Service != "" {
		return nil, errUnknownService
	}
	err := h.s.req.Serving(ctx)
	if ctx.Err() != nil {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &healthpb.HealthCheckResponse{Status: servingStatus(err == nil)}, nil
}

func (h *healthService) List(ctx context.Context, r *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	resp, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return nil, err
	}
	return &healthpb.HealthListResponse{Statuses: map[string]*healthpb.HealthCheckResponse{"": resp}}, nil
}

// Watch sends the status now and at each change. An unknown service is
// SERVICE_UNKNOWN, once, for as long as the stream lasts, as grpc-go's
// health server answers it.
func (h *healthService) Watch(r *healthpb.HealthCheckRequest, stream grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	ctx := stream.Context()
	if r.Service != "" {
		if err := stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVICE_UNKNOWN}); err != nil {
			return err
		}
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	}
	err := h.s.req.WatchServing(ctx, func(serving bool) error {
		return stream.Send(&healthpb.HealthCheckResponse{Status: servingStatus(serving)})
	})
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return err
}
