package rls

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/metrics"
)

// nopCalls is a metrics.StoreObserver that keeps nothing.
type nopCalls struct{}

func (nopCalls) StoreCall(time.Duration, error) {}

func BenchmarkShouldRateLimit(b *testing.B) {
	cfg, err := config.Parse("bench.yaml", []byte("domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 10000000}\n"))
	if err != nil {
		b.Fatal(err)
	}
	st := memstore.New()
	defer st.Close()
	// The store as sluice serve calls it: every call timed.
	s := newTestService(metrics.Observe(st, nopCalls{}, nil), cfg)
	reqs := make([]*pb.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlpb.RateLimitDescriptor{desc("user", "u"+strconv.Itoa(i))}}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := s.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkGRPC is ShouldRateLimit through a real gRPC server and client on
// loopback: what one call costs end to end, both sides on this machine.
func BenchmarkGRPC(b *testing.B) {
	cfg, err := config.Parse("bench.yaml", []byte("domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 10000000}\n"))
	if err != nil {
		b.Fatal(err)
	}
	st := memstore.New()
	defer st.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	Register(gs, newTestService(st, cfg))
	go gs.Serve(lis)
	defer gs.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	client := pb.NewRateLimitServiceClient(cc)
	reqs := make([]*pb.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlpb.RateLimitDescriptor{desc("user", "u"+strconv.Itoa(i))}}
	}
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(p *testing.PB) {
		i := 0
		for p.Next() {
			if _, err := client.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
