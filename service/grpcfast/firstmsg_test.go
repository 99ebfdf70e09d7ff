package grpcfast_test

import (
	"bytes"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// A stream's first-message timer is made only when the reader would wait
// for the network with the stream still awaiting its message: calls whose
// message comes in the same read as their headers make none, and a stream
// left without its message still ends at FirstMessageTimeout.
func TestFirstMessageTimerDeferred(t *testing.T) {
	for _, kind := range []string{"lean", "lean-inline"} {
		t.Run(kind, func(t *testing.T) {
			tg := startServer(t, kind, serverOpts{firstMessage: 50 * time.Millisecond})
			r := dialRaw(t, tg)
			// One write: stream 1's headers alone, then a whole call.
			var buf bytes.Buffer
			fr := http2.NewFramer(&buf, nil)
			for _, id := range []uint32{1, 3} {
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.block(call()...), EndHeaders: true}); err != nil {
					t.Fatal(err)
				}
				if id != 1 {
					if err := fr.WriteData(id, true, msg("ok")); err != nil {
						t.Fatal(err)
					}
				}
			}
			start := time.Now()
			if _, err := r.c.Write(buf.Bytes()); err != nil {
				t.Fatal(err)
			}
			if o := r.await(3, false); o.GRPCStatus != "0" {
				t.Fatalf("stream 3: %+v, want OK", o)
			}
			o := r.await(1, true)
			if o.GRPCStatus != "1" || time.Since(start) < 50*time.Millisecond {
				t.Errorf("stream 1 without its message: %+v after %v, want CANCELLED after 50ms", o, time.Since(start))
			}
			if n := tg.fast.ArmedTimers(); n != 1 {
				t.Errorf("%d first-message timers made, want 1 (stream 1's)", n)
			}
			if n := tg.expired.n.Load(); n != 1 {
				t.Errorf("expired streams counted: %d, want 1", n)
			}
		})
	}
}
