package main

import (
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

// The hand-encoded header block decodes, with a standard HPACK decoder, to
// the headers of a gRPC call, and leaves the decoder's dynamic table empty.
func TestH2RequestHeader(t *testing.T) {
	var got []hpack.HeaderField
	d := hpack.NewDecoder(4096, func(f hpack.HeaderField) { got = append(got, hpack.HeaderField{Name: f.Name, Value: f.Value}) })
	long := "/" + string(make([]byte, 300)) // a length over one byte's prefix
	for i, path := range []string{"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", long} {
		timeout := time.Duration(i) * 20 * time.Millisecond // none, then Envoy's default
		got = nil
		if _, err := d.Write(h2RequestHeader("127.0.0.1:8081", path, timeout)); err != nil {
			t.Fatalf("decode: %v", err)
		}
		want := []hpack.HeaderField{
			{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
			{Name: ":path", Value: path}, {Name: ":authority", Value: "127.0.0.1:8081"},
			{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
		}
		if timeout > 0 {
			want = append(want, hpack.HeaderField{Name: "grpc-timeout", Value: "20m"})
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("headers (-want +got):\n%s", diff)
		}
	}
}

func TestGRPCTimeout(t *testing.T) {
	for d, want := range map[time.Duration]string{
		20 * time.Millisecond: "20m", time.Second: "1000m", 500 * time.Microsecond: "500u",
		time.Nanosecond: "1u", 1000 * time.Hour: "99999999m",
	} {
		if got := grpcTimeout(d); got != want {
			t.Errorf("grpcTimeout(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestOverallCode(t *testing.T) {
	for _, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		b, err := proto.Marshal(&pb.RateLimitResponse{
			Statuses:    []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OK, LimitRemaining: 7}},
			OverallCode: want,
		})
		if err != nil {
			t.Fatal(err)
		}
		body, err := grpcPayload(grpcMessage(b))
		if err != nil {
			t.Fatal(err)
		}
		got, err := overallCode(body)
		if err != nil || pb.RateLimitResponse_Code(got) != want {
			t.Errorf("overallCode = %v, %v; want %v", got, err, want)
		}
	}
	if _, err := overallCode([]byte{0x08}); err == nil {
		t.Error("overallCode of a truncated varint: no error")
	}
	if _, err := grpcPayload([]byte{0, 0, 0, 0, 9, 1}); err == nil {
		t.Error("grpcPayload with a short body: no error")
	}
}
