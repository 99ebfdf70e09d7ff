package grpcfast

import (
	"encoding/binary"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The streams this server does not serve itself (health, reflection, an
// unknown method, a compressed call) go to the fallback grpc.Server's
// ServeHTTP, grpc-go's transport for an http.Handler, as a request whose
// body is the stream's DATA and whose ResponseWriter writes the stream's
// frames, on the same connection.
//
// A stream is handed over once its first message has arrived (or the
// client ended its side, or the message's length is past MaxRecvMsgSize,
// which grpc-go refuses): until then it holds what a call served here
// holds, its header list (in the connection's budget) and its
// first-message timer, and no goroutine. Handed over at its headers, each
// stream held about four goroutines (ServeHTTP's, the handler's, the
// body's reader, grpc-go's writer) for as long as a client kept it
// without a message. Meanwhile its DATA is buffered here, at most the
// first message, and the client's window given back as it comes.

var errBodyClosed = errors.New("grpcfast: body closed by handler")

// startFallback serves st with the fallback in a goroutine of its own.
func (c *conn) startFallback(st *stream) {
	f := &headerBlock{fields: st.fields}
	method, path := f.pseudo("method"), st.path
	hdr := make(http.Header, len(f.fields))
	for _, hf := range f.fields {
		if !strings.HasPrefix(hf.Name, ":") {
			k := http.CanonicalHeaderKey(hf.Name)
			hdr[k] = append(hdr[k], hf.Value)
		}
	}
	host := f.pseudo("authority")
	if host == "" {
		host = hdr.Get("Host")
	}
	req := &http.Request{
		Method: method, URL: &url.URL{Path: path}, RequestURI: path, Host: host,
		Proto: "HTTP/2.0", ProtoMajor: 2, Header: hdr, Body: st.body, ContentLength: -1,
		RemoteAddr: c.raddr.String(), TLS: c.tls,
	}
	req = req.WithContext(st)
	w := &responseWriter{st: st, hdr: http.Header{}}
	go func() {
		defer func() {
			if v := recover(); v != nil {
				c.s.panicked("fallback "+path, v)
				st.writeStatus(status.New(codes.Internal, "internal error"))
			}
		}()
		c.s.fallback.ServeHTTP(w, req)
		w.finish()
	}()
}

// onFallbackData queues request bytes for the fallback's handler; the
// stream's window is given back as the handler reads them, or at once
// while the stream waits to be handed over. The first message's arrival
// is seen from its length prefix.
func (st *stream) onFallbackData(p []byte) {
	c := st.c
	start := false
	if st.waiting || st.fbWait {
		seen := st.fbSeen
		st.fbSeen += int64(len(p))
		if seen < 5 {
			k := copy(st.pfx[seen:], p)
			st.pfxN = int(seen) + k
		}
		if st.pfxN == 5 {
			l := int64(binary.BigEndian.Uint32(st.pfx[1:]))
			switch {
			case st.fbSeen >= 5+l:
				c.mu.Lock()
				st.waiting = false
				st.arrivedLocked()
				start = st.handOverLocked()
				c.mu.Unlock()
			case l > int64(c.s.opts.MaxRecvMsgSize):
				// grpc-go refuses it on reading the prefix.
				c.mu.Lock()
				start = st.handOverLocked()
				c.mu.Unlock()
			}
		}
	}
	c.mu.Lock()
	prepaid := st.fbWait && !st.closed
	if prepaid {
		c.giveBackLocked(st, int64(len(p)))
	}
	c.mu.Unlock() // the read loop writes it
	st.body.writePrepaid(p, prepaid)
	if start {
		c.startFallback(st)
	}
}

// handOverLocked ends a stream's wait to be handed to the fallback; true
// when the caller is to start it (once).
func (st *stream) handOverLocked() bool {
	if !st.fbWait || st.closed {
		return false
	}
	st.fbWait = false
	return true
}

// body is a fallback stream's request body.
type body struct {
	st     *stream
	mu     sync.Mutex
	cond   sync.Cond
	buf    []byte
	err    error // io.EOF after END_STREAM, a stream error after a reset
	closed bool
	// prepaid: bytes of buf whose window was given back when they came
	// (before the hand-over); the first read.
	prepaid int
}

func newBody(st *stream) *body {
	b := &body{st: st}
	b.cond.L = &b.mu
	return b
}

// writePrepaid queues p; prepaid: its window was given back already.
func (b *body) writePrepaid(p []byte, prepaid bool) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		if !prepaid {
			c := b.st.c
			c.mu.Lock()
			c.giveBackLocked(b.st, int64(len(p)))
			c.mu.Unlock() // the read loop writes it
		}
		return
	}
	b.buf = append(b.buf, p...)
	if prepaid {
		b.prepaid += len(p)
	}
	b.cond.Signal()
	b.mu.Unlock()
}

// fail ends the body with err once what it holds is read.
func (b *body) fail(err error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = err
	}
	b.cond.Broadcast()
	b.mu.Unlock()
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	for len(b.buf) == 0 && b.err == nil && !b.closed {
		b.cond.Wait()
	}
	if b.closed {
		b.mu.Unlock()
		return 0, errBodyClosed
	}
	if len(b.buf) == 0 {
		err := b.err
		b.mu.Unlock()
		return 0, err
	}
	n := copy(p, b.buf)
	if b.buf = b.buf[n:]; len(b.buf) == 0 {
		b.buf = nil
	}
	owed := b.owedLocked(n)
	b.mu.Unlock()
	b.giveBack(owed)
	return n, nil
}

// owedLocked is the window to give back for n bytes taken from buf.
func (b *body) owedLocked(n int) int {
	k := min(n, b.prepaid)
	b.prepaid -= k
	return n - k
}

func (b *body) Close() error {
	b.mu.Lock()
	n := b.owedLocked(len(b.buf))
	b.buf, b.closed = nil, true
	b.cond.Broadcast()
	b.mu.Unlock()
	b.giveBack(n)
	return nil
}

func (b *body) giveBack(n int) {
	if n == 0 {
		return
	}
	c := b.st.c
	c.mu.Lock()
	c.giveBackLocked(b.st, int64(n))
	c.flushLocked(false)
}

// responseWriter writes a fallback stream's response: net/http's
// semantics for headers and trailers (declared in "Trailer", or named
// with http.TrailerPrefix), as grpc-go's ServeHTTP uses them.
type responseWriter struct {
	st          *stream
	hdr         http.Header
	code        int
	wroteHeader bool
	declared    []string
}

func (w *responseWriter) Header() http.Header { return w.hdr }

func (w *responseWriter) WriteHeader(code int) {
	if !w.wroteHeader && w.code == 0 {
		w.code = code
	}
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if err := w.sendHeader(); err != nil {
		return 0, err
	}
	return w.st.writeData(p)
}

func (w *responseWriter) Flush() {
	if w.sendHeader() != nil {
		return
	}
	c := w.st.c
	c.mu.Lock()
	c.flushLocked(false)
}

// headerBlock encodes the status and the headers, not the trailers.
func (w *responseWriter) headerBlock(e *headerEncoder) {
	for _, v := range w.hdr["Trailer"] {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				w.declared = append(w.declared, http.CanonicalHeaderKey(name))
			}
		}
	}
	code := w.code
	if code == 0 {
		code = http.StatusOK
	}
	e.status(code)
	for k, vs := range w.hdr {
		if k == "Trailer" || strings.HasPrefix(k, http.TrailerPrefix) || w.isDeclared(k) {
			continue
		}
		for _, v := range vs {
			e.field(strings.ToLower(k), v)
		}
	}
}

func (w *responseWriter) isDeclared(k string) bool {
	for _, d := range w.declared {
		if d == k {
			return true
		}
	}
	return false
}

// trailerBlock encodes the trailers set by now.
func (w *responseWriter) trailerBlock(e *headerEncoder) {
	for k, vs := range w.hdr {
		name, ok := strings.CutPrefix(k, http.TrailerPrefix)
		if !ok && !w.isDeclared(k) {
			continue
		}
		for _, v := range vs {
			e.field(strings.ToLower(name), v)
		}
	}
}

func (w *responseWriter) sendHeader() error {
	if w.wroteHeader {
		return nil
	}
	w.wroteHeader = true
	var e headerEncoder
	w.headerBlock(&e)
	st, c := w.st, w.st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.closed || c.err != nil {
		return errStreamDone
	}
	st.headerSent = true
	if !e.fits(c.peerHdrList) {
		c.resetLocked(st, http2.ErrCodeInternal, errStreamReset)
		return errStreamDone
	}
	c.appendHeaders(st.id, e.b, false)
	return nil
}

// finish ends the stream when the handler returns: the trailers, with the
// headers when none were sent.
func (w *responseWriter) finish() {
	var e headerEncoder
	if !w.wroteHeader {
		w.wroteHeader = true
		w.headerBlock(&e)
	}
	w.trailerBlock(&e)
	st, c := w.st, w.st.c
	c.mu.Lock()
	if st.closed {
		c.mu.Unlock()
		return
	}
	st.headerSent = true
	if !e.fits(c.peerHdrList) {
		c.resetLocked(st, http2.ErrCodeInternal, errStreamReset)
	} else {
		st.endLocked(e.b)
	}
	c.flushLocked(false)
}

// writeData queues p as the stream's DATA, waiting while more than
// maxQueuedData waits for the client's windows.
func (st *stream) writeData(p []byte) (int, error) {
	c := st.c
	c.mu.Lock()
	for !st.closed && c.err == nil && len(st.out) >= maxQueuedData {
		c.cond.Wait()
	}
	if st.closed || c.err != nil {
		c.mu.Unlock()
		return 0, errStreamDone
	}
	st.out = append(st.out, p...)
	c.pumpLocked(st)
	c.flushLocked(false)
	return len(p), nil
}
