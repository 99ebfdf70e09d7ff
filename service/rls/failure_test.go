package rls

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/service/config"
)

// down is a shared store that never answers.
type down struct{}

var errDown = errors.New("connection refused")

func (down) AllowN(context.Context, string, sluice.Limit, int) (sluice.Decision, error) {
	return sluice.Decision{}, errDown
}

func (down) AllowMulti(context.Context, []sluice.Request) ([]sluice.Decision, error) {
	return nil, errDown
}

// A rule's failure_mode travels to failover in its Limit; when several
// rules apply, closed wins.
func TestFailureModePerRule(t *testing.T) {
	cfg, err := config.Parse("f.yaml", []byte(`domain: f
descriptors:
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 10, failure_mode: open}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 10, failure_mode: closed}
  - key: default
    rate_limit: {unit: hour, requests_per_unit: 10}
`))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := failover.New(down{}, failover.WithReplicas(2), failover.WithDefaultMode(sluice.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	s := newTestService(fs, cfg)
	r := func(keys ...string) *pb.RateLimitRequest {
		req := &pb.RateLimitRequest{Domain: "f"}
		for _, k := range keys {
			req.Descriptors = append(req.Descriptors, desc(k, "v"))
		}
		return req
	}
	// failure_mode open: the local share, 10/2 = 5 per hour, then denied.
	for i := range 5 {
		if got := call(t, s, r("open")); got.OverallCode != ok {
			t.Fatalf("open call %d: %v, want OK from the local share", i+1, got)
		}
	}
	if got := call(t, s, r("open")); got.OverallCode != over {
		t.Errorf("open call 6: %v, want OVER_LIMIT past the local share of 5", got)
	}
	for _, keys := range [][]string{{"closed"}, {"default"}, {"closed", "open"}} {
		if got := call(t, s, r(keys...)); got.OverallCode != over {
			t.Errorf("%v with the store down: %v, want OVER_LIMIT (fail closed)", keys, got.OverallCode)
		}
	}
}

// A store error (no failover) is Unavailable; a key the store rejects is
// InvalidArgument.
func TestStoreErrors(t *testing.T) {
	cfg, err := config.Parse("e.yaml", []byte("domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := newTestService(down{}, cfg)
	_, err = s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "e", Descriptors: []*rlpb.RateLimitDescriptor{desc("k", "v")}})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("store down: %v, want Unavailable naming the cause", err)
	}
	s2, _ := newService(t)
	_, err = s2.ShouldRateLimit(context.Background(), req(desc("key1", strings.Repeat("x", sluice.MaxKeyLen))))
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("a value longer than the key limit: %v, want InvalidArgument", err)
	}
}

// Under the failure mode error the store makes no decision, and the
// answer is the gRPC error envoyproxy/ratelimit answers while its Redis
// fails: Unknown, for Envoy's failure_mode_deny to decide. A rule's own
// mode still wins.
func TestFailureModeError(t *testing.T) {
	cfg, err := config.Parse("f.yaml", []byte(`domain: f
descriptors:
  - key: default
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 10, failure_mode: closed}
`))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := failover.New(down{}, failover.WithDefaultMode(sluice.FailError))
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	s := newTestService(fs, cfg)
	for range 8 { // through the failures that open the breaker, and past them
		_, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "f", Descriptors: []*rlpb.RateLimitDescriptor{desc("default", "v")}})
		if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "no decision") {
			t.Fatalf("store down, failure mode error: %v, want Unknown saying no decision was made", err)
		}
	}
	if got := call(t, s, &pb.RateLimitRequest{Domain: "f", Descriptors: []*rlpb.RateLimitDescriptor{desc("closed", "v")}}); got.OverallCode != over {
		t.Errorf("a rule failing closed: %v, want OVER_LIMIT", got.OverallCode)
	}
}

// hangs is a shared store that answers only when its call's context ends.
type hangs struct{}

func (hangs) AllowN(ctx context.Context, _ string, _ sluice.Limit, _ int) (sluice.Decision, error) {
	<-ctx.Done()
	return sluice.Decision{}, ctx.Err()
}

// Under the failure mode error, a store call that passes failover's own
// deadline (the caller's context still alive) is Unknown too, the answer
// while the store fails; a caller whose own context ended gets its code.
func TestFailureModeErrorTimeout(t *testing.T) {
	cfg, err := config.Parse("f.yaml", []byte("domain: f\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := failover.New(hangs{}, failover.WithDefaultMode(sluice.FailError), failover.WithTimeout(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	s := newTestService(fs, cfg)
	r := &pb.RateLimitRequest{Domain: "f", Descriptors: []*rlpb.RateLimitDescriptor{desc("k", "v")}}
	if _, err := s.ShouldRateLimit(context.Background(), r); status.Code(err) != codes.Unknown {
		t.Errorf("store past failover's deadline, failure mode error: %v, want Unknown", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.ShouldRateLimit(ctx, r); status.Code(err) != codes.Canceled {
		t.Errorf("the caller's context cancelled: %v, want Canceled", err)
	}
}
