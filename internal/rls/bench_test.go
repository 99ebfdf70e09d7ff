package rls

import (
	"context"
	"strconv"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
)

func BenchmarkShouldRateLimit(b *testing.B) {
	cfg, err := config.Parse("bench.yaml", []byte("domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 10000000}\n"))
	if err != nil {
		b.Fatal(err)
	}
	st := memstore.New()
	defer st.Close()
	s := New(st, cfg)
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
