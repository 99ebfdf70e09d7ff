package rls

import (
	"context"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// FuzzShouldRateLimit: any request is answered with one status per
// descriptor, or InvalidArgument; never a panic, never another error.
func FuzzShouldRateLimit(f *testing.F) {
	f.Add("test", "key1", "a", "", "", uint32(0), int64(-1), uint32(0))
	f.Add("test", "nested", "a", "inner", "v", uint32(3), int64(0), uint32(0))
	f.Add("test", "two", "x", "wild", "foo", uint32(4000000000), int64(1<<40), uint32(2))
	f.Add("test", "shadow", "", "quota", "", uint32(1), int64(2), uint32(1))
	f.Add("", "", "", "", "", uint32(0), int64(-1), uint32(7))
	f.Add("other", "key1", "a", "", "", uint32(0), int64(-1), uint32(0))
	s, _ := newService(f)
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, hits uint32, dhits int64, unit uint32) {
		d1 := desc(k1, v1)
		if k2 != "" {
			d1.Entries = append(d1.Entries, &rlpb.RateLimitDescriptor_Entry{Key: k2, Value: v2})
		}
		if dhits >= 0 {
			d1.HitsAddend = wrapperspb.UInt64(uint64(dhits))
		}
		if unit > 0 {
			d1.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: hits % 100, Unit: typev3.RateLimitUnit(unit % 9)}
		}
		r := &pb.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: []*rlpb.RateLimitDescriptor{d1, desc(k2, v2)}}
		resp, err := s.ShouldRateLimit(context.Background(), r)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("ShouldRateLimit(%v): %v, want a response or InvalidArgument", r, err)
			}
			return
		}
		if len(resp.Statuses) != 2 {
			t.Fatalf("ShouldRateLimit(%v): %d statuses, want 2", r, len(resp.Statuses))
		}
		for _, st := range resp.Statuses {
			if st == nil {
				t.Fatalf("ShouldRateLimit(%v): nil status", r)
			}
		}
	})
}
