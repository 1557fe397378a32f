package server

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// healthService is gRPC's standard health service, whose Watch streams end
// when the server starts to drain. gRPC-Go's own Watch ends only when its
// client goes away: a client that uses gRPC's client-side health checking
// holds one open, and every graceful shutdown then waited out its whole
// timeout and cancelled every stream.
type healthService struct {
	*health.Server
	closing <-chan struct{}
}

// Watch sends the service's status, then NOT_SERVING once the server
// starts to drain, and ends the call with UNAVAILABLE as the server's other
// streams end. The status changes only then (the server sets every
// service NOT_SERVING as it drains), so there is nothing else to watch for.
func (h healthService) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	select {
	case <-h.closing:
	default:
		if r, err := h.Check(stream.Context(), req); err != nil {
			st = healthpb.HealthCheckResponse_SERVICE_UNKNOWN
		} else {
			st = r.GetStatus()
		}
	}
	for {
		if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
			return err
		}
		if st == healthpb.HealthCheckResponse_NOT_SERVING {
			return status.Error(codes.Unavailable, "reverie: the server is shutting down")
		}
		select {
		case <-h.closing:
			st = healthpb.HealthCheckResponse_NOT_SERVING
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		}
	}
}
