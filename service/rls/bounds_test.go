package rls

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
)

// many returns n descriptors key1=v<i>.
func many(n int) []*rlpb.RateLimitDescriptor {
	ds := make([]*rlpb.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = desc("key1", fmt.Sprint("v", i))
	}
	return ds
}

// TestBounds: each bound admits its largest value and refuses one more
// with InvalidArgument naming the field and the bound, before any store
// call.
func TestBounds(t *testing.T) {
	b := engine.Bounds{MaxRate: 100, MaxBurst: 10, MaxPeriod: time.Hour, MaxHits: 20, MaxDescriptors: 4, MaxDescriptorEntries: 3}
	deep := func(n int) *rlpb.RateLimitDescriptor {
		kv := []string{"nested", "x"}
		for i := 1; i < n; i++ {
			kv = append(kv, fmt.Sprint("k", i), "v")
		}
		return desc(kv...)
	}
	withHits := func(d *rlpb.RateLimitDescriptor, h uint64) *rlpb.RateLimitDescriptor {
		d.HitsAddend = wrapperspb.UInt64(h)
		return d
	}
	override := func(rpu uint32, unit typev3.RateLimitUnit) *rlpb.RateLimitDescriptor {
		d := desc("key1", "o")
		d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		return d
	}
	reqHits := func(h uint32, ds ...*rlpb.RateLimitDescriptor) *pb.RateLimitRequest {
		r := req(ds...)
		r.HitsAddend = h
		return r
	}
	tests := []struct {
		name    string
		give    *pb.RateLimitRequest
		wantErr string // "" when admitted
	}{
		{"descriptors at the bound", req(many(4)...), ""},
		{"descriptors one past", req(many(5)...), "descriptors 5 exceeds --max-descriptors 4"},
		{"entries at the bound", req(deep(3)), ""},
		{"entries one past", req(deep(4)), "descriptors[0].entries 4 exceeds --max-descriptor-entries 3"},
		{"request hits at the bound", reqHits(20, desc("key1", "h")), ""},
		{"request hits one past", reqHits(21, desc("key1", "h")), "hits_addend 21 exceeds --max-hits 20"},
		{"descriptor hits at the bound", req(withHits(desc("key1", "h"), 20)), ""},
		{"descriptor hits one past", req(desc("key1", "a"), withHits(desc("key1", "h"), 21)), "descriptors[1].hits_addend 21 exceeds --max-hits 20"},
		{"descriptor hits far past", req(withHits(desc("key1", "h"), 1<<63)), "descriptors[0].hits_addend 4611686018427387904 exceeds --max-hits 20"},
		{"override rate at the bound", req(override(100, typev3.RateLimitUnit_HOUR)), ""},
		{"override rate one past", req(override(101, typev3.RateLimitUnit_HOUR)), "descriptors[0].limit.requests_per_unit 101 exceeds --max-rate 100"},
		{"override unit past the period", req(override(1, typev3.RateLimitUnit_DAY)), "descriptors[0].limit.unit 24h0m0s exceeds --max-period 1h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, calls := countingService(t, withEngine(engine.WithBounds(b)))
			_, err := s.ShouldRateLimit(context.Background(), tt.give)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ShouldRateLimit = %v, want an answer", err)
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.wantErr) {
				t.Fatalf("ShouldRateLimit = %v, want InvalidArgument %q", err, tt.wantErr)
			}
			if calls.n != 0 {
				t.Errorf("%d store calls before the bound was checked, want 0", calls.n)
			}
		})
	}
}

// countingService is a Service of testConfig on a memory store that counts
// its AllowN calls (and has no AllowMulti).
func countingService(t *testing.T, opts ...option) (*Service, *countingStore) {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	ms := memstore.New()
	t.Cleanup(func() { ms.Close() })
	calls := &countingStore{Store: ms}
	return newTestService(calls, cfg, opts...), calls
}

// countingStore counts AllowN calls.
type countingStore struct {
	sluice.Store
	n int
}

func (c *countingStore) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	c.n++
	return c.Store.AllowN(ctx, key, lim, n)
}

// TestMaxMultiRequests: a request whose descriptors apply more limits than
// one all-or-nothing decision takes is InvalidArgument; at the bound it is
// decided.
func TestMaxMultiRequests(t *testing.T) {
	s, _ := newService(t, withEngine(engine.WithBounds(engine.Bounds{})))
	if _, err := s.ShouldRateLimit(context.Background(), req(many(sluice.MaxMultiRequests)...)); err != nil {
		t.Fatalf("ShouldRateLimit of %d limits = %v, want an answer", sluice.MaxMultiRequests, err)
	}
	_, err := s.ShouldRateLimit(context.Background(), req(many(sluice.MaxMultiRequests+1)...))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "apply 17 limits, more than 16") {
		t.Fatalf("ShouldRateLimit of %d limits = %v, want InvalidArgument", sluice.MaxMultiRequests+1, err)
	}
}

// TestDefaultBounds: an engine without WithBounds has DefaultBounds.
func TestDefaultBounds(t *testing.T) {
	s, _ := newService(t)
	if s.Engine().Bounds() != engine.DefaultBounds {
		t.Errorf("Bounds() = %+v, want DefaultBounds %+v", s.Engine().Bounds(), engine.DefaultBounds)
	}
	_, err := s.ShouldRateLimit(context.Background(), req(many(engine.DefaultBounds.MaxDescriptors+1)...))
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("ShouldRateLimit of %d descriptors = %v, want InvalidArgument", engine.DefaultBounds.MaxDescriptors+1, err)
	}
}

// TestCheckLimit: the /v1/check bounds at their edges.
func TestCheckLimit(t *testing.T) {
	b := engine.Bounds{MaxRate: 100, MaxBurst: 10, MaxPeriod: time.Hour, MaxHits: 20}
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 100, Period: time.Hour, Burst: 10}
	if err := b.CheckLimit(lim, 20); err != nil {
		t.Errorf("CheckLimit at every bound = %v, want nil", err)
	}
	tests := []struct {
		lim     sluice.Limit
		cost    int
		wantErr string
	}{
		{sluice.Limit{Algorithm: sluice.GCRA, Rate: 101, Period: time.Hour}, 1, "rate 101 exceeds --max-rate 100"},
		{sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Hour, Burst: 11}, 1, "burst 11 exceeds --max-burst 10"},
		{sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Hour + time.Microsecond}, 1, "period 1h0m0.000001s exceeds --max-period 1h0m0s"},
		{lim, 21, "cost 21 exceeds --max-hits 20"},
	}
	for _, tt := range tests {
		if err := b.CheckLimit(tt.lim, tt.cost); err == nil || err.Error() != tt.wantErr {
			t.Errorf("CheckLimit(%v, %d) = %v, want %q", tt.lim, tt.cost, err, tt.wantErr)
		}
	}
}

// TestManyDescriptorsLinear: with the descriptor bounds off and a store
// without AllowMulti, a request of 20,000 descriptors on one counter is
// decided with one store call per limit, and the work of summing the
// request's costs per counter and of reporting each descriptor grows
// linearly: BenchmarkManyDescriptors compares 1k and 10k.
func TestManyDescriptorsLinear(t *testing.T) {
	s, calls := countingService(t, withEngine(engine.WithBounds(engine.Bounds{})))
	ds := make([]*rlpb.RateLimitDescriptor, 20_000)
	for i := range ds {
		ds[i] = desc("key1", "same")
	}
	r := req(ds...)
	r.HitsAddend = 0
	resp, err := s.ShouldRateLimit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	// 20,000 costs of 1 on a counter of 20: the 21st and later can never be
	// admitted with the earlier ones, so the request is denied by peeks.
	if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || len(resp.Statuses) != len(ds) {
		t.Fatalf("ShouldRateLimit of %d descriptors: %v with %d statuses, want OVER_LIMIT with %d", len(ds), resp.OverallCode, len(resp.Statuses), len(ds))
	}
	if calls.n != len(ds) {
		t.Errorf("%d store calls, want %d (one per limit)", calls.n, len(ds))
	}
}

// BenchmarkManyDescriptors: one request of n descriptors, the descriptor
// bounds off; the time per request should grow about tenfold from 1k to
// 10k (it grew a hundredfold with the scan over earlier costs).
func BenchmarkManyDescriptors(b *testing.B) {
	cfg, err := config.Parse("bench.yaml", []byte("domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n"))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprint("descriptors=", n), func(b *testing.B) {
			st := memstore.New()
			defer st.Close()
			s := newTestService(struct{ sluice.Store }{st}, cfg, withEngine(engine.WithBounds(engine.Bounds{}))) // one AllowN per limit
			ds := make([]*rlpb.RateLimitDescriptor, n)
			for i := range ds {
				ds[i] = desc("user", fmt.Sprint("u", i%100))
			}
			r := &pb.RateLimitRequest{Domain: "bench", Descriptors: ds}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.ShouldRateLimit(context.Background(), r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRawBytesKeys: entry values are counted by their bytes, UTF-8 or not
// (GET /v1/auth passes header bytes as they are): two values that differ
// only in bytes that are not UTF-8 never share a counter.
func TestRawBytesKeys(t *testing.T) {
	s, _ := newService(t)
	// wild=foo* allows 1 per minute per value.
	for _, v := range []string{"foo\xff", "foo\xfe", "foo\uFFFD"} {
		resp, err := s.ShouldRateLimit(context.Background(), req(desc("wild", v)))
		if err != nil || resp.OverallCode != pb.RateLimitResponse_OK {
			t.Errorf("first request on %q = %v, %v; want OK (a counter of its own)", v, resp.GetOverallCode(), err)
		}
	}
	if resp, err := s.ShouldRateLimit(context.Background(), req(desc("wild", "foo\xff"))); err != nil || resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("second request on %q = %v, %v; want OVER_LIMIT", "foo\xff", resp.GetOverallCode(), err)
	}
}
