package rlswire

import (
	"bytes"
	"math"
	"strings"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/google/go-cmp/cmp"
)

func entry(k, v string) *rlpb.RateLimitDescriptor_Entry {
	return &rlpb.RateLimitDescriptor_Entry{Key: k, Value: v}
}

// requests are requests as Envoy sends them: UnmarshalRequest decodes
// every one of them itself.
func requests() map[string]*pb.RateLimitRequest {
	long := strings.Repeat("v", 2*sharedStringMax)
	return map[string]*pb.RateLimitRequest{
		"empty":    {},
		"domain":   {Domain: "d"},
		"usual":    {Domain: "bench", Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{entry("user", "u1")}}}},
		"key only": {Domain: "d", Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{entry("k", "")}}}},
		"several": {Domain: "envoy", HitsAddend: 7, Descriptors: []*rlpb.RateLimitDescriptor{
			{Entries: []*rlpb.RateLimitDescriptor_Entry{entry("remote_address", "10.0.0.1"), entry("path", "/ä/€")}},
			{},
			{Entries: []*rlpb.RateLimitDescriptor_Entry{entry("a", "b")}, IsNegativeHits: true,
				HitsAddend: wrapperspb.UInt64(math.MaxUint64)},
			{Entries: []*rlpb.RateLimitDescriptor_Entry{entry("x", "y"), entry("", ""), entry("z", "w")},
				Limit: &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 42, Unit: typepb.RateLimitUnit_HOUR,
					UnitMultiplier: wrapperspb.UInt32(3)}},
			{Limit: &rlpb.RateLimitDescriptor_RateLimitOverride{Unit: typepb.RateLimitUnit(-2), UnitMultiplier: wrapperspb.UInt32(0)},
				HitsAddend: wrapperspb.UInt64(0)},
		}},
		"long": {Domain: long, Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{entry("k", long)}}}},
	}
}

func TestUnmarshalRequest(t *testing.T) {
	for name, want := range requests() {
		t.Run(name, func(t *testing.T) {
			b, err := proto.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			got := new(pb.RateLimitRequest)
			if !UnmarshalRequest(b, got) {
				t.Fatal("UnmarshalRequest left the request to the protobuf runtime")
			}
			if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
				t.Errorf("decoded request differs (-want +got):\n%s", d)
			}
		})
	}
}

// TestUnmarshalRequestFallsBack: what the runtime treats otherwise is
// left to it.
func TestUnmarshalRequestFallsBack(t *testing.T) {
	usual, _ := proto.Marshal(requests()["usual"])
	desc := func(fields ...[]byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), bytes.Join(fields, nil))
	}
	msg := func(num protowire.Number, b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
	}
	override := msg(2, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5))
	for name, b := range map[string][]byte{
		"unknown field":          append(bytes.Clone(usual), protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1)...),
		"domain as varint":       protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1),
		"invalid UTF-8 domain":   msg(1, []byte{0xff}),
		"invalid UTF-8 value":    desc(msg(1, msg(2, []byte{0xc3}))),
		"limit twice (merged)":   desc(override, override),
		"hits twice (merged)":    desc(msg(3, nil), msg(3, nil)),
		"truncated":              usual[:len(usual)-1],
		"length past the end":    {0x12, 0x7f},
		"group":                  {0x0b},
		"field number 0":         {0x00, 0x01},
		"overlong varint":        append([]byte{0x18}, bytes.Repeat([]byte{0xff}, 10)...),
		"unknown field in entry": desc(msg(1, msg(3, nil))),
		"unknown field in limit": desc(msg(2, msg(7, nil))),
		"multiplier of bytes":    desc(msg(2, msg(3, msg(1, nil)))),
	} {
		t.Run(name, func(t *testing.T) {
			if UnmarshalRequest(b, new(pb.RateLimitRequest)) {
				t.Errorf("UnmarshalRequest decoded % x itself", b)
			}
		})
	}
}

// TestSharedStrings: a small request's strings are cut from one copy of
// the message, never from the caller's buffer; a large one's are copied
// each alone.
func TestSharedStrings(t *testing.T) {
	for _, name := range []string{"usual", "long"} {
		b, _ := proto.Marshal(requests()[name])
		m := new(pb.RateLimitRequest)
		if !UnmarshalRequest(b, m) {
			t.Fatal(name, ": not decoded")
		}
		want := strings.Clone(m.Descriptors[0].Entries[0].Value)
		clear(b) // the transport reuses its buffer
		if got := m.Descriptors[0].Entries[0].Value; got != want {
			t.Errorf("%s: value %.20q after the buffer was reused, want %.20q", name, got, want)
		}
	}
	b, _ := proto.Marshal(requests()["usual"])
	if n := testing.AllocsPerRun(100, func() { UnmarshalRequest(b, new(pb.RateLimitRequest)) }); n > 3 {
		t.Errorf("decoding the usual request took %.0f allocations, want at most 3 (message, its string, its slab)", n)
	}
}

// responses are the responses sluice answers with: AppendResponse
// encodes each, byte for byte as proto.Marshal does.
func responses() map[string]*pb.RateLimitResponse {
	limit := &pb.RateLimitResponse_RateLimit{Name: "per-user", RequestsPerUnit: 10, Unit: pb.RateLimitResponse_RateLimit_MINUTE}
	return map[string]*pb.RateLimitResponse{
		"empty": {},
		"ok":    {OverallCode: pb.RateLimitResponse_OK, Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OK}}},
		"usual": {OverallCode: pb.RateLimitResponse_OVER_LIMIT, Statuses: []*pb.RateLimitResponse_DescriptorStatus{
			{Code: pb.RateLimitResponse_OVER_LIMIT, CurrentLimit: limit, LimitRemaining: 0, DurationUntilReset: durationpb.New(1500e6)},
			{Code: pb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32},
			{Code: pb.RateLimitResponse_OK, CurrentLimit: &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 1, Unit: pb.RateLimitResponse_RateLimit_SECOND,
				UnitMultiplier: wrapperspb.UInt32(5)}, LimitRemaining: 1, DurationUntilReset: &durationpb.Duration{}},
		}},
		"odd values": {OverallCode: pb.RateLimitResponse_Code(-1), Statuses: []*pb.RateLimitResponse_DescriptorStatus{
			{Code: pb.RateLimitResponse_Code(99), CurrentLimit: &pb.RateLimitResponse_RateLimit{Unit: pb.RateLimitResponse_RateLimit_Unit(-3),
				UnitMultiplier: wrapperspb.UInt32(0)}, DurationUntilReset: &durationpb.Duration{Seconds: -5, Nanos: -7}},
			{CurrentLimit: &pb.RateLimitResponse_RateLimit{}},
		}},
		"headers": {OverallCode: pb.RateLimitResponse_OK, Statuses: []*pb.RateLimitResponse_DescriptorStatus{{CurrentLimit: limit, LimitRemaining: 9}},
			ResponseHeadersToAdd: []*corepb.HeaderValue{{Key: "RateLimit-Limit", Value: "10"}, {Key: "x-empty"}, {}}},
	}
}

func TestAppendResponse(t *testing.T) {
	for name, m := range responses() {
		t.Run(name, func(t *testing.T) {
			want, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			n, ok := ResponseSize(m)
			if !ok {
				t.Fatal("ResponseSize left the response to the protobuf runtime")
			}
			got := AppendResponse([]byte("prefix"), m)
			if n != len(got)-6 || !bytes.Equal(got[6:], want) {
				t.Errorf("encoded (size %d):\n% x\nwant (proto.Marshal):\n% x", n, got[6:], want)
			}
		})
	}
}

func TestAppendResponseFallsBack(t *testing.T) {
	st := func() *pb.RateLimitResponse_DescriptorStatus { return &pb.RateLimitResponse_DescriptorStatus{} }
	withUnknown := st()
	withUnknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1))
	meta, _ := structpb.NewStruct(map[string]any{"a": "b"})
	for name, m := range map[string]*pb.RateLimitResponse{
		"nil":                  nil,
		"request headers":      {RequestHeadersToAdd: []*corepb.HeaderValue{{Key: "a"}}},
		"raw body":             {RawBody: []byte("x")},
		"dynamic metadata":     {DynamicMetadata: meta},
		"quota":                {Quota: &pb.RateLimitResponse_Quota{}},
		"status quota":         {Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Quota: &pb.RateLimitResponse_Quota{}}}},
		"nil status":           {Statuses: []*pb.RateLimitResponse_DescriptorStatus{nil}},
		"unknown field":        {Statuses: []*pb.RateLimitResponse_DescriptorStatus{withUnknown}},
		"invalid UTF-8 name":   {Statuses: []*pb.RateLimitResponse_DescriptorStatus{{CurrentLimit: &pb.RateLimitResponse_RateLimit{Name: "\xff"}}}},
		"raw header value":     {ResponseHeadersToAdd: []*corepb.HeaderValue{{Key: "a", RawValue: []byte("b")}}},
		"invalid UTF-8 header": {ResponseHeadersToAdd: []*corepb.HeaderValue{{Key: "a", Value: "\xc3"}}},
		"nil header":           {ResponseHeadersToAdd: []*corepb.HeaderValue{nil}},
	} {
		if _, ok := ResponseSize(m); ok {
			t.Errorf("%s: ResponseSize took a response it does not encode", name)
		}
	}
}
