package rls

import (
	"context"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// ServiceName is the gRPC service name of ShouldRateLimit, as the health
// service reports it.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Health is the gRPC health service of a server: SERVING for "" and
// ServiceName until Drain.
type Health struct{ hs *health.Server }

// Register registers s and a health service on gs, and returns the health
// service (SERVING).
func Register(gs *grpc.Server, s *Service) *Health {
	pb.RegisterRateLimitServiceServer(gs, s)
	h := &Health{hs: health.NewServer()}
	h.hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, h.hs)
	return h
}

// SetServing reports SERVING (true) or NOT_SERVING for "" and ServiceName,
// as the server's readiness changes; after Drain it changes nothing.
func (h *Health) SetServing(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	h.hs.SetServingStatus("", st)
	h.hs.SetServingStatus(ServiceName, st)
}

// Drain reports NOT_SERVING for every service from now on, so that clients
// stop sending new calls while in-flight ones finish.
func (h *Health) Drain() { h.hs.Shutdown() }

// NewRequest makes a ShouldRateLimit request to decode a call into.
func NewRequest() any { return new(pb.RateLimitRequest) }

// UnaryHandler is s.ShouldRateLimit as a grpc.UnaryHandler, for a server
// that decodes the request itself (grpcfast's HandleUnary, with
// NewRequest).
func (s *Service) UnaryHandler() grpc.UnaryHandler {
	return func(ctx context.Context, req any) (any, error) {
		return s.ShouldRateLimit(ctx, req.(*pb.RateLimitRequest))
	}
}
