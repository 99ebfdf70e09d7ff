package rlswire

import (
	"bytes"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Codec as grpc-go's server uses it: the rate-limit messages through this
// package, from one buffer or several, every other message through
// grpc-go's proto codec, with equal results.
func TestCodec(t *testing.T) {
	var c encoding.CodecV2 = Codec{}
	if c.Name() != "proto" {
		t.Errorf("Name() = %q, want proto", c.Name())
	}
	for name, want := range requests() {
		b, _ := proto.Marshal(want)
		for _, split := range []int{len(b), len(b) / 2} {
			data := mem.BufferSlice{mem.SliceBuffer(b[:split])}
			if split < len(b) {
				data = append(data, mem.SliceBuffer(b[split:]))
			}
			got := new(pb.RateLimitRequest)
			if err := c.Unmarshal(data, got); err != nil || !proto.Equal(got, want) {
				t.Errorf("%s, %d buffers: Unmarshal = %v, %v; want %v", name, len(data), got, err, want)
			}
		}
	}
	for name, m := range responses() {
		want, _ := proto.Marshal(m)
		data, err := c.Marshal(m)
		if err != nil || !bytes.Equal(data.Materialize(), want) {
			t.Errorf("%s: Marshal = % x, %v; want % x", name, data.Materialize(), err, want)
		}
	}
	// Another message, and a response this package leaves to the runtime.
	h := &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}
	data, err := c.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	got := new(healthpb.HealthCheckResponse)
	if err := c.Unmarshal(data, got); err != nil || !proto.Equal(got, h) {
		t.Errorf("health response through the codec: %v, %v; want %v", got, err, h)
	}
	raw := &pb.RateLimitResponse{RawBody: []byte("x")}
	data, err = c.Marshal(raw)
	if want, _ := proto.Marshal(raw); err != nil || !bytes.Equal(data.Materialize(), want) {
		t.Errorf("a response with raw_body: % x, %v; want % x", data.Materialize(), err, want)
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0xff})}, new(pb.RateLimitRequest)); err == nil {
		t.Error("a malformed request decoded without error")
	}
}
