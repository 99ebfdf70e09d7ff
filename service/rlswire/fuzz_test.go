package rlswire

import (
	"bytes"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// FuzzUnmarshalRequest: whatever UnmarshalRequest decodes itself, the
// protobuf runtime decodes to an equal message; what the runtime refuses,
// UnmarshalRequest leaves to it.
func FuzzUnmarshalRequest(f *testing.F) {
	for _, m := range requests() {
		b, _ := proto.Marshal(m)
		f.Add(b)
		if len(b) > 2 {
			f.Add(b[:len(b)-2])
		}
	}
	f.Add([]byte{0x12, 0x04, 0x0a, 0x02, 0x0a, 0x00, 0x12, 0x00})
	f.Add([]byte{0x12, 0x06, 0x12, 0x00, 0x12, 0x02, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		want := new(pb.RateLimitRequest)
		werr := proto.Unmarshal(b, want)
		got := new(pb.RateLimitRequest)
		if !UnmarshalRequest(bytes.Clone(b), got) {
			return
		}
		if werr != nil {
			t.Fatalf("UnmarshalRequest decoded % x, which the runtime refuses: %v", b, werr)
		}
		if !proto.Equal(want, got) {
			t.Fatalf("UnmarshalRequest(% x) = %v, the runtime decodes %v", b, got, want)
		}
	})
}

// FuzzAppendResponse: every response the runtime can decode from the
// input that ResponseSize takes is encoded byte for byte as proto.Marshal
// encodes it.
func FuzzAppendResponse(f *testing.F) {
	for _, m := range responses() {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m := new(pb.RateLimitResponse)
		if proto.Unmarshal(b, m) != nil {
			return
		}
		n, ok := ResponseSize(m)
		if !ok {
			return
		}
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatalf("ResponseSize took %v, which proto.Marshal refuses: %v", m, err)
		}
		got := AppendResponse(nil, m)
		if len(got) != n || !bytes.Equal(got, want) {
			t.Fatalf("AppendResponse(%v) (size %d) = % x, want % x", m, n, got, want)
		}
	})
}
