package grpcfast

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// request is what the server reads of a stream's headers, as grpc-go's
// server reads them (internal/transport/http2_server.go operateHeaders).
type request struct {
	method, path string
	contentType  string // an invalid one, for the error
	isGRPC       bool
	subtype      string
	encoding     string
	timeout      time.Duration
	timeoutSet   bool
	protocolErr  bool           // a connection header
	headerErr    *status.Status // a malformed grpc-timeout or binary metadata
	nAuthority   int
	nHost        int
	size         int64 // the header list's size, as HTTP/2 counts it
}

func (r *request) parse(fields []hpack.HeaderField) {
	for _, hf := range fields {
		r.size += int64(hf.Size())
		switch hf.Name {
		case "content-type":
			sub, ok := contentSubtype(hf.Value)
			if !ok {
				r.contentType = hf.Value
				break
			}
			r.subtype, r.isGRPC = sub, true
		case "grpc-accept-encoding":
		case "grpc-encoding":
			r.encoding = hf.Value
		case ":method":
			r.method = hf.Value
		case ":path":
			r.path = hf.Value
		case "grpc-timeout":
			r.timeoutSet = true
			var err error
			if r.timeout, err = decodeTimeout(hf.Value); err != nil {
				r.headerErr = status.Newf(codes.Internal, "malformed grpc-timeout: %v", err)
			}
		case "connection":
			r.protocolErr = true
		default:
			if isReservedHeader(hf.Name) && !isWhitelistedHeader(hf.Name) {
				break
			}
			switch hf.Name {
			case ":authority":
				r.nAuthority++
			case "host":
				r.nHost++
			}
			if _, err := decodeMetadataHeader(hf.Name, hf.Value); err != nil {
				r.headerErr = status.Newf(codes.Internal, "malformed binary metadata %q in header %q: %v", hf.Value, hf.Name, err)
			}
		}
	}
}

// onHeaders opens a stream, or answers its headers at once when they are
// not a call to serve: in grpc-go's order, with grpc-go's answers.
func (c *conn) onHeaders(f *headerBlock) {
	id := f.id
	c.mu.Lock()
	if id%2 != 1 || id <= c.maxStreamID {
		c.mu.Unlock()
		c.goAway(http2.ErrCodeProtocol, fmt.Sprintf("received an illegal stream id: %v", id))
		return
	}
	c.maxStreamID = id
	if f.truncated { // past MaxHeaderListSize
		c.appendRST(id, http2.ErrCodeFrameSize)
		c.mu.Unlock() // the read loop writes it
		return
	}
	c.mu.Unlock()
	var r request
	r.parse(f.fields)
	rst := !f.end
	switch {
	case r.nAuthority > 1 || r.nHost > 1:
		c.earlyAbort(id, r.subtype, status.Newf(codes.Internal, "num values of :authority: %v, num values of host: %v, both must only have 1 value as per HTTP/2 spec", r.nAuthority, r.nHost), 400, rst)
		return
	case r.protocolErr:
		c.mu.Lock()
		c.appendRST(id, http2.ErrCodeProtocol)
		c.mu.Unlock() // the read loop writes it
		return
	case !r.isGRPC:
		c.earlyAbort(id, r.subtype, status.Newf(codes.InvalidArgument, "invalid gRPC request content-type %q", r.contentType), 415, rst)
		return
	case r.headerErr != nil:
		c.earlyAbort(id, r.subtype, r.headerErr, 400, rst)
		return
	case r.nAuthority == 0 && r.nHost == 0:
		c.earlyAbort(id, r.subtype, status.New(codes.Internal, "no host or :authority header present"), 400, rst)
		return
	}
	o := &c.s.opts
	st := &stream{c: c, id: id, path: r.path, subtype: r.subtype, recvWin: int64(o.InitialWindowSize)}
	st.keepFields(f.fields)
	if m := c.s.methods[r.path]; m != nil && (r.encoding == "" || r.encoding == "identity") && (r.subtype == "" || r.subtype == "proto") {
		st.m = m
	} else {
		st.body = newBody(st)
	}
	c.mu.Lock()
	if c.drainPhase == 2 || c.err != nil { // after the final GOAWAY: ignored, as on grpc-go
		c.mu.Unlock()
		return
	}
	if uint32(len(c.streams)) >= o.MaxConcurrentStreams {
		c.appendRST(id, http2.ErrCodeRefusedStream)
		c.mu.Unlock() // the read loop writes it
		return
	}
	if r.method != "POST" {
		c.mu.Unlock()
		c.earlyAbort(id, r.subtype, status.Newf(codes.Internal, "Received a HEADERS frame with :method %q which should be POST", r.method), 405, rst)
		return
	}
	if o.MaxPendingHeaderBytes > 0 && rst {
		if held := c.pendingHdr; held+r.size > o.MaxPendingHeaderBytes {
			c.mu.Unlock()
			if o.Refused != nil {
				o.Refused.Inc()
			}
			c.earlyAbort(id, r.subtype, status.Newf(codes.ResourceExhausted,
				"header lists of streams awaiting their message exceed the connection's budget (%d bytes held, %d asked, budget %d)",
				held, r.size, o.MaxPendingHeaderBytes), 200, rst)
			return
		}
		c.pendingHdr += r.size
		st.hdrBytes = r.size
	}
	if r.timeoutSet && r.timeout <= 0 {
		st.arrivedLocked()
		c.mu.Unlock()
		c.earlyAbort(id, r.subtype, status.New(codes.DeadlineExceeded, "context deadline exceeded"), 200, rst)
		return
	}
	st.sendWin = int64(c.peerWin)
	c.streams[id] = st
	if r.timeoutSet {
		st.deadline = time.Now().Add(r.timeout)
		st.timer = time.AfterFunc(r.timeout, st.expire)
	}
	if o.FirstMessageTimeout > 0 && rst {
		st.firstAwaited = true
		c.unarmed = append(c.unarmed, st) // the reader arms its timer if it must wait
	}
	st.waiting = st.hdrBytes > 0 || st.firstAwaited
	st.fbWait = st.body != nil // handed over once its message arrives (fallback.go)
	c.mu.Unlock()
	if !rst {
		st.onEnd()
	}
}

// earlyAbort answers a stream's headers with an HTTP status and a gRPC
// status in one HEADERS frame, then RST_STREAM(NO_ERROR) when rst (the
// client has not ended its side), as grpc-go's writeEarlyAbort.
func (c *conn) earlyAbort(id uint32, subtype string, s *status.Status, httpStatus int, rst bool) {
	var e headerEncoder
	e.status(httpStatus)
	e.field("content-type", contentType(subtype))
	e.grpcStatus(s.Code(), s.Message())
	if p := s.Proto(); len(p.GetDetails()) > 0 {
		if b, err := proto.Marshal(p); err == nil {
			e.field("grpc-status-details-bin", encodeBinHeader(b))
		}
	}
	c.mu.Lock()
	if !e.fits(c.peerHdrList) {
		c.appendRST(id, http2.ErrCodeInternal)
	} else {
		c.appendHeaders(id, e.b, true)
		if rst {
			c.appendRST(id, http2.ErrCodeNo)
		}
	}
	c.mu.Unlock() // the read loop writes it
}

// headerEncoder encodes a header block with HPACK literals that are never
// indexed: no state is shared between blocks, so that blocks can be built
// by any goroutine, in any order, and precomputed.
type headerEncoder struct {
	b    []byte
	size uint32 // the header list's size, as HTTP/2 counts it
}

func (e *headerEncoder) status200() {
	e.b = append(e.b, 0x88) // static table entry 8, :status 200
	e.size += uint32(len(":status") + 3 + 32)
}

func (e *headerEncoder) status(code int) {
	if code == 200 {
		e.status200()
		return
	}
	v := strconv.Itoa(code)
	e.b = hpackInt(e.b, 0x00, 4, 8) // literal value, name of static entry 8
	e.str(v)
	e.size += uint32(len(":status") + len(v) + 32)
}

func (e *headerEncoder) field(name, value string) {
	e.b = append(e.b, 0x00)
	e.str(name)
	e.str(value)
	e.size += uint32(len(name) + len(value) + 32)
}

func (e *headerEncoder) str(s string) {
	e.b = append(hpackInt(e.b, 0, 7, uint64(len(s))), s...)
}

func (e *headerEncoder) grpcStatus(code codes.Code, msg string) {
	e.field("grpc-status", strconv.Itoa(int(code)))
	e.field("grpc-message", encodeGrpcMessage(msg))
}

// metadata encodes md's fields, reserved names left out and binary values
// in base64, as grpc-go does.
func (e *headerEncoder) metadata(md metadata.MD) {
	for k, vs := range md {
		k = strings.ToLower(k)
		if isReservedHeader(k) {
			continue
		}
		for _, v := range vs {
			e.field(k, encodeMetadataHeader(k, v))
		}
	}
}

// fits reports whether the header list is within the client's
// SETTINGS_MAX_HEADER_LIST_SIZE (0: none).
func (e *headerEncoder) fits(limit uint32) bool { return limit == 0 || e.size <= limit }

// hpackInt appends an HPACK integer with an n-bit prefix after the bits of
// first.
func hpackInt(b []byte, first byte, n uint, v uint64) []byte {
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

// The constant blocks of a successful call.
var (
	okHeadersPlain, okHeadersProto = func() ([]byte, []byte) {
		var a, b headerEncoder
		a.status200()
		a.field("content-type", "application/grpc")
		b.status200()
		b.field("content-type", "application/grpc+proto")
		return a.b, b.b
	}()
	okTrailers = func() []byte {
		var e headerEncoder
		e.grpcStatus(codes.OK, "")
		return e.b
	}()
)

func okHeaders(subtype string) []byte {
	if subtype == "proto" {
		return okHeadersProto
	}
	return okHeadersPlain
}

const baseContentType = "application/grpc"

// contentSubtype is grpc-go's grpcutil.ContentSubtype.
func contentSubtype(ct string) (string, bool) {
	if ct == baseContentType {
		return "", true
	}
	if !strings.HasPrefix(ct, baseContentType) {
		return "", false
	}
	switch ct[len(baseContentType)] {
	case '+', ';':
		return ct[len(baseContentType)+1:], true
	}
	return "", false
}

func contentType(subtype string) string {
	if subtype == "" {
		return baseContentType
	}
	return baseContentType + "+" + subtype
}

// isReservedHeader and isWhitelistedHeader are grpc-go's: the reserved
// names are not metadata, except :authority and user-agent.
func isReservedHeader(h string) bool {
	if h != "" && h[0] == ':' {
		return true
	}
	switch h {
	case "content-type", "user-agent", "grpc-message-type", "grpc-encoding",
		"grpc-message", "grpc-status", "grpc-timeout", "te":
		return true
	}
	return false
}

func isWhitelistedHeader(h string) bool { return h == ":authority" || h == "user-agent" }

func encodeBinHeader(v []byte) string { return base64.RawStdEncoding.EncodeToString(v) }

func decodeBinHeader(v string) ([]byte, error) {
	if len(v)%4 == 0 {
		return base64.StdEncoding.DecodeString(v)
	}
	return base64.RawStdEncoding.DecodeString(v)
}

func encodeMetadataHeader(k, v string) string {
	if strings.HasSuffix(k, "-bin") {
		return encodeBinHeader([]byte(v))
	}
	return v
}

func decodeMetadataHeader(k, v string) (string, error) {
	if strings.HasSuffix(k, "-bin") {
		b, err := decodeBinHeader(v)
		return string(b), err
	}
	return v, nil
}

// decodeTimeout parses grpc-timeout: at most 8 digits and a unit.
func decodeTimeout(s string) (time.Duration, error) {
	n := len(s)
	if n < 2 {
		return 0, fmt.Errorf("transport: timeout string is too short: %q", s)
	}
	if n > 9 {
		return 0, fmt.Errorf("transport: timeout string is too long: %q", s)
	}
	var d time.Duration
	switch s[n-1] {
	case 'H':
		d = time.Hour
	case 'M':
		d = time.Minute
	case 'S':
		d = time.Second
	case 'm':
		d = time.Millisecond
	case 'u':
		d = time.Microsecond
	case 'n':
		d = time.Nanosecond
	default:
		return 0, fmt.Errorf("transport: timeout unit is not recognized: %q", s)
	}
	t, err := strconv.ParseUint(s[:n-1], 10, 64)
	if err != nil {
		return 0, err
	}
	if d == time.Hour && t > math.MaxInt64/uint64(time.Hour) {
		return time.Duration(math.MaxInt64), nil
	}
	return d * time.Duration(t), nil
}

// encodeGrpcMessage percent-encodes a grpc-message, as grpc-go does.
func encodeGrpcMessage(msg string) string {
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; !(c >= ' ' && c <= '~' && c != '%') {
			return encodeGrpcMessageUnchecked(msg)
		}
	}
	return msg
}

func encodeGrpcMessageUnchecked(msg string) string {
	var sb strings.Builder
	for len(msg) > 0 {
		r, size := utf8.DecodeRuneInString(msg)
		for _, b := range []byte(string(r)) {
			if size > 1 || !(b >= ' ' && b <= '~' && b != '%') {
				fmt.Fprintf(&sb, "%%%02X", b)
			} else {
				sb.WriteByte(b)
			}
		}
		msg = msg[size:]
	}
	return sb.String()
}
