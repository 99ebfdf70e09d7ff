// Package rlswire encodes and decodes the rate-limit service's own
// messages (envoy.service.ratelimit.v3 RateLimitRequest and
// RateLimitResponse) without the protobuf runtime's reflection, with the
// runtime's results: a request is decoded here only when it holds nothing
// that the runtime would treat otherwise (unknown fields, a message field
// sent twice, which the runtime merges, invalid UTF-8, which it refuses),
// else the runtime decodes it; a response is encoded here only when it
// holds only the fields sluice answers with, byte for byte as
// proto.Marshal encodes it, else the runtime encodes it. Codec serves both
// gRPC transports: grpc-go's server (grpc.ForceServerCodecV2) and
// grpcfast's.
package rlswire

import (
	"unicode/utf8"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// sharedStringMax is the largest request whose strings are cut from one
// copy of the message: one allocation for all of them. A string kept
// after the call (a statistic's name, a top-k key) keeps that copy alive,
// so a larger message's strings are copied each on its own, as the
// runtime copies them.
const sharedStringMax = 1024

// UnmarshalRequest decodes b, a RateLimitRequest's encoding, into m, a
// zero message, and reports whether it did; when not, m is left for
// proto.Unmarshal (which resets it).
func UnmarshalRequest(b []byte, m *pb.RateLimitRequest) bool {
	nd, ne, ok := scanRequest(b)
	if !ok {
		return false
	}
	d := decoder{shared: len(b) <= sharedStringMax}
	if d.shared {
		d.s = string(b)
	}
	d.alloc(nd, ne)
	d.request(b, m)
	return true
}

// decoder fills a request scanRequest found well formed, from slabs of
// its descriptors and entries sized by the scan.
type decoder struct {
	shared bool
	s      string // b's copy, when shared
	descs  []rlpb.RateLimitDescriptor
	dptrs  []*rlpb.RateLimitDescriptor
	ents   []rlpb.RateLimitDescriptor_Entry
	eptrs  []*rlpb.RateLimitDescriptor_Entry
}

// one is the slab of the usual request, one descriptor of one entry, in
// one allocation.
type one struct {
	d  [1]rlpb.RateLimitDescriptor
	dp [1]*rlpb.RateLimitDescriptor
	e  [1]rlpb.RateLimitDescriptor_Entry
	ep [1]*rlpb.RateLimitDescriptor_Entry
}

func (d *decoder) alloc(nd, ne int) {
	if nd == 1 && ne == 1 {
		o := new(one)
		d.descs, d.dptrs, d.ents, d.eptrs = o.d[:], o.dp[:0], o.e[:], o.ep[:0]
		return
	}
	if nd > 0 {
		d.descs = make([]rlpb.RateLimitDescriptor, nd)
		d.dptrs = make([]*rlpb.RateLimitDescriptor, 0, nd)
	}
	if ne > 0 {
		d.ents = make([]rlpb.RateLimitDescriptor_Entry, ne)
		d.eptrs = make([]*rlpb.RateLimitDescriptor_Entry, 0, ne)
	}
}

// str returns the string of v, the bytes of b at offset off.
func (d *decoder) str(v []byte, off int) string {
	if d.shared {
		return d.s[off : off+len(v)]
	}
	return string(v)
}

// field reads the field at b[i:]: its number, wire type, varint value or
// bytes, and the offset of the bytes; n < 0 when malformed.
func field(b []byte, i int) (num protowire.Number, typ protowire.Type, v uint64, p []byte, off, n int) {
	num, typ, tn := protowire.ConsumeTag(b[i:])
	if tn < 0 {
		return 0, 0, 0, nil, 0, -1
	}
	switch typ {
	case protowire.VarintType:
		v, n = protowire.ConsumeVarint(b[i+tn:])
	case protowire.BytesType:
		var m int
		v, m = protowire.ConsumeVarint(b[i+tn:])
		if m < 0 || v > uint64(len(b)-i-tn-m) {
			return 0, 0, 0, nil, 0, -1
		}
		off = i + tn + m
		p = b[off : off+int(v)]
		n = m + int(v)
	default:
		return 0, 0, 0, nil, 0, -1 // no field of these messages has another type
	}
	if n < 0 {
		return 0, 0, 0, nil, 0, -1
	}
	return num, typ, v, p, off, tn + n
}

// scanRequest checks that b holds only the fields UnmarshalRequest
// decodes, each with its own wire type, its strings valid UTF-8 and its
// message fields once; and counts the descriptors and entries.
func scanRequest(b []byte) (nd, ne int, ok bool) {
	for i := 0; i < len(b); {
		num, typ, _, p, _, n := field(b, i)
		if n < 0 {
			return 0, 0, false
		}
		i += n
		switch {
		case num == 1 && typ == protowire.BytesType: // domain
			if !utf8.Valid(p) {
				return 0, 0, false
			}
		case num == 2 && typ == protowire.BytesType: // descriptors
			k, ok := scanDescriptor(p)
			if !ok {
				return 0, 0, false
			}
			nd++
			ne += k
		case num == 3 && typ == protowire.VarintType: // hits_addend
		default:
			return 0, 0, false
		}
	}
	return nd, ne, true
}

func scanDescriptor(b []byte) (entries int, ok bool) {
	var limit, hits bool
	for i := 0; i < len(b); {
		num, typ, _, p, _, n := field(b, i)
		if n < 0 {
			return 0, false
		}
		i += n
		switch {
		case num == 1 && typ == protowire.BytesType: // entries
			if !scanEntry(p) {
				return 0, false
			}
			entries++
		case num == 2 && typ == protowire.BytesType && !limit: // limit
			if !scanOverride(p) {
				return 0, false
			}
			limit = true
		case num == 3 && typ == protowire.BytesType && !hits: // hits_addend
			if !scanScalars(p, 1) {
				return 0, false
			}
			hits = true
		case num == 4 && typ == protowire.VarintType: // is_negative_hits
		default:
			return 0, false
		}
	}
	return entries, true
}

func scanEntry(b []byte) bool {
	for i := 0; i < len(b); {
		num, typ, _, p, _, n := field(b, i)
		if n < 0 || (num != 1 && num != 2) || typ != protowire.BytesType || !utf8.Valid(p) {
			return false
		}
		i += n
	}
	return true
}

func scanOverride(b []byte) bool {
	var mult bool
	for i := 0; i < len(b); {
		num, typ, _, p, _, n := field(b, i)
		if n < 0 {
			return false
		}
		i += n
		switch {
		case (num == 1 || num == 2) && typ == protowire.VarintType: // requests_per_unit, unit
		case num == 3 && typ == protowire.BytesType && !mult: // unit_multiplier
			if !scanScalars(p, 1) {
				return false
			}
			mult = true
		default:
			return false
		}
	}
	return true
}

// scanScalars checks that b holds varint fields numbered 1 to max only (a
// wrapper's value).
func scanScalars(b []byte, max protowire.Number) bool {
	for i := 0; i < len(b); {
		num, typ, _, _, _, n := field(b, i)
		if n < 0 || num < 1 || num > max || typ != protowire.VarintType {
			return false
		}
		i += n
	}
	return true
}

// varintOf returns the value of the last varint field numbered num in b,
// which scanScalars accepted.
func varintOf(b []byte, num protowire.Number) uint64 {
	var v uint64
	for i := 0; i < len(b); {
		fn, _, x, _, _, n := field(b, i)
		i += n
		if fn == num {
			v = x
		}
	}
	return v
}

func (d *decoder) request(b []byte, m *pb.RateLimitRequest) {
	for i := 0; i < len(b); {
		num, _, v, p, off, n := field(b, i)
		i += n
		switch num {
		case 1:
			m.Domain = d.str(p, off)
		case 2:
			ds := &d.descs[len(d.dptrs)]
			d.dptrs = append(d.dptrs, ds)
			d.descriptor(b, off, len(p), ds)
		case 3:
			m.HitsAddend = uint32(v)
		}
	}
	if len(d.dptrs) > 0 {
		m.Descriptors = d.dptrs
	}
}

// descriptor decodes the descriptor at b[start:start+size].
func (d *decoder) descriptor(b []byte, start, size int, ds *rlpb.RateLimitDescriptor) {
	first := len(d.eptrs)
	for i := start; i < start+size; {
		num, _, v, p, off, n := field(b[:start+size], i)
		i += n
		switch num {
		case 1:
			e := &d.ents[len(d.eptrs)]
			d.eptrs = append(d.eptrs, e)
			for j := off; j < off+len(p); {
				fn, _, _, q, qoff, k := field(b[:off+len(p)], j)
				j += k
				if fn == 1 {
					e.Key = d.str(q, qoff)
				} else {
					e.Value = d.str(q, qoff)
				}
			}
		case 2:
			o := &rlpb.RateLimitDescriptor_RateLimitOverride{
				RequestsPerUnit: uint32(varintOf(p, 1)),
				Unit:            typepb.RateLimitUnit(int32(varintOf(p, 2))),
			}
			for j := 0; j < len(p); {
				fn, _, _, q, _, k := field(p, j)
				j += k
				if fn == 3 {
					o.UnitMultiplier = &wrapperspb.UInt32Value{Value: uint32(varintOf(q, 1))}
				}
			}
			ds.Limit = o
		case 3:
			ds.HitsAddend = &wrapperspb.UInt64Value{Value: varintOf(p, 1)}
		case 4:
			ds.IsNegativeHits = v != 0
		}
	}
	if len(d.eptrs) > first {
		ds.Entries = d.eptrs[first:len(d.eptrs):len(d.eptrs)]
	}
}

// ResponseSize returns the length of m's encoding and true when
// AppendResponse encodes m, false when m holds a field it does not
// (request_headers_to_add, raw_body, dynamic_metadata, quota, unknown
// fields, a nil status, a string that is not UTF-8): proto.Marshal's then.
func ResponseSize(m *pb.RateLimitResponse) (int, bool) {
	if !encodable(m) {
		return 0, false
	}
	return responseLen(m), true
}

// encodable reports whether m holds only what AppendResponse encodes.
func encodable(m *pb.RateLimitResponse) bool {
	if m == nil || m.RequestHeadersToAdd != nil || m.RawBody != nil || m.DynamicMetadata != nil || m.Quota != nil ||
		len(m.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	for _, st := range m.Statuses {
		if st == nil || st.Quota != nil || len(st.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
		if l := st.CurrentLimit; l != nil && (len(l.ProtoReflect().GetUnknown()) > 0 || !utf8.ValidString(l.Name) ||
			l.UnitMultiplier != nil && len(l.UnitMultiplier.ProtoReflect().GetUnknown()) > 0) {
			return false
		}
		if d := st.DurationUntilReset; d != nil && len(d.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
	}
	for _, h := range m.ResponseHeadersToAdd {
		if h == nil || h.RawValue != nil || len(h.ProtoReflect().GetUnknown()) > 0 ||
			!utf8.ValidString(h.Key) || !utf8.ValidString(h.Value) {
			return false
		}
	}
	return true
}

// The lengths of an encodable response's parts.

func responseLen(m *pb.RateLimitResponse) int {
	n := 0
	if m.OverallCode != 0 {
		n += 1 + varintSize(int64(m.OverallCode))
	}
	for _, st := range m.Statuses {
		n += nestedSize(statusLen(st))
	}
	for _, h := range m.ResponseHeadersToAdd {
		n += nestedSize(headerLen(h))
	}
	return n
}

// nestedSize is the size of a message field (tag, length and body) whose
// body is k bytes, for field numbers below 16.
func nestedSize(k int) int { return 1 + protowire.SizeVarint(uint64(k)) + k }

// varintSize is the size of an int32 or int64 field's varint: a negative
// value takes ten bytes.
func varintSize(v int64) int { return protowire.SizeVarint(uint64(v)) }

func bytesSize(s string) int { return nestedSize(len(s)) }

func statusLen(st *pb.RateLimitResponse_DescriptorStatus) int {
	n := 0
	if st.Code != 0 {
		n += 1 + varintSize(int64(st.Code))
	}
	if l := st.CurrentLimit; l != nil {
		n += nestedSize(limitLen(l))
	}
	if st.LimitRemaining != 0 {
		n += 1 + protowire.SizeVarint(uint64(st.LimitRemaining))
	}
	if d := st.DurationUntilReset; d != nil {
		n += nestedSize(durationLen(d.Seconds, d.Nanos))
	}
	return n
}

func limitLen(l *pb.RateLimitResponse_RateLimit) int {
	n := 0
	if l.RequestsPerUnit != 0 {
		n += 1 + protowire.SizeVarint(uint64(l.RequestsPerUnit))
	}
	if l.Unit != 0 {
		n += 1 + varintSize(int64(l.Unit))
	}
	if l.Name != "" {
		n += bytesSize(l.Name)
	}
	if w := l.UnitMultiplier; w != nil {
		n += nestedSize(wrapperLen(w.Value))
	}
	return n
}

func wrapperLen(v uint32) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(uint64(v))
}

func durationLen(s int64, ns int32) int {
	n := 0
	if s != 0 {
		n += 1 + varintSize(s)
	}
	if ns != 0 {
		n += 1 + varintSize(int64(ns))
	}
	return n
}

func headerLen(h *corepb.HeaderValue) int {
	n := 0
	if h.Key != "" {
		n += bytesSize(h.Key)
	}
	if h.Value != "" {
		n += bytesSize(h.Value)
	}
	return n
}

// AppendResponse appends m's encoding to b; ResponseSize(m) must have
// reported true.
func AppendResponse(b []byte, m *pb.RateLimitResponse) []byte {
	b = appendUint(b, 1, uint64(int64(m.OverallCode)))
	for _, st := range m.Statuses {
		b = appendTag(b, 2, protowire.BytesType)
		b = appendVarint(b, uint64(statusLen(st)))
		b = appendStatus(b, st)
	}
	for _, h := range m.ResponseHeadersToAdd {
		b = appendTag(b, 3, protowire.BytesType)
		b = appendVarint(b, uint64(headerLen(h)))
		b = appendString(b, 1, h.Key)
		b = appendString(b, 2, h.Value)
	}
	return b
}

// appendUint appends a varint field, unless v is 0 (a proto3 scalar's
// default is not written).
func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = appendTag(b, num, protowire.VarintType)
	return appendVarint(b, v)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = appendTag(b, num, protowire.BytesType)
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendStatus(b []byte, st *pb.RateLimitResponse_DescriptorStatus) []byte {
	b = appendUint(b, 1, uint64(int64(st.Code)))
	if l := st.CurrentLimit; l != nil {
		b = appendTag(b, 2, protowire.BytesType)
		b = appendVarint(b, uint64(limitLen(l)))
		b = appendUint(b, 1, uint64(l.RequestsPerUnit))
		b = appendUint(b, 2, uint64(int64(l.Unit)))
		b = appendString(b, 3, l.Name)
		if w := l.UnitMultiplier; w != nil {
			b = appendTag(b, 4, protowire.BytesType)
			b = appendVarint(b, uint64(wrapperLen(w.Value)))
			b = appendUint(b, 1, uint64(w.Value))
		}
	}
	b = appendUint(b, 3, uint64(st.LimitRemaining))
	if d := st.DurationUntilReset; d != nil {
		b = appendTag(b, 4, protowire.BytesType)
		b = appendVarint(b, uint64(durationLen(d.Seconds, d.Nanos)))
		b = appendUint(b, 1, uint64(d.Seconds))
		b = appendUint(b, 2, uint64(int64(d.Nanos)))
	}
	return b
}

// appendTag appends a field's tag: one byte, for the field numbers below
// 16 of these messages.
func appendTag(b []byte, num protowire.Number, typ protowire.Type) []byte {
	return append(b, byte(num)<<3|byte(typ))
}

// appendVarint is protowire.AppendVarint, with the one-byte case inlined.
func appendVarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}
