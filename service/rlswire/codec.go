package rlswire

import (
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec Codec falls back on
	"google.golang.org/grpc/mem"
)

// Codec is the gRPC codec of the rate-limit service: RateLimitRequest and
// RateLimitResponse through this package, every other message (health,
// reflection) and what this package leaves through grpc-go's proto codec.
// Its zero value is ready.
type Codec struct{}

// fallback is grpc-go's proto codec, registered by its package.
var fallback = encoding.GetCodecV2("proto")

// Name is "proto": the messages are protobuf, and clients see the usual
// content type.
func (Codec) Name() string { return "proto" }

// Marshal implements encoding.CodecV2 (grpc.ForceServerCodecV2).
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*pb.RateLimitResponse); ok {
		if n, ok := ResponseSize(m); ok {
			return mem.BufferSlice{mem.SliceBuffer(AppendResponse(make([]byte, 0, n), m))}, nil
		}
	}
	return fallback.Marshal(v)
}

// Unmarshal implements encoding.CodecV2.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*pb.RateLimitRequest); ok {
		var b []byte
		if len(data) == 1 {
			b = data[0].ReadOnlyData()
		} else {
			b = data.Materialize()
		}
		if UnmarshalRequest(b, m) {
			return nil
		}
	}
	return fallback.Unmarshal(data, v)
}

// Size implements grpcfast's Codec: m's encoded size and true when
// AppendMessage encodes it.
func (Codec) Size(v any) (int, bool) {
	if m, ok := v.(*pb.RateLimitResponse); ok {
		return ResponseSize(m)
	}
	return 0, false
}

// AppendMessage implements grpcfast's Codec, after Size reported true.
func (Codec) AppendMessage(b []byte, v any) []byte {
	return AppendResponse(b, v.(*pb.RateLimitResponse))
}

// UnmarshalMessage implements grpcfast's Codec: whether it decoded msg
// into v.
func (Codec) UnmarshalMessage(msg []byte, v any) bool {
	if m, ok := v.(*pb.RateLimitRequest); ok {
		return UnmarshalRequest(msg, m)
	}
	return false
}
