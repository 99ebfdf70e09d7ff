package grpcfast_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding/gzip"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const reflectionInfo = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"

// pingAck sends a PING and reads frames until it is acknowledged: the
// server has read every frame sent before it.
func (r *raw) pingAck(n byte) {
	r.t.Helper()
	r.write(func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{n}) })
	r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer r.c.SetReadDeadline(time.Time{})
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			r.t.Fatalf("waiting for PING %d's ack: %v", n, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				r.write(func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if f.IsAck() && f.Data[0] == n {
				return
			}
		}
	}
}

// TestFallbackWaitsForMessage: a stream for the fallback (reflection here)
// is handed to it once its first message has arrived. Until then it holds
// its header list and its timer, as a call served here does, and no
// goroutine: handed over at its headers, each held about four for as long
// as the client sent no message.
func TestFallbackWaitsForMessage(t *testing.T) {
	const streams = 50
	for _, k := range []string{"lean", "lean-inline"} {
		t.Run(k, func(t *testing.T) {
			tg := startServer(t, k, serverOpts{firstMessage: time.Minute})
			r := dialRaw(t, tg)
			r.pingAck(1)
			before := runtime.NumGoroutine()
			for i := range streams {
				r.headers(uint32(2*i+1), false, replace(call(), ":path", reflectionInfo)...)
			}
			r.pingAck(2)
			if d := runtime.NumGoroutine() - before; d > streams/10 {
				t.Errorf("%d streams for the fallback without a message: %+d goroutines, want none a stream", streams, d)
			}
			// The first stream's message comes: it is served.
			b, err := proto.Marshal(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}})
			if err != nil {
				t.Fatal(err)
			}
			r.data(1, true, frame(0, b))
			if o := r.await(1, false); o.GRPCStatus != "0" || o.Data == 0 {
				t.Errorf("a reflection call whose message came after the others' headers: %+v, want answered, OK", o)
			}
		})
	}
}

// TestFallbackLargeMessage: a message for the fallback larger than the
// stream's window arrives whole before the hand-over (the window is given
// back as it comes), and one past MaxRecvMsgSize is refused by the
// fallback from its length.
//
// Hex of random bytes compresses to about half: 70 KB of noise is a
// message of 140 KB, about 80 KB on the wire (the window is 64 KiB).
// The calls' deadline only ends a hang: a call that waits for a window
// nobody gives back.
func TestFallbackLargeMessage(t *testing.T) {
	const bound = 160 << 10
	forKinds(t, serverOpts{maxRecv: bound}, func(t *testing.T, tg *target) {
		c := rlsClient(t, tg)
		call := func(noise int) error {
			b := make([]byte, noise)
			rand.Read(b)
			r := req("ok", 1)
			r.Descriptors[0].Entries[0].Value = hex.EncodeToString(b)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := c.ShouldRateLimit(ctx, r, grpc.UseCompressor(gzip.Name))
			return err
		}
		if err := call(70 << 10); err != nil {
			t.Errorf("a gzip call of 140 KB, about 80 KB on the wire (more than the stream's window): %v", err)
		}
		// Past the bound decompressed (about 105 KB on the wire), then on
		// the wire (its length prefix is enough).
		for _, n := range []int{90 << 10, 180 << 10} {
			err := call(n)
			if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "larger than max") {
				t.Errorf("a gzip call of %d KB with a bound of %d KiB: %v, want ResourceExhausted", 2*n>>10, bound>>10, err)
			}
		}
	})
}
