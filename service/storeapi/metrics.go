package storeapi

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// metrics count the store API's calls.
type metrics struct {
	calls    *prometheus.CounterVec   // by method and code
	duration *prometheus.HistogramVec // by method
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_store_api_requests_total",
			Help: "Calls of the store API (--store-api-addr) by method and gRPC status code: OK for an answer (a denial included), InvalidArgument, Unimplemented, Unauthenticated, PermissionDenied, Unavailable, ...",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_store_api_request_duration_seconds",
			Help:    "Time to answer a call of the store API, by method.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"method"}),
	}
	for _, c := range []prometheus.Collector{m.calls, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe is the interceptor that counts each call and times it.
func (s *Server) observe(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if s.metrics == nil {
		return h(ctx, req)
	}
	start := time.Now()
	resp, err := h(ctx, req)
	method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
	s.metrics.duration.WithLabelValues(method).Observe(time.Since(start).Seconds())
	s.metrics.calls.WithLabelValues(method, status.Code(err).String()).Inc()
	return resp, err
}
