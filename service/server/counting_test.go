package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/metrics"
	"github.com/sluicehq/sluice/service/rls"
)

const countingConfig = `
domain: c
descriptors:
  - key: fw
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: adm
    rate_limit: {unit: hour, requests_per_unit: 5, counting: admitted}
  - key: det
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 10}
`

// grpcService serves countingConfig over gRPC on loopback, on a memory
// store, with the service's metrics, and returns a client.
func grpcService(t *testing.T, opts ...engine.Option) (pb.RateLimitServiceClient, *Server) {
	t.Helper()
	cfg, err := config.Parse("c.yaml", []byte(countingConfig))
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	m := metrics.New()
	svc := rls.New(engine.New(st, cfg, append([]engine.Option{engine.WithObserver(m)}, opts...)...))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rls.Register(gs, svc)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewRateLimitServiceClient(cc), New(svc, st, WithMetrics(m))
}

func rlDesc(key, value string, hits int64, negative bool) *rlpb.RateLimitDescriptor {
	d := &rlpb.RateLimitDescriptor{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: key, Value: value}}, IsNegativeHits: negative}
	if hits >= 0 {
		d.HitsAddend = wrapperspb.UInt64(uint64(hits))
	}
	return d
}

// answer is a descriptor's code and limit_remaining.
type answer struct {
	code      pb.RateLimitResponse_Code
	remaining uint32
}

func ask(t *testing.T, c pb.RateLimitServiceClient, ds ...*rlpb.RateLimitDescriptor) []answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "c", Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	out := make([]answer, len(resp.Statuses))
	for i, st := range resp.Statuses {
		out[i] = answer{st.Code, st.LimitRemaining}
	}
	return out
}

const (
	okCode   = pb.RateLimitResponse_OK
	overCode = pb.RateLimitResponse_OVER_LIMIT
)

// TestGRPCCountingAll: with the service's counting all, a charge above the
// limit is recorded and the budget denies, a peek included, until it is
// refunded below the limit; a rule counting admitted keeps its own.
func TestGRPCCountingAll(t *testing.T) {
	c, _ := grpcService(t, engine.WithCounting(sluice.CountAll))
	steps := []struct {
		give []*rlpb.RateLimitDescriptor
		want []answer
	}{
		{[]*rlpb.RateLimitDescriptor{rlDesc("fw", "t", 0, false)}, []answer{{okCode, 10}}},
		{[]*rlpb.RateLimitDescriptor{rlDesc("fw", "t", 14, false)}, []answer{{overCode, 0}}}, // charged: 14 of 10
		{[]*rlpb.RateLimitDescriptor{rlDesc("fw", "t", 0, false)}, []answer{{overCode, 0}}},  // in debt
		{[]*rlpb.RateLimitDescriptor{rlDesc("fw", "t", 6, true)}, []answer{{okCode, 0}}},     // refund: 8 of 10
		{[]*rlpb.RateLimitDescriptor{rlDesc("fw", "t", 0, false)}, []answer{{okCode, 2}}},
		{[]*rlpb.RateLimitDescriptor{rlDesc("adm", "t", 6, false)}, []answer{{overCode, 0}}}, // admitted: not charged
		{[]*rlpb.RateLimitDescriptor{rlDesc("adm", "t", 0, false)}, []answer{{okCode, 5}}},
	}
	for i, s := range steps {
		if got := ask(t, c, s.give...); fmt.Sprint(got) != fmt.Sprint(s.want) {
			t.Errorf("step %d: %v, want %v", i, got, s.want)
		}
	}
}

// TestGRPCRefund: is_negative_hits gives the hits back and answers OK with
// the limit, nothing remaining and no reset.
func TestGRPCRefund(t *testing.T) {
	c, _ := grpcService(t)
	ask(t, c, rlDesc("fw", "r", 7, false))
	resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "c", Descriptors: []*rlpb.RateLimitDescriptor{rlDesc("fw", "r", 4, true)}})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Statuses[0]
	if st.Code != okCode || st.CurrentLimit.GetRequestsPerUnit() != 10 || st.LimitRemaining != 0 || st.DurationUntilReset != nil {
		t.Errorf("refund status = %v, want OK with its limit, no remaining, no reset", st)
	}
	if got := ask(t, c, rlDesc("fw", "r", 0, false)); got[0] != (answer{okCode, 7}) {
		t.Errorf("after spending 7 and giving 4 back: %v, want OK with 7 remaining", got)
	}
}

// TestGRPCNearLimitMetrics: the hits of a sequence on a limit of 10 split
// into within, near (above 8, the default ratio 0.8) and over, by rule.
func TestGRPCNearLimitMetrics(t *testing.T) {
	c, s := grpcService(t)
	for _, h := range []int64{6, 3, 1, 5} { // 6 within; 3 within, 1 near; 1 within and near; 5 over
		ask(t, c, rlDesc("fw", "m", h, false))
	}
	ask(t, c, rlDesc("fw", "m", 2, true)) // a refund counts in no hits metric
	out := do(t, s, "GET", "/metrics", "").Body.String()
	for _, want := range []string{
		`sluice_rls_hits_total{domain="c",rule="c.fw"} 15`,
		`sluice_rls_within_limit_hits_total{domain="c",rule="c.fw"} 10`,
		`sluice_rls_near_limit_hits_total{domain="c",rule="c.fw"} 2`,
		`sluice_rls_over_limit_hits_total{domain="c",rule="c.fw"} 5`,
		`sluice_rls_decisions_total{domain="c",result="refunded",rule="c.fw"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestDetailedMetricBounded: a detailed_metric rule's names label their
// own series, at most metrics.MaxDetailedNames of them, the others _other; no other
// metric carries a request's value.
func TestDetailedMetricBounded(t *testing.T) {
	c, s := grpcService(t)
	for i := range metrics.MaxDetailedNames + 5 {
		ask(t, c, rlDesc("det", fmt.Sprint("v", i), 1, false))
	}
	ask(t, c, rlDesc("fw", "secret", 1, false))
	out := do(t, s, "GET", "/metrics", "").Body.String()
	for _, want := range []string{
		`sluice_rls_detailed_decisions_total{descriptor="c.det_v0",domain="c",result="ok",rule="c.det"} 1`,
		fmt.Sprintf(`sluice_rls_detailed_decisions_total{descriptor="c.det_v%d",domain="c",result="ok",rule="c.det"} 1`, metrics.MaxDetailedNames-1),
		`sluice_rls_detailed_decisions_total{descriptor="_other",domain="c",result="ok",rule="c.det"} 5`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if n := strings.Count(out, "sluice_rls_detailed_decisions_total{"); n != metrics.MaxDetailedNames+1 {
		t.Errorf("%d detailed series, want %d", n, metrics.MaxDetailedNames+1)
	}
	if strings.Contains(out, "secret") || strings.Contains(out, fmt.Sprintf("c.det_v%d", metrics.MaxDetailedNames)) {
		t.Errorf("/metrics carries a request value it must not")
	}
}
