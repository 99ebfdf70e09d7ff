package grpcfast_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FuzzFrames sends a connection's worth of frames built from the input
// (frames of any type with any payload, well-formed calls with fuzzed
// header fields, messages, window updates, settings, resets, pings) to
// grpcfast, on workers and inline, then checks that no panic was
// recovered in the transport, that the connection is released once the
// client hangs up, and that a new connection is served at once.
func FuzzFrames(f *testing.F) {
	f.Add([]byte{1, 1, 0, 2, 1, 1})
	f.Add([]byte{0, 1, 0, 1, 0, 4, 'a', 'b', 'c', 'd'})
	f.Add([]byte{1, 1, 1, 3, 'x', '-', 'y', 1, 'z', 2, 3, 1, 7, 1, 0, 0, 0, 9})
	f.Add([]byte{0, 5, 4, 0, 0, 0, 0, 1, 0, 1, 0, 2, 1, 1})
	f.Add([]byte{1, 0, 9, 0, 1, 3, 1, 2, 3, 6, 1, 8, 8, 0, 2, 3, 0, 4, 5, 1})
	servers := [2]*target{startServer(f, "lean", serverOpts{maxStreams: 8, maxRecv: 1 << 10, maxHeaderList: 2 << 10}),
		startServer(f, "lean-inline", serverOpts{maxStreams: 8, maxRecv: 1 << 10, maxHeaderList: 2 << 10,
			firstMessage: 500 * time.Millisecond, pendingBytes: 1 << 10})}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		tg := servers[in[0]&1]
		c, err := net.Dial("tcp", tg.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(fuzzConn(in[1:]))
		// Half-close: the server reads to the end, answers what it
		// answers, and closes; whatever it sends is read.
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("the server held the connection 10s after the client's end of it")
			}
		}
		c.Close()
		if n := tg.transportPanics.Load(); n != 0 {
			t.Fatalf("%d panics recovered in the transport", n)
		}
		for deadline := time.Now().Add(10 * time.Second); tg.fast.NumConns() != 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections held 10s after the client closed", tg.fast.NumConns())
			}
		}
		r := dialRaw(t, tg)
		r.unary(1, "ok")
		if o := r.await(1, false); o.GRPCStatus != "0" {
			t.Fatalf("a call after the input: %+v", o)
		}
		r.c.Close()
	})
}

// fuzzConn builds a client's bytes from in: the preface and SETTINGS,
// then frames, each from an opcode and its operands.
func fuzzConn(in []byte) []byte {
	var out bytes.Buffer
	out.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&out, nil)
	fr.AllowIllegalWrites = true
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	next := func() byte {
		if len(in) == 0 {
			return 0
		}
		b := in[0]
		in = in[1:]
		return b
	}
	bytesN := func(n int) []byte {
		n = min(n, len(in))
		b := in[:n]
		in = in[n:]
		return b
	}
	for len(in) > 0 {
		op, a, b := next()%9, next(), next()
		id := uint32(a % 12)
		switch op {
		case 0: // any frame
			typ, flags := http2.FrameType(b%11), http2.Flags(next())
			fr.WriteRawFrame(typ, flags, id, bytesN(int(next())))
		case 1: // a call's headers, with fuzzed extra fields
			hb.Reset()
			fields := call()
			for range int(b % 4) {
				fields = append(fields, string(bytesN(int(next()%16))), string(bytesN(int(next()%32))))
			}
			for i := 0; i+1 < len(fields); i += 2 {
				enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
			}
			blk := hb.Bytes()
			if split := int(next()); split > 0 && split < len(blk) {
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk[:split], EndStream: b&0x80 != 0})
				fr.WriteContinuation(id, true, blk[split:])
			} else {
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk, EndHeaders: true, EndStream: b&0x80 != 0})
			}
		case 2: // a message
			fr.WriteData(id, b&1 != 0, msg("ok"))
		case 3: // DATA of fuzzed bytes
			fr.WriteData(id, b&1 != 0, bytesN(int(next())))
		case 4: // a message prefix claiming a length
			fr.WriteData(id, b&1 != 0, binary.BigEndian.AppendUint32([]byte{b & 3}, uint32(next())<<uint(a%24)))
		case 5:
			fr.WriteWindowUpdate(id, uint32(b)<<uint(next()%31))
		case 6:
			fr.WriteSettings(http2.Setting{ID: http2.SettingID(b % 8), Val: binary.BigEndian.Uint32(append(bytesN(4), 0, 0, 0, 0))})
		case 7:
			fr.WriteRSTStream(id, http2.ErrCode(b%14))
		case 8:
			fr.WritePing(b&1 != 0, [8]byte{a, b})
		}
	}
	return out.Bytes()
}
