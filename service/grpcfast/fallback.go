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

var errBodyClosed = errors.New("grpcfast: body closed by handler")

// startFallback serves st with the fallback in a goroutine of its own.
func (c *conn) startFallback(st *stream, f *headerBlock, method, path string) {
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
// stream's window is given back as the handler reads them. The first
// message's arrival is seen from its length prefix.
func (st *stream) onFallbackData(p []byte) {
	if st.waiting {
		seen := st.fbSeen
		st.fbSeen += int64(len(p))
		if seen < 5 {
			k := copy(st.pfx[seen:], p)
			st.pfxN = int(seen) + k
		}
		if st.pfxN == 5 && st.fbSeen >= 5+int64(binary.BigEndian.Uint32(st.pfx[1:])) {
			st.waiting = false
			st.c.mu.Lock()
			st.arrivedLocked()
			st.c.mu.Unlock()
		}
	}
	st.body.write(p)
}

// body is a fallback stream's request body.
type body struct {
	st     *stream
	mu     sync.Mutex
	cond   sync.Cond
	buf    []byte
	err    error // io.EOF after END_STREAM, a stream error after a reset
	closed bool
}

func newBody(st *stream) *body {
	b := &body{st: st}
	b.cond.L = &b.mu
	return b
}

func (b *body) write(p []byte) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		c := b.st.c
		c.mu.Lock()
		c.giveBackLocked(b.st, int64(len(p)))
		c.mu.Unlock() // the read loop writes it
		return
	}
	b.buf = append(b.buf, p...)
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
	b.mu.Unlock()
	b.giveBack(n)
	return n, nil
}

func (b *body) Close() error {
	b.mu.Lock()
	n := len(b.buf)
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
