package main

// A lean gRPC client for unary calls over cleartext HTTP/2 (h2c), written
// on golang.org/x/net/http2's framer: the load generator shares the CPUs
// with the service it measures, and grpc-go's client spends about 20 µs of
// CPU per call (contexts, metadata, per-stream goroutine hand-offs), as much
// as some services spend answering. This client pre-encodes each request
// (HPACK without the dynamic table, and the protobuf message), writes the
// frames of concurrent calls in one write, and routes each response to its
// caller by stream id: a few µs per call, as h2load or ghz's lighter
// modes would. Like Envoy's and grpc-go's clients, it has the server index
// the request's headers in HPACK's dynamic table with its first request on
// a connection and refers to them by index after (-hpack indexed; -hpack
// literal sends every header as a literal every time). It honours the server's connection flow-control window,
// answers SETTINGS and PING, and fails the calls in flight on GOAWAY,
// RST_STREAM or a broken connection; it does not implement what a unary
// benchmark never needs (server push, request bodies over one frame, TLS).

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const (
	h2Preface   = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	h2RecvWin   = 1 << 30 // our stream and connection receive windows
	h2MaxStream = 1<<31 - 1
)

// h2Call is one unary call in flight; a worker reuses its own.
type h2Call struct {
	done   chan struct{} // signalled once per call
	status int           // grpc-status, -1 when the response had none
	msg    []byte        // the response message, gRPC length prefix included
	err    error
	end    time.Time // when the response was read off the connection
}

// h2Conn is one HTTP/2 connection shared by many workers.
type h2Conn struct {
	c      net.Conn
	path   string
	header []byte // the HPACK block of every request after the first
	first  []byte // the first request's block, which may index header
	sent   bool   // first was sent

	wmu     sync.Mutex
	wcond   *sync.Cond // signalled when sendWin grows or the connection fails
	wbuf    []byte     // frames not yet written
	wsig    chan struct{}
	nextID  uint32
	sendWin int64 // the server's connection window for our DATA
	broken  error

	pmu     sync.Mutex
	pending map[uint32]*h2Call
}

// dialH2 connects to addr and performs the HTTP/2 handshake for calls to
// the gRPC method path (for example /pkg.Service/Method).
func dialH2(addr, path string, timeout time.Duration, indexed bool) (*h2Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	h := &h2Conn{c: c, path: path, wsig: make(chan struct{}, 1), nextID: 1,
		sendWin: 65535, pending: make(map[uint32]*h2Call)}
	h.wcond = sync.NewCond(&h.wmu)
	h.first, h.header = h2RequestHeaders(addr, path, timeout, indexed)

	// The preface, our SETTINGS (a large initial stream window: responses
	// never wait for a WINDOW_UPDATE) and a large connection window.
	var b []byte
	b = append(b, h2Preface...)
	b = h2Frame(b, http2.FrameSettings, 0, 0, h2Setting(nil, http2.SettingInitialWindowSize, h2RecvWin))
	b = h2Frame(b, http2.FrameWindowUpdate, 0, 0, binary.BigEndian.AppendUint32(nil, h2RecvWin-65535))
	if _, err := c.Write(b); err != nil {
		c.Close()
		return nil, err
	}
	go h.writeLoop()
	go h.readLoop()
	return h, nil
}

// h2RequestHeaders encodes the request's header blocks: the first of a
// connection and every later one. With indexed, the first inserts
// :path, :authority, content-type, te and grpc-timeout into the server's
// dynamic table (HPACK literals with incremental indexing) and the later
// ones refer to them by index; otherwise both are the same literals that
// are never indexed. A positive timeout is sent as grpc-timeout, as Envoy
// sends its rate-limit filter's timeout.
func h2RequestHeaders(authority, path string, timeout time.Duration, indexed bool) (first, later []byte) {
	str := func(b []byte, s string) []byte { // HPACK string, no Huffman
		return append(h2Int(b, 0, 7, uint64(len(s))), s...)
	}
	type field struct {
		static int // index of the name in the static table, 0: a literal name
		name   string
		value  string
	}
	fields := []field{{4, ":path", path}, {1, ":authority", authority}, {31, "content-type", "application/grpc"}, {0, "te", "trailers"}}
	if timeout > 0 {
		fields = append(fields, field{0, "grpc-timeout", grpcTimeout(timeout)})
	}
	first = append(first, 0x83, 0x86) // :method POST, :scheme http
	later = append(later, 0x83, 0x86)
	for i, f := range fields {
		if !indexed {
			// Literal never indexed: 0001 and a 4-bit name index.
			if f.static > 0 {
				first = str(h2Int(first, 0x10, 4, uint64(f.static)), f.value)
			} else {
				first = str(str(append(first, 0x10), f.name), f.value)
			}
			continue
		}
		// Literal with incremental indexing: 01 and a 6-bit name index.
		if f.static > 0 {
			first = str(h2Int(first, 0x40, 6, uint64(f.static)), f.value)
		} else {
			first = str(str(append(first, 0x40), f.name), f.value)
		}
		// The entry inserted last has index 62; this one was inserted
		// before the len(fields)-1-i that follow it.
		later = h2Int(later, 0x80, 7, uint64(62+len(fields)-1-i))
	}
	if !indexed {
		later = first
	}
	return first, later
}

// grpcTimeout formats d as gRPC's timeout header: at most 8 digits and a
// unit, here milliseconds, or microseconds below one.
func grpcTimeout(d time.Duration) string {
	if d < time.Millisecond {
		return strconv.FormatInt(max(d.Microseconds(), 1), 10) + "u"
	}
	return strconv.FormatInt(min(d.Milliseconds(), 99999999), 10) + "m"
}

// h2Int appends an HPACK integer with an n-bit prefix whose high bits are
// first.
func h2Int(b []byte, first byte, n uint, v uint64) []byte {
	max := uint64(1)<<n - 1
	if v < max {
		return append(b, first|byte(v))
	}
	b = append(b, first|byte(max))
	for v -= max; v >= 128; v >>= 7 {
		b = append(b, byte(v&0x7f|0x80))
	}
	return append(b, byte(v))
}

func h2Setting(b []byte, id http2.SettingID, v uint32) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(id))
	return binary.BigEndian.AppendUint32(b, v)
}

// h2Frame appends a frame: the 9-byte header, then payload.
func h2Frame(b []byte, t http2.FrameType, flags http2.Flags, stream uint32, payload []byte) []byte {
	n := len(payload)
	b = append(b, byte(n>>16), byte(n>>8), byte(n), byte(t), byte(flags))
	b = binary.BigEndian.AppendUint32(b, stream&h2MaxStream)
	return append(b, payload...)
}

// send queues a control frame (SETTINGS or PING acknowledgement, window
// update).
func (h *h2Conn) send(t http2.FrameType, flags http2.Flags, stream uint32, payload []byte) {
	h.wmu.Lock()
	h.wbuf = h2Frame(h.wbuf, t, flags, stream, payload)
	h.wmu.Unlock()
	h.signal()
}

func (h *h2Conn) signal() {
	select {
	case h.wsig <- struct{}{}:
	default:
	}
}

// writeLoop writes whatever frames have gathered since its last write: under
// load the frames of many calls go out in one system call.
func (h *h2Conn) writeLoop() {
	var out []byte
	for range h.wsig {
		// Yield once first: the callers its reader just woke queue their
		// requests meanwhile, and they go out in this write.
		runtime.Gosched()
		h.wmu.Lock()
		out, h.wbuf = h.wbuf, out[:0]
		broken := h.broken
		h.wmu.Unlock()
		if broken != nil {
			return
		}
		if len(out) == 0 {
			continue
		}
		if _, err := h.c.Write(out); err != nil {
			h.fail(fmt.Errorf("write: %w", err))
			return
		}
	}
}

// do makes one unary call with msg (gRPC length prefix included) and waits
// for its response in call.
func (h *h2Conn) do(call *h2Call, msg []byte) error {
	call.status, call.msg, call.err = -1, call.msg[:0], nil
	h.wmu.Lock()
	for h.broken == nil && h.sendWin < int64(len(msg)) {
		h.wcond.Wait()
	}
	if h.broken != nil {
		err := h.broken
		h.wmu.Unlock()
		return err
	}
	id := h.nextID
	if id > h2MaxStream-2 {
		h.wmu.Unlock()
		return errors.New("h2: stream ids exhausted on this connection")
	}
	h.nextID += 2
	h.sendWin -= int64(len(msg))
	h.pmu.Lock()
	h.pending[id] = call
	h.pmu.Unlock()
	hb := h.header
	if !h.sent { // frames go out in wbuf's order: this block is decoded first
		hb, h.sent = h.first, true
	}
	h.wbuf = h2Frame(h.wbuf, http2.FrameHeaders, http2.FlagHeadersEndHeaders, id, hb)
	h.wbuf = h2Frame(h.wbuf, http2.FrameData, http2.FlagDataEndStream, id, msg)
	h.wmu.Unlock()
	h.signal()
	<-call.done
	if call.err != nil {
		return call.err
	}
	if call.status != 0 {
		return fmt.Errorf("grpc-status %d", call.status)
	}
	return nil
}

// finish completes the call of stream id, if it is still pending.
func (h *h2Conn) finish(id uint32, err error) {
	h.pmu.Lock()
	call := h.pending[id]
	delete(h.pending, id)
	h.pmu.Unlock()
	if call != nil {
		if err != nil {
			call.err = err
		}
		call.end = time.Now()
		call.done <- struct{}{}
	}
}

// fail breaks the connection: every pending and later call gets err.
func (h *h2Conn) fail(err error) {
	h.wmu.Lock()
	if h.broken == nil {
		h.broken = err
	}
	h.wcond.Broadcast()
	h.wmu.Unlock()
	h.signal()
	h.c.Close()
	h.pmu.Lock()
	ids := make([]uint32, 0, len(h.pending))
	for id := range h.pending {
		ids = append(ids, id)
	}
	h.pmu.Unlock()
	for _, id := range ids {
		h.finish(id, err)
	}
}

func (h *h2Conn) readLoop() {
	// Buffered: the framer reads a frame's header and its payload apart,
	// two system calls a frame (six a call) when it reads the socket
	// itself; from a buffer, one read takes in every frame that came.
	fr := http2.NewFramer(nil, bufio.NewReaderSize(h.c, 64<<10))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	var consumed int64 // connection window used since our last update
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			h.fail(fmt.Errorf("read: %w", err))
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.send(http2.FrameSettings, http2.FlagSettingsAck, 0, nil)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.send(http2.FramePing, http2.FlagPingAck, 0, f.Data[:])
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				h.wmu.Lock()
				h.sendWin += int64(f.Increment)
				h.wcond.Broadcast()
				h.wmu.Unlock()
			}
		case *http2.MetaHeadersFrame:
			if !f.StreamEnded() {
				if s := f.PseudoValue("status"); s != "" && s != "200" {
					h.finish(f.StreamID, fmt.Errorf("HTTP status %s", s))
				}
				continue
			}
			st := -1
			if v := field(f, "grpc-status"); v != "" {
				if n, err := strconv.Atoi(v); err == nil {
					st = n
				}
			}
			h.pmu.Lock()
			if call := h.pending[f.StreamID]; call != nil {
				call.status = st
				if st != 0 {
					call.err = fmt.Errorf("grpc-status %s: %s", field(f, "grpc-status"), field(f, "grpc-message"))
				}
			}
			h.pmu.Unlock()
			h.finish(f.StreamID, nil)
		case *http2.DataFrame:
			if n := int64(f.Length); n > 0 {
				consumed += n
				if consumed >= h2RecvWin/2 {
					h.send(http2.FrameWindowUpdate, 0, 0, binary.BigEndian.AppendUint32(nil, uint32(consumed)))
					consumed = 0
				}
			}
			h.pmu.Lock()
			if call := h.pending[f.StreamID]; call != nil {
				call.msg = append(call.msg, f.Data()...)
			}
			h.pmu.Unlock()
			if f.StreamEnded() {
				h.finish(f.StreamID, errors.New("response ended without trailers"))
			}
		case *http2.RSTStreamFrame:
			h.finish(f.StreamID, fmt.Errorf("stream reset: %v", f.ErrCode))
		case *http2.GoAwayFrame:
			h.fail(fmt.Errorf("GOAWAY %v: %s", f.ErrCode, f.DebugData()))
			return
		}
	}
}

// field is the value of a regular header field of f, "" when absent.
func field(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// grpcMessage frames a protobuf message for the wire: uncompressed flag,
// big-endian length, message.
func grpcMessage(pb []byte) []byte {
	b := make([]byte, 5, 5+len(pb))
	binary.BigEndian.PutUint32(b[1:], uint32(len(pb)))
	return append(b, pb...)
}

// grpcPayload returns the message of a one-message gRPC body.
func grpcPayload(body []byte) ([]byte, error) {
	if len(body) < 5 {
		return nil, fmt.Errorf("gRPC body of %d bytes, want at least 5", len(body))
	}
	if body[0] != 0 {
		return nil, errors.New("compressed gRPC response, not asked for")
	}
	n := binary.BigEndian.Uint32(body[1:5])
	if uint32(len(body)-5) != n {
		return nil, fmt.Errorf("gRPC body holds %d bytes after its prefix, prefix says %d", len(body)-5, n)
	}
	return body[5:], nil
}
