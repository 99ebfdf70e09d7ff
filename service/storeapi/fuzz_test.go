package storeapi_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	storev1 "github.com/sluicehq/sluice/api/sluice/store/v1"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/storeapi"
)

// FuzzRequest decodes arbitrary bytes as each method's request, as gRPC
// does, and hands it to the server over a memory store with the service's
// default bounds: it never panics, and answers either a decision or
// InvalidArgument naming a field (or, for a Capabilities probe, an
// answer; a Grant, at most the units asked for). The memory store always answers, so no other status may come.
func FuzzRequest(f *testing.F) {
	lim := &storev1.Limit{Algorithm: storev1.Algorithm_ALGORITHM_SLIDING_LOG, Rate: 500, PeriodNanos: int64(time.Hour), Counting: storev1.Counting_COUNTING_ADMITTED}
	seeds := []proto.Message{
		&storev1.AllowNRequest{Key: []byte("k"), Limit: lim, N: 3},
		&storev1.AllowMultiRequest{Requests: []*storev1.Request{{Key: []byte("a"), Limit: lim, N: 250}, {Key: []byte("b"), Limit: lim, N: 250}}},
		&storev1.ReserveRequest{Key: []byte("k"), Limit: &storev1.Limit{Algorithm: storev1.Algorithm_ALGORITHM_GCRA, Rate: 1e9, PeriodNanos: 1e6, Burst: 1e9}, N: 1e9},
		&storev1.ReturnRequest{Key: []byte("k"), Limit: &storev1.Limit{Algorithm: storev1.Algorithm_ALGORITHM_TOKEN_BUCKET, Rate: 5, PeriodNanos: 1e9, Counting: storev1.Counting_COUNTING_ALL}, N: 1 << 31},
		&storev1.AcquireRequest{Key: []byte("k"), Limit: &storev1.ConcurrencyLimit{Max: 10000, TtlNanos: int64(24 * time.Hour)}, Holder: []byte("h")},
		&storev1.ExtendRequest{Key: []byte("k"), Limit: &storev1.ConcurrencyLimit{Max: 1, TtlNanos: int64(10 * time.Millisecond)}, Holder: []byte("h")},
	}
	grant := &storev1.GrantRequest{Key: []byte("k"), Limit: &storev1.Limit{Algorithm: storev1.Algorithm_ALGORITHM_FIXED_WINDOW, Rate: 100, PeriodNanos: 1e9},
		Holder: []byte("eu"), N: 10, Demand: 300, Allowance: 30, TtlNanos: int64(time.Second), Spent: 5,
		NotAfter: &timestamppb.Timestamp{Seconds: 4e9}, SpentWindow: &timestamppb.Timestamp{Seconds: 1}}
	for i, m := range seeds {
		b, _ := proto.Marshal(m)
		f.Add(uint8(i), b)
	}
	f.Add(uint8(6), []byte{0x0a, 0x00})
	f.Add(uint8(7), []byte{0x12, 0x04, 0x08, 0xac, 0x02, 0x10})
	gb, _ := proto.Marshal(grant)
	f.Add(uint8(9), gb)
	m := memstore.New(memstore.WithMaxKeys(10000))
	f.Cleanup(func() { m.Close() })
	srv, err := storeapi.New(m, storeapi.WithBounds(engine.DefaultBounds))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method uint8, b []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var err error
		switch method % 10 {
		case 0:
			req := &storev1.AllowNRequest{}
			if proto.Unmarshal(b, req) != nil {
				return
			}
			_, err = srv.AllowN(ctx, req)
		case 1:
			req := &storev1.AllowMultiRequest{}
			if proto.Unmarshal(b, req) != nil {
				return
			}
			var resp *storev1.AllowMultiResponse
			resp, err = srv.AllowMulti(ctx, req)
			if err == nil && len(resp.GetDecisions()) != len(req.GetRequests()) {
				t.Fatalf("AllowMulti: %d decisions for %d requests", len(resp.GetDecisions()), len(req.GetRequests()))
			}
		case 2:
			req := &storev1.ReserveRequest{}
			if proto.Unmarshal(b, req) != nil {
				return
			}
			_, err = srv.Reserve(ctx, req)
		case 3:
			req := &storev1.ReturnRequest{}
			if proto.Unmarshal(b, req) != nil {
				return
			}
			_, err = srv.Return(ctx, req)
		case 4:
			req := &storev1.AcquireRequest{}
			if proto.Unmarshal(b, req) != nil {
				return
			}
			_, err = srv.Acquire(ctx, req)
		case 5:
			req := &storev1.ExtendRequest{}
			if proto.Unmarshal(b, req) != nil {
				return
			}
			_, err = srv.Extend(ctx, req)
		case 6:
			req := &storev1.ReleaseRequest{}
			if proto.Unmarshal(b, req) != nil {
				return
			}
			_, err = srv.Release(ctx, req)
		case 7:
			req := &storev1.ResetRequest{}
			if proto.Unmarshal(b, req) != nil {
				return
			}
			_, err = srv.Reset(ctx, req)
		case 8:
			req := &storev1.CapabilitiesRequest{}
			if proto.Unmarshal(b, req) != nil {
				return
			}
			_, err = srv.Capabilities(ctx, req)
		case 9:
			req := &storev1.GrantRequest{}
			if proto.Unmarshal(b, req) != nil {
				return
			}
			var resp *storev1.GrantResponse
			resp, err = srv.Grant(ctx, req)
			if err == nil && (resp.GetUnits() < 0 || resp.GetUnits() > req.GetN()) {
				t.Fatalf("Grant: %d units for n = %d", resp.GetUnits(), req.GetN())
			}
		}
		if err == nil {
			return
		}
		st, _ := status.FromError(err)
		if st.Code() != codes.InvalidArgument {
			t.Fatalf("method %d: %v, want an answer or InvalidArgument", method%10, err)
		}
		for _, d := range st.Details() {
			if e, ok := d.(*storev1.Error); ok && e.GetField() != "" && e.GetKind() != storev1.Error_KIND_UNSPECIFIED {
				return
			}
		}
		t.Fatalf("method %d: %v names no field", method%10, err)
	})
}
