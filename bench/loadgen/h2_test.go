package main

import (
	"bytes"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

// The hand-encoded header blocks decode, with a standard HPACK decoder, to
// the headers of a gRPC call: indexed, the first block fills the decoder's
// dynamic table and the later ones refer to it; literal, every block is
// the same.
func TestH2RequestHeaders(t *testing.T) {
	long := "/" + string(make([]byte, 300)) // a length over one byte's prefix
	for _, indexed := range []bool{true, false} {
		for i, path := range []string{"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", long} {
			timeout := time.Duration(i) * 20 * time.Millisecond // none, then Envoy's default
			var got []hpack.HeaderField
			d := hpack.NewDecoder(4096, func(f hpack.HeaderField) { got = append(got, hpack.HeaderField{Name: f.Name, Value: f.Value}) })
			want := []hpack.HeaderField{
				{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
				{Name: ":path", Value: path}, {Name: ":authority", Value: "127.0.0.1:8081"},
				{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
			}
			if timeout > 0 {
				want = append(want, hpack.HeaderField{Name: "grpc-timeout", Value: "20m"})
			}
			first, later := h2RequestHeaders("127.0.0.1:8081", path, timeout, indexed)
			for j, block := range [][]byte{first, later, later} {
				got = nil
				if _, err := d.Write(block); err != nil {
					t.Fatalf("indexed=%v block %d: decode: %v", indexed, j, err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("indexed=%v block %d: headers (-want +got):\n%s", indexed, j, diff)
				}
			}
			if !indexed && !bytes.Equal(first, later) {
				t.Errorf("literal: the first block differs from the later ones")
			}
			if indexed && len(later) >= len(first)/4 {
				t.Errorf("indexed: later blocks of %d bytes, the first of %d", len(later), len(first))
			}
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

func TestParseIO(t *testing.T) {
	// The text of /proc/<pid>/io on Linux.
	const io = "rchar: 123\nwchar: 456\nsyscr: 789\nsyscw: 1011\nread_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n"
	r, w, err := parseIO(io)
	if err != nil || r != 789 || w != 1011 {
		t.Fatalf("parseIO = %d, %d, %v; want 789, 1011, nil", r, w, err)
	}
	if _, _, err := parseIO("rchar: 1\nsyscr: 2\n"); err == nil {
		t.Fatal("parseIO without syscw: no error")
	}
	if _, _, err := parseIO("syscr: x\nsyscw: 1\n"); err == nil {
		t.Fatal("parseIO with syscr x: no error")
	}
}

func TestParseSwitches(t *testing.T) {
	const status = "Name:\tsluice\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t150\nnonvoluntary_ctxt_switches:\t7\n"
	if got := parseSwitches(status); got != 157 {
		t.Fatalf("parseSwitches = %d, want 157", got)
	}
	if got := parseSwitches("Name:\tx\n"); got != 0 {
		t.Fatalf("parseSwitches without the fields = %d, want 0", got)
	}
}
