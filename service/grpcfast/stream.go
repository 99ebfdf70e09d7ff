package grpcfast

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

var (
	errStreamReset = http2.StreamError{Code: http2.ErrCodeCancel}
	errStreamDone  = errors.New("grpcfast: stream done")
)

// stream is one HTTP/2 stream: a call served here (m set) or one handed to
// the fallback (body set). It is the call's context too, and its
// grpc.ServerTransportStream: one allocation per call.
type stream struct {
	c    *conn
	id   uint32
	path string
	m    *method // nil: served by the fallback
	// fields are the request's header fields, kept for its metadata,
	// which is built only when read (metadata.FromIncomingContext).
	fields  []hpack.HeaderField
	subtype string // of the content type, "" or "proto" here
	// fieldBuf holds fields when they are few, as a call's usually are
	// (grpc-go's client sends eight or nine, Envoy's about ten): one
	// allocation for the stream and its fields.
	fieldBuf [12]hpack.HeaderField

	// The context. deadline is set before the stream is shared.
	deadline time.Time
	cmu      sync.Mutex
	doneCh   chan struct{}
	ctxErr   error
	afters   []*afterFunc
	md       metadata.MD // built on first read

	// Under c.mu.
	recvDone     bool // the client ended its side
	closed       bool
	recvWin      int64 // what the client may still send on the stream
	recvUnacked  int64
	sendWin      int64
	out          []byte // DATA waiting for the windows
	trailer      []byte // the trailers' header block, once out is written
	blocked      bool
	headerSent   bool
	header       metadata.MD // SetHeader's
	trailerMD    metadata.MD // SetTrailer's
	hdrBytes     int64       // counted in c.pendingHdr until the message arrives
	timer        *time.Timer // the deadline's
	firstAwaited bool        // FirstMessageTimeout runs for the message
	firstTimer   *time.Timer // its timer, once armed (conn.armUnarmedLocked)

	// Owned by the reader: the request message of a call served here.
	pfx     [5]byte
	pfxN    int
	msg     []byte // the message, prefix excluded, once its length is known
	need    int    // the message's length
	extraN  int    // bytes received after the message
	extraL  int    // the length in a second message's prefix
	extraPf [5]byte

	// The fallback's.
	inline  bool // run on the read loop's goroutine
	body    *body
	waiting bool  // the reader watches for the first message (a budget or a timer waits on it)
	fbSeen  int64 // bytes received, to see the first message's arrival
	fbWait  bool  // under c.mu: not handed to the fallback yet (fallback.go)
}

type afterFunc struct{ f func() }

// keepFields keeps a copy of fields, the header decoder's, as st.fields.
func (st *stream) keepFields(fields []hpack.HeaderField) {
	if len(fields) <= len(st.fieldBuf) {
		n := copy(st.fieldBuf[:], fields)
		st.fields = st.fieldBuf[:n:n]
		return
	}
	st.fields = slices.Clone(fields)
}

// Deadline is the call's deadline, from grpc-timeout.
func (st *stream) Deadline() (time.Time, bool) { return st.deadline, !st.deadline.IsZero() }

// Done is closed when the call ends: its response written, the client
// reset it, its deadline passed or the connection closed.
func (st *stream) Done() <-chan struct{} {
	st.cmu.Lock()
	defer st.cmu.Unlock()
	if st.doneCh == nil {
		st.doneCh = make(chan struct{})
		if st.ctxErr != nil {
			close(st.doneCh)
		}
	}
	return st.doneCh
}

func (st *stream) Err() error {
	st.cmu.Lock()
	defer st.cmu.Unlock()
	return st.ctxErr
}

// AfterFunc lets contexts derived from the call's (context.WithTimeout,
// WithCancel) be cancelled with it without a goroutine each, as the
// context package's own do.
func (st *stream) AfterFunc(f func()) func() bool {
	a := &afterFunc{f: f}
	st.cmu.Lock()
	if st.ctxErr != nil {
		st.cmu.Unlock()
		go f()
		return func() bool { return false }
	}
	st.afters = append(st.afters, a)
	st.cmu.Unlock()
	return func() bool {
		st.cmu.Lock()
		defer st.cmu.Unlock()
		if i := slices.Index(st.afters, a); i >= 0 {
			st.afters = slices.Delete(st.afters, i, i+1)
			return true
		}
		return false
	}
}

// cancel ends the call's context with err (context.Canceled or
// DeadlineExceeded).
func (st *stream) cancel(err error) {
	st.cmu.Lock()
	if st.ctxErr != nil {
		st.cmu.Unlock()
		return
	}
	st.ctxErr = err
	if st.doneCh != nil {
		close(st.doneCh)
	}
	afters := st.afters
	st.afters = nil
	st.cmu.Unlock()
	for _, a := range afters {
		go a.f()
	}
}

// closeLocked closes st: it leaves the connection, its context ends, its
// timers stop and what it held is given back. err says why: errStreamDone
// (its response is written), a reset, the connection's end, or
// context.DeadlineExceeded.
func (st *stream) closeLocked(err error) {
	if st.closed {
		return
	}
	c := st.c
	st.closed = true
	st.out, st.trailer = nil, nil
	c.removeLocked(st)
	st.arrivedLocked()
	if st.timer != nil {
		st.timer.Stop()
	}
	if st.body != nil {
		if err == errStreamDone {
			st.body.fail(io.EOF)
		} else {
			st.body.fail(err)
		}
	}
	c.cond.Broadcast()
	if err == context.DeadlineExceeded {
		st.cancel(err)
	} else {
		st.cancel(context.Canceled)
	}
}

// arrivedLocked ends the wait for the request message: its header bytes
// leave the connection's budget and its timer stops.
func (st *stream) arrivedLocked() {
	if st.hdrBytes > 0 {
		st.c.pendingHdr -= st.hdrBytes
		st.hdrBytes = 0
	}
	st.firstAwaited = false
	if st.firstTimer != nil {
		st.firstTimer.Stop()
		st.firstTimer = nil
	}
}

// expire resets the stream at its deadline, as grpc-go does
// (RST_STREAM CANCEL).
func (st *stream) expire() {
	c := st.c
	c.mu.Lock()
	if st.closed {
		c.mu.Unlock()
		return
	}
	c.appendRST(st.id, http2.ErrCodeCancel)
	st.closeLocked(context.DeadlineExceeded)
	c.flushLocked(false)
}

// firstMessageExpired ends a stream whose message did not come within
// FirstMessageTimeout: CANCELLED.
func (st *stream) firstMessageExpired() {
	c := st.c
	c.mu.Lock()
	if st.closed || st.firstTimer == nil {
		c.mu.Unlock()
		return
	}
	st.firstTimer, st.firstAwaited = nil, false
	if e := c.s.opts.Expired; e != nil {
		e.Inc()
	}
	if st.m == nil && !st.fbWait {
		// The fallback's handler sees its context end and answers.
		c.mu.Unlock()
		st.cancel(context.Canceled)
		return
	}
	st.fbWait = false // never handed over: answered here
	st.writeStatusLocked(status.New(codes.Canceled, context.Canceled.Error()))
	c.flushLocked(false)
}

// onData takes bytes of the request's body (the reader's goroutine).
func (st *stream) onData(p []byte) {
	if st.body != nil {
		st.onFallbackData(p)
		return
	}
	n := int64(len(p))
	max := st.c.s.opts.MaxRecvMsgSize
	for len(p) > 0 {
		switch {
		case st.pfxN < 5:
			k := copy(st.pfx[st.pfxN:], p)
			st.pfxN += k
			p = p[k:]
			if st.pfxN < 5 {
				continue
			}
			l := binary.BigEndian.Uint32(st.pfx[1:])
			if int64(l) > int64(max) {
				st.fail(status.Newf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", l, max))
				return
			}
			st.need = int(l)
			st.msg = getBuf(st.need)
			if st.need == 0 && !st.checkFormat() {
				return
			}
		case len(st.msg) < st.need:
			k := min(st.need-len(st.msg), len(p))
			st.msg = append(st.msg, p[:k]...)
			p = p[k:]
			if len(st.msg) == st.need && !st.checkFormat() {
				return
			}
		default:
			// After the message: a second one is a cardinality violation,
			// found (as grpc-go finds it) once its length is known.
			if st.extraN < 5 {
				k := copy(st.extraPf[st.extraN:], p)
				st.extraN += k
				p = p[k:]
				if st.extraN < 5 {
					continue
				}
				l := binary.BigEndian.Uint32(st.extraPf[1:])
				if int64(l) > int64(max) {
					st.fail(status.Newf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", l, max))
					return
				}
				st.extraL = int(l)
			} else {
				k := min(5+st.extraL-st.extraN, len(p))
				st.extraN += k
				p = p[k:]
			}
			if st.extraN == 5+st.extraL {
				st.fail(status.New(codes.Internal, "cardinality violation: received multiple request messages for non-client-streaming RPC"))
				return
			}
		}
	}
	c := st.c
	c.mu.Lock()
	c.giveBackLocked(st, n)
	c.mu.Unlock() // the read loop writes it
}

// checkFormat checks the payload format of a complete message, as grpc-go
// does once it has read it; false when the call was answered.
func (st *stream) checkFormat() bool {
	switch pf := st.pfx[0]; pf {
	case 0:
		return true
	case 1:
		st.fail(status.New(codes.Internal, "grpc: compressed flag set with identity or empty encoding"))
	default:
		st.fail(status.Newf(codes.Internal, "grpc: received unexpected payload format %d", pf))
	}
	return false
}

// onEnd takes the client's end of the request (END_STREAM).
func (st *stream) onEnd() {
	c := st.c
	c.mu.Lock()
	st.recvDone = true
	if st.body != nil {
		st.arrivedLocked()
		start := st.handOverLocked()
		c.mu.Unlock()
		st.body.fail(io.EOF)
		if start {
			c.startFallback(st)
		}
		return
	}
	if st.closed {
		c.mu.Unlock()
		return
	}
	switch {
	case st.pfxN == 0:
		c.mu.Unlock()
		st.fail(status.New(codes.Internal, "cardinality violation: received no request message from non-client-streaming RPC"))
		return
	case st.pfxN < 5 || len(st.msg) < st.need || st.extraN > 0:
		c.mu.Unlock()
		st.fail(status.New(codes.Internal, io.ErrUnexpectedEOF.Error()))
		return
	}
	st.arrivedLocked()
	c.mu.Unlock()
	if c.s.opts.Inline {
		st.inline = true
		st.run()
		return
	}
	c.s.dispatch(st)
}

// fail answers the call with s from the reader, before any handler ran.
func (st *stream) fail(s *status.Status) {
	c := st.c
	c.mu.Lock()
	st.writeStatusLocked(s)
	c.mu.Unlock() // the read loop writes it
	putBuf(st.msg)
	st.msg = nil
}

// flushLocked writes what the call queued: on the read loop's goroutine
// (inline), the read loop does once its batch is handled; on a worker,
// now, after yielding to the calls running at the same moment.
func (st *stream) flushLocked() {
	if st.inline {
		st.c.mu.Unlock()
		return
	}
	st.c.flushLocked(true)
}

// run serves the call: the method's generated handler, with the
// interceptor, as grpc-go's server calls it.
func (st *stream) run() {
	s := st.c.s
	defer func() {
		if v := recover(); v != nil {
			s.panicked("call "+st.path, v)
			st.writeStatus(status.New(codes.Internal, "internal error"))
		}
	}()
	resp, err := st.call(s.opts.UnaryInterceptor)
	if err != nil {
		st.writeError(err)
		return
	}
	st.writeResponse(resp)
}

// call runs the method's handler on the request, through in (nil: none).
func (st *stream) call(in grpc.UnaryServerInterceptor) (any, error) {
	m := st.m
	if m.handler == nil {
		return m.desc.Handler(m.impl, st, st.decode, in)
	}
	req := m.newRequest()
	if err := st.decode(req); err != nil {
		return nil, err
	}
	if in == nil {
		return m.handler(st, req)
	}
	return in(st, req, &m.info, m.handler)
}

// decode unmarshals the request message into v, once.
func (st *stream) decode(v any) error {
	m := messageOf(v)
	if m == nil {
		return status.Errorf(codes.Internal, "grpcfast: cannot decode into %T, want a protobuf message", v)
	}
	if st.msg == nil {
		return status.Error(codes.Internal, "grpcfast: the request message was already decoded")
	}
	var err error
	if c := st.c.s.opts.Codec; c == nil || !c.UnmarshalMessage(st.msg, v) {
		err = proto.Unmarshal(st.msg, m)
	}
	putBuf(st.msg)
	st.msg = nil
	if err != nil {
		return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
	}
	return nil
}

func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	case protoadapt.MessageV2:
		return v
	}
	return nil
}

// writeError answers the call with err's status (Unknown for an error
// that is none, the context's code for a context's error), as grpc-go
// does.
func (st *stream) writeError(err error) {
	s, ok := status.FromError(err)
	if !ok {
		s = status.FromContextError(err)
	}
	st.writeStatus(s)
}

func (st *stream) writeStatus(s *status.Status) {
	c := st.c
	c.mu.Lock()
	st.writeStatusLocked(s)
	st.flushLocked()
}

// writeResponse writes the response message and the OK trailers. The
// message is marshalled straight into the connection's write buffer when
// the windows allow it at once, as they almost always do.
func (st *stream) writeResponse(resp any) {
	c := st.c
	size, coded := 0, false
	if cd := c.s.opts.Codec; cd != nil {
		size, coded = cd.Size(resp)
	}
	var m proto.Message
	if !coded {
		if m = messageOf(resp); m == nil {
			st.writeStatus(status.Newf(codes.Internal, "grpc: error while marshaling: %T is not a protobuf message", resp))
			return
		}
		size = proto.Size(m)
	}
	if size > c.s.opts.MaxSendMsgSize {
		st.writeStatus(status.Newf(codes.ResourceExhausted, "grpc: trying to send message larger than max (%d vs. %d)", size, c.s.opts.MaxSendMsgSize))
		return
	}
	// appendMsg appends the message, size bytes (the codec's or the
	// runtime's, under the size just computed).
	appendMsg := func(b []byte) ([]byte, error) {
		if coded {
			return c.s.opts.Codec.AppendMessage(b, resp), nil
		}
		return proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, m)
	}
	c.mu.Lock()
	if st.closed {
		c.mu.Unlock()
		return
	}
	if !st.headerSent && !st.writeHeadersLocked() {
		st.flushLocked()
		return
	}
	total := 5 + size
	if len(st.out) == 0 && int64(total) <= min(st.sendWin, c.sendWin, int64(c.peerFrame)) {
		off := len(c.wbuf)
		c.wbuf = appendFrameHeader(c.wbuf, total, http2.FrameData, 0, st.id)
		c.wbuf = append(c.wbuf, 0, byte(size>>24), byte(size>>16), byte(size>>8), byte(size))
		var err error
		if c.wbuf, err = appendMsg(c.wbuf); err != nil || len(c.wbuf) != off+9+total {
			c.wbuf = c.wbuf[:off]
			st.writeStatusLocked(status.Newf(codes.Internal, "grpc: error while marshaling: %v", err))
			st.flushLocked()
			return
		}
		st.sendWin -= int64(total)
		c.sendWin -= int64(total)
		c.resetPingStrikes.Store(true)
	} else {
		b := make([]byte, 5, total)
		binary.BigEndian.PutUint32(b[1:], uint32(size))
		b, err := appendMsg(b)
		if err != nil || len(b) != total {
			st.writeStatusLocked(status.Newf(codes.Internal, "grpc: error while marshaling: %v", err))
			st.flushLocked()
			return
		}
		st.out = append(st.out, b...)
		c.pumpLocked(st)
	}
	st.writeStatusLocked(nil)
	st.flushLocked()
}

// writeHeadersLocked writes the response headers: :status 200, the
// content type and SetHeader's metadata. false when st was reset instead
// (the client's header list limit).
func (st *stream) writeHeadersLocked() bool {
	c := st.c
	st.headerSent = true
	if len(st.header) == 0 {
		c.appendHeaders(st.id, okHeaders(st.subtype), false)
		return true
	}
	var e headerEncoder
	e.status200()
	e.field("content-type", contentType(st.subtype))
	e.metadata(st.header)
	if !e.fits(c.peerHdrList) {
		c.resetLocked(st, http2.ErrCodeInternal, errStreamReset)
		return false
	}
	c.appendHeaders(st.id, e.b, false)
	return true
}

// writeStatusLocked writes the trailers with s (nil: OK), as
// trailers-only when nothing was sent yet, then ends the stream; they wait
// for queued DATA.
func (st *stream) writeStatusLocked(s *status.Status) {
	c := st.c
	if st.closed {
		return
	}
	if s == nil && st.headerSent && len(st.trailerMD) == 0 {
		st.endLocked(okTrailers)
		return
	}
	var e headerEncoder
	if !st.headerSent {
		if len(st.header) > 0 {
			if !st.writeHeadersLocked() {
				return
			}
		} else {
			st.headerSent = true
			e.status200()
			e.field("content-type", contentType(st.subtype))
		}
	}
	code, msg := codes.OK, ""
	if s != nil {
		code, msg = s.Code(), s.Message()
	}
	e.grpcStatus(code, msg)
	if s != nil {
		if p := s.Proto(); len(p.GetDetails()) > 0 {
			if b, err := proto.Marshal(p); err == nil {
				e.field("grpc-status-details-bin", encodeBinHeader(b))
				delete(st.trailerMD, "grpc-status-details-bin")
			}
		}
	}
	e.metadata(st.trailerMD)
	if !e.fits(c.peerHdrList) {
		c.resetLocked(st, http2.ErrCodeInternal, errStreamReset)
		return
	}
	st.endLocked(e.b)
}

// endLocked writes the trailers' block, now or after the queued DATA, and
// then closes the stream.
func (st *stream) endLocked(block []byte) {
	c := st.c
	if len(st.out) > 0 {
		st.trailer = block
		return
	}
	c.appendHeaders(st.id, block, true)
	c.resetPingStrikes.Store(true)
	c.finishLocked(st)
}

// appendHeaders appends a header block as HEADERS and, past the client's
// frame size, CONTINUATION frames.
func (c *conn) appendHeaders(id uint32, block []byte, end bool) {
	t, flags := http2.FrameHeaders, http2.Flags(0)
	if end {
		flags = http2.FlagHeadersEndStream
	}
	for {
		n := min(len(block), int(c.peerFrame))
		f := flags
		if n == len(block) {
			f |= http2.FlagHeadersEndHeaders
		}
		c.wbuf = appendFrame(c.wbuf, t, f, id, block[:n])
		block = block[n:]
		if len(block) == 0 {
			return
		}
		t, flags = http2.FrameContinuation, 0
	}
}

// bufPool holds the buffers of request messages up to 4 KiB.
var bufPool = sync.Pool{New: func() any { return new([4 << 10]byte) }}

func getBuf(n int) []byte {
	if n <= 4<<10 {
		return bufPool.Get().(*[4 << 10]byte)[:0]
	}
	return make([]byte, 0, n)
}

// putBuf gives back a buffer of getBuf; proto.Unmarshal copies what it
// keeps (strings, bytes, unknown fields), so the message is done with it.
func putBuf(b []byte) {
	if cap(b) == 4<<10 {
		bufPool.Put((*[4 << 10]byte)(b[:4<<10]))
	}
}
