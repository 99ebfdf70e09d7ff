package rls

import (
	"context"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/metrics"
	"github.com/sluicehq/sluice/stack"
)

// nopCalls is a metrics.StoreObserver that keeps nothing.
type nopCalls struct{}

func (nopCalls) StoreCall(time.Duration, error) {}

// benchConfig admits and counts every call (a fixed window of 10 million
// per second per user), as bench/loadgen's configuration does, so that the
// figures measure the decision path, not the denial shortcut; "two" has
// two limits per descriptor (decided together) and "all" counts every hit.
const benchConfig = `domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 10000000}
  - key: two
    rate_limits:
      - {unit: second, requests_per_unit: 10000000}
      - {unit: minute, requests_per_unit: 100000000}
  - key: all
    rate_limit: {unit: second, requests_per_unit: 10000000, counting: all}
`

// BenchmarkShouldRateLimit is ShouldRateLimit through the rls handler, as
// sluice serve calls it (every store call observed), over 1000 users: on
// the memory store, and on a real redis-server through the stack sluice
// serve --redis builds (failover over redisstore). Per request: one
// descriptor of one limit (one), two descriptors of one limit each (two
// descriptors), one descriptor of two limits, and one limit counting every
// hit beside one counting what it admits (countall).
func BenchmarkShouldRateLimit(b *testing.B) {
	cfg, err := config.Parse("bench.yaml", []byte(benchConfig))
	if err != nil {
		b.Fatal(err)
	}
	shapes := []struct {
		name string
		req  func(u string) *pb.RateLimitRequest
	}{
		{"one", func(u string) *pb.RateLimitRequest {
			return &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlpb.RateLimitDescriptor{desc("user", u)}}
		}},
		{"descriptors=2", func(u string) *pb.RateLimitRequest {
			return &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlpb.RateLimitDescriptor{desc("user", u), desc("user", u+"b")}}
		}},
		{"limits=2", func(u string) *pb.RateLimitRequest {
			return &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlpb.RateLimitDescriptor{desc("two", u)}}
		}},
		{"countall", func(u string) *pb.RateLimitRequest {
			return &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlpb.RateLimitDescriptor{desc("user", u), desc("all", u)}}
		}},
	}
	var srv *redistest.Instance // the redis-server of store=redis
	stores := []struct {
		name string
		open func(b *testing.B) sluice.Store
	}{
		{"memory", func(b *testing.B) sluice.Store {
			st := memstore.New()
			b.Cleanup(func() { st.Close() })
			return st
		}},
		{"redis", func(b *testing.B) sluice.Store {
			srv = redistest.Server(b)
			rs, err := redisstore.Open(context.Background(), srv.URL())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { rs.Close() })
			// A deadline no scheduling delay of this shared machine
			// reaches: a degraded decision would be measured otherwise.
			st, err := stack.New(rs, stack.WithFailover(failover.WithTimeout(10*time.Second)))
			if err != nil {
				b.Fatal(err)
			}
			return st
		}},
	}
	for _, sto := range stores {
		b.Run("store="+sto.name, func(b *testing.B) {
			st := sto.open(b)
			for _, sh := range shapes {
				b.Run(sh.name, func(b *testing.B) {
					s := newTestService(metrics.Observe(st, nopCalls{}, nil), cfg)
					reqs := make([]*pb.RateLimitRequest, 1000)
					for i := range reqs {
						reqs[i] = sh.req("u" + strconv.Itoa(i))
					}
					if sto.name == "redis" {
						// 64 callers, as bench/loadgen's, so that decisions
						// share round trips as they do under load.
						b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1))
					}
					var r0 int
					if sto.name == "redis" {
						r0 = scriptRuns(srv)
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
					if sto.name == "redis" {
						b.ReportMetric(float64(scriptRuns(srv)-r0)/float64(b.N), "scripts/op")
					}
				})
			}
		})
	}
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

// scriptRuns is the number of scripts Redis has run (EVALSHA and EVAL
// calls, from INFO commandstats): per request, below 1 when concurrent
// decisions share script runs.
func scriptRuns(srv *redistest.Instance) int {
	n := 0
	for _, l := range strings.Split(srv.MustDo("INFO", "commandstats"), "\n") {
		name, rest, _ := strings.Cut(strings.TrimSpace(l), ":")
		if name != "cmdstat_evalsha" && name != "cmdstat_eval" {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				c, _ := strconv.Atoi(v)
				n += c
			}
		}
	}
	return n
}
