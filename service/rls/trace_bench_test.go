package rls

import (
	"context"
	"strconv"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/metrics"
	"github.com/sluicehq/sluice/service/tracing"
)

// discard is a span exporter that drops what it is sent.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkShouldRateLimitTraced is BenchmarkShouldRateLimit with tracing
// on and every call sampled: the server span of the gRPC interceptor, from
// a caller's traceparent, the decision's attributes and the store call's
// child span, batched to an exporter that drops them.
func BenchmarkShouldRateLimitTraced(b *testing.B) {
	cfg, err := config.Parse("bench.yaml", []byte("domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 10000000}\n"))
	if err != nil {
		b.Fatal(err)
	}
	st := memstore.New()
	defer st.Close()
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer tp.Shutdown(context.Background())
	tr := tracing.New(tp, false)
	s := newTestService(metrics.Observe(st, nopCalls{}, tr), cfg, withEngine(engine.WithTracer(tr)))
	intercept := tr.UnaryInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/" + ServiceName + "/ShouldRateLimit"}
	handler := func(ctx context.Context, req any) (any, error) {
		return s.ShouldRateLimit(ctx, req.(*pb.RateLimitRequest))
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"))
	reqs := make([]*pb.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlpb.RateLimitDescriptor{desc("user", "u"+strconv.Itoa(i))}}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := intercept(ctx, reqs[i%len(reqs)], info, handler); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
