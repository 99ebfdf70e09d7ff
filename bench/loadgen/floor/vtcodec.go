package main

import (
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers "proto"
	"google.golang.org/grpc/mem"
)

// vtMarshaler is the marshalling vtprotobuf generates, which
// go-control-plane's messages have: the size computed once, the message
// written backwards into a buffer of exactly that size.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict([]byte) (int, error)
}

// vtCodec is grpc-go's protobuf codec, except that a message with
// vtprotobuf's generated marshalling is marshalled by it (-codec vt, for
// grpc.ForceServerCodecV2): what marshalling the response costs with and
// without protobuf's reflection. Unlike protobuf's, that code does not
// check that strings are UTF-8; the floor's responses carry none.
type vtCodec struct{}

func (vtCodec) Name() string { return "proto" }

func (vtCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMarshaler)
	if !ok {
		return encoding.GetCodecV2("proto").Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		b := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVTStrict(b); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	b := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVTStrict((*b)[:size]); err != nil {
		pool.Put(b)
		return nil, err
	}
	*b = (*b)[:size]
	return mem.BufferSlice{mem.NewBuffer(b, pool)}, nil
}

func (vtCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2("proto").Unmarshal(data, v)
}
