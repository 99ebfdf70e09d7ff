package rlswire

import (
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// BenchmarkRequest decodes the usual request (one descriptor of one
// entry) with this package and with the protobuf runtime.
func BenchmarkRequest(b *testing.B) {
	msg, _ := proto.Marshal(requests()["usual"])
	b.Run("codec=rlswire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !UnmarshalRequest(msg, new(pb.RateLimitRequest)) {
				b.Fatal("not decoded")
			}
		}
	})
	b.Run("codec=proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(msg, new(pb.RateLimitRequest)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkResponse encodes a response of three statuses.
func BenchmarkResponse(b *testing.B) {
	m := responses()["usual"]
	buf := make([]byte, 0, 256)
	b.Run("codec=rlswire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n, ok := ResponseSize(m)
			if !ok {
				b.Fatal("not encoded")
			}
			buf = AppendResponse(buf[:0], m)
			_ = n
		}
	})
	b.Run("codec=proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			proto.Size(m)
			buf, _ = proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(buf[:0], m)
		}
	})
}
