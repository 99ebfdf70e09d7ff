package grpcfast

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

const (
	// readBufferSize is the connection's read buffer, grpc-go's default.
	readBufferSize = 32 << 10
	// maxFrameSize is the largest frame the server reads, grpc-go's.
	maxFrameSize = 16 << 10
	// throttleBytes: past this many bytes of frames waiting to be
	// written (a client that sends but does not read), the reader stops
	// reading until they are written, so that control frames it answers
	// (PING, SETTINGS) cannot queue without bound.
	throttleBytes = 64 << 10
	// maxQueuedData bounds the DATA a fallback stream queues beyond its
	// flow-control windows: its writer blocks past it.
	maxQueuedData = 64 << 10
	// drainPingTimeout is how long a graceful GOAWAY waits for the
	// client's PING acknowledgement before the final GOAWAY, grpc-go's.
	drainPingTimeout = 5 * time.Second
	// maxPingStrikes: a client pinging more often than the policy allows
	// gets GOAWAY ENHANCE_YOUR_CALM at the third such ping, as on
	// grpc-go.
	maxPingStrikes = 2
	// pingWithoutStreams is the shortest interval between pings on a
	// connection without streams when the policy does not permit them.
	pingWithoutStreams = 2 * time.Hour
)

// goAwayPing is the PING that follows the first GOAWAY of a graceful
// close, grpc-go's.
var goAwayPing = [8]byte{1, 6, 1, 8, 0, 3, 3, 9}

var errConnClosed = errors.New("grpcfast: connection closed")

// conn is one HTTP/2 connection. Its reader goroutine owns the framer and
// the HPACK decoder; everything the writers share is under mu.
type conn struct {
	s     *Server
	nc    net.Conn
	br    *bufio.Reader
	fr    *http2.Framer
	hdec  *hdecoder
	tls   *tls.ConnectionState
	raddr net.Addr
	laddr net.Addr

	// Owned by the reader.
	recvWin     int64 // what the client may still send on the connection
	recvUnacked int64 // received, not yet given back with WINDOW_UPDATE
	lastPingAt  time.Time
	pingStrikes int

	resetPingStrikes atomic.Bool // a HEADERS or DATA frame was written
	readActive       atomic.Bool // a frame was read since the last keepalive check

	mu          sync.Mutex
	cond        *sync.Cond // windows grew, queued data was written, the connection closed
	streams     map[uint32]*stream
	maxStreamID uint32
	sendWin     int64 // the client's connection window for our DATA
	peerWin     int32 // the client's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame   uint32
	peerHdrList uint32 // 0: no limit
	blocked     []*stream
	wbuf, spare []byte
	writing     bool
	closeAfter  bool  // close once everything queued is written
	err         error // the connection failed or closed
	idleSince   time.Time
	pendingHdr  int64 // header bytes of streams awaiting their message
	// unarmed are the streams whose FirstMessageTimeout timer is not
	// armed yet (armUnarmedLocked): almost every message comes in the
	// same read as its headers, and then no timer is made at all.
	unarmed    []*stream
	drainPhase int // 0, 1 after the first GOAWAY, 2 after the final one
	drainDebug string
	done       chan struct{}
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, raddr: nc.RemoteAddr(), laddr: nc.LocalAddr(),
		streams: map[uint32]*stream{}, sendWin: defaultWindow, peerWin: defaultWindow, peerFrame: maxFrameSize,
		idleSince: time.Now(), done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	c.br = bufio.NewReaderSize(nc, readBufferSize)
	c.fr = http2.NewFramer(nil, c.br)
	c.fr.SetMaxReadFrameSize(maxFrameSize)
	c.fr.SetReuseFrames()
	max := s.opts.MaxHeaderListSize
	if max == 0 {
		max = defaultMaxHeaderListSize
	}
	c.hdec = newHDecoder(max)
	c.recvWin = int64(s.opts.InitialConnWindowSize)
	return c
}

// handshake runs the TLS handshake (on a TLS connection), sends the
// server's SETTINGS, and reads the client's preface and first SETTINGS,
// all within ConnectionTimeout.
func (c *conn) handshake() error {
	o := &c.s.opts
	c.nc.SetDeadline(time.Now().Add(o.ConnectionTimeout))
	if tc, ok := c.nc.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			return err
		}
		c.tls = tlsState(tc)
	}
	settings := []http2.Setting{{ID: http2.SettingMaxFrameSize, Val: maxFrameSize}}
	if o.MaxConcurrentStreams != 1<<32-1 {
		settings = append(settings, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: o.MaxConcurrentStreams})
	}
	if o.InitialWindowSize != defaultWindow {
		settings = append(settings, http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(o.InitialWindowSize)})
	}
	if o.MaxHeaderListSize != 0 {
		settings = append(settings, http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: o.MaxHeaderListSize})
	}
	var p []byte
	for _, st := range settings {
		p = binary.BigEndian.AppendUint16(p, uint16(st.ID))
		p = binary.BigEndian.AppendUint32(p, st.Val)
	}
	out := appendFrame(nil, http2.FrameSettings, 0, 0, p)
	if d := o.InitialConnWindowSize - defaultWindow; d > 0 {
		out = appendFrame(out, http2.FrameWindowUpdate, 0, 0, binary.BigEndian.AppendUint32(nil, uint32(d)))
	}
	if _, err := c.nc.Write(out); err != nil {
		return err
	}
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, preface[:]); err != nil {
		return err
	}
	if string(preface[:]) != http2.ClientPreface {
		return fmt.Errorf("grpcfast: bogus greeting %q", preface)
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		return err
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return fmt.Errorf("grpcfast: first frame %T, want SETTINGS", f)
	}
	if err := c.onSettings(sf); err != nil { // writes its acknowledgement
		return err
	}
	c.mu.Lock()
	err = c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	c.nc.SetDeadline(time.Time{})
	return nil
}

// readLoop reads and handles frames until the connection fails or
// closes. What it queues for the client (answers to SETTINGS and PING,
// window updates, the responses of calls run inline) is written once the
// frames already received are handled, before it waits for more: one
// write for a batch.
func (c *conn) readLoop() {
	defer c.closeWith(errConnClosed)
	for {
		f, err := c.fr.ReadFrame()
		c.readActive.Store(true)
		if err != nil {
			if !c.onReadError(err) {
				return
			}
			continue
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			hb, err := c.hdec.read(c.fr, f)
			if err != nil {
				if !c.onReadError(err) {
					return
				}
				break
			}
			c.onHeaders(&hb)
		case *http2.DataFrame:
			c.onData(f)
		case *http2.RSTStreamFrame:
			c.onRSTStream(f)
		case *http2.SettingsFrame:
			if err := c.onSettings(f); err != nil {
				c.goAway(connErrCode(err), err.Error())
				return
			}
		case *http2.PingFrame:
			c.onPing(f)
		case *http2.WindowUpdateFrame:
			c.onWindowUpdate(f)
		case *http2.PushPromiseFrame:
			c.goAway(http2.ErrCodeProtocol, "PUSH_PROMISE from a client")
			return
		}
		// GOAWAY from the client is ignored, as on grpc-go; PRIORITY and
		// unknown frames are ignored, as HTTP/2 asks.
		c.mu.Lock()
		if len(c.unarmed) > 0 && (len(c.unarmed) >= maxUnarmed || c.wouldBlock()) {
			c.armUnarmedLocked()
		}
		for c.writing && len(c.wbuf) > throttleBytes && c.err == nil {
			c.cond.Wait()
		}
		switch {
		case c.err != nil:
			c.mu.Unlock()
			return
		case len(c.wbuf) > 0 && (len(c.wbuf) >= throttleBytes || c.wouldBlock()):
			c.flushLocked(false)
		case c.closeAfter && len(c.streams) == 0 && !c.writing && len(c.wbuf) == 0:
			c.mu.Unlock()
			return
		default:
			c.mu.Unlock()
		}
	}
}

// maxUnarmed bounds the streams whose first-message timer waits to be
// armed, for a client that never lets the reader wait.
const maxUnarmed = 64

// armUnarmedLocked arms the FirstMessageTimeout timer of each stream that
// still waits for its message. The reader calls it before it could wait
// for the network, so that a stream's timer runs whenever its message is
// not already read; the time counts from then (the frames read with the
// headers are handled first: microseconds, no time.Now per stream). c.mu
// is held.
func (c *conn) armUnarmedLocked() {
	for i, st := range c.unarmed {
		if !st.closed && st.firstAwaited && st.firstTimer == nil {
			st.firstTimer = time.AfterFunc(c.s.opts.FirstMessageTimeout, st.firstMessageExpired)
			c.s.armed.Add(1)
		}
		c.unarmed[i] = nil
	}
	c.unarmed = c.unarmed[:0]
}

// wouldBlock reports whether the next frame is not all in the read
// buffer, so that reading it waits for the network.
func (c *conn) wouldBlock() bool {
	n := c.br.Buffered()
	if n < 9 {
		return true
	}
	h, _ := c.br.Peek(3)
	return n < 9+(int(h[0])<<16|int(h[1])<<8|int(h[2]))
}

// onReadError handles an error of the framer: a stream's is answered with
// RST_STREAM and reading goes on; any other ends the connection (with
// GOAWAY for a protocol error). It reports whether to go on.
func (c *conn) onReadError(err error) bool {
	var se http2.StreamError
	if errors.As(err, &se) {
		c.mu.Lock()
		if st := c.streams[se.StreamID]; st != nil {
			c.resetLocked(st, se.Code, errStreamReset)
		} else {
			c.appendRST(se.StreamID, se.Code)
		}
		c.mu.Unlock()
		return true
	}
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &ce):
		detail := ""
		if d := c.fr.ErrorDetail(); d != nil {
			detail = d.Error()
		}
		c.goAway(http2.ErrCode(ce), detail)
	case errors.Is(err, http2.ErrFrameTooLarge):
		c.goAway(http2.ErrCodeFrameSize, "frame too large")
	}
	return false
}

// connErrCode is the HTTP/2 code of a connection error.
func connErrCode(err error) http2.ErrCode {
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		return http2.ErrCode(ce)
	}
	return http2.ErrCodeProtocol
}

// goAway sends GOAWAY with code and debug data, and closes the
// connection once it is written (or after a second, to a client that does
// not read).
func (c *conn) goAway(code http2.ErrCode, debug string) {
	c.mu.Lock()
	c.appendGoAway(c.maxStreamID, code, debug)
	for _, st := range c.streams {
		st.closeLocked(errConnClosed)
	}
	c.closeAfter = true
	for c.writing && c.err == nil {
		c.cond.Wait()
	}
	if c.err == nil && len(c.wbuf) > 0 {
		out := c.wbuf
		c.wbuf, c.writing = nil, true
		c.mu.Unlock()
		c.nc.SetWriteDeadline(time.Now().Add(time.Second))
		c.nc.Write(out)
		c.mu.Lock()
		c.writing = false
	}
	c.mu.Unlock()
	c.closeWith(errConnClosed)
}

// onData handles a DATA frame: flow control, then the stream's message.
func (c *conn) onData(f *http2.DataFrame) {
	n := int64(f.Length)
	if n > 0 {
		if c.recvWin -= n; c.recvWin < 0 {
			c.goAway(http2.ErrCodeFlowControl, "connection flow-control window exceeded")
			return
		}
		// The connection's window is given back as data arrives, whether
		// or not its stream reads it (as grpc-go does): a slow stream
		// holds its own window, not the others'.
		if c.recvUnacked += n; c.recvUnacked >= int64(c.s.opts.InitialConnWindowSize)/4 {
			c.mu.Lock()
			c.appendWindowUpdate(0, uint32(c.recvUnacked))
			c.mu.Unlock()
			c.recvWin += c.recvUnacked
			c.recvUnacked = 0
		}
	}
	c.mu.Lock()
	st := c.streams[f.StreamID]
	if st == nil {
		c.mu.Unlock() // a stream already closed: ignored, as on grpc-go
		return
	}
	if st.recvDone {
		c.resetLocked(st, http2.ErrCodeStreamClosed, errStreamReset)
		c.mu.Unlock()
		return
	}
	if n > 0 {
		if st.recvWin -= n; st.recvWin < 0 {
			c.resetLocked(st, http2.ErrCodeFlowControl, errStreamReset)
			c.mu.Unlock()
			return
		}
		if pad := n - int64(len(f.Data())); pad > 0 {
			c.giveBackLocked(st, pad)
		}
	}
	c.mu.Unlock()
	if data := f.Data(); len(data) > 0 {
		st.onData(data)
	}
	if f.StreamEnded() {
		st.onEnd()
	}
}

// giveBackLocked returns n bytes of st's window to the client, in
// WINDOW_UPDATEs of at least a quarter of the window, while the client
// may still send.
func (c *conn) giveBackLocked(st *stream, n int64) {
	st.recvUnacked += n
	if st.recvDone || st.closed || st.recvUnacked < int64(c.s.opts.InitialWindowSize)/4 {
		return
	}
	c.appendWindowUpdate(st.id, uint32(st.recvUnacked))
	st.recvWin += st.recvUnacked
	st.recvUnacked = 0
}

func (c *conn) onRSTStream(f *http2.RSTStreamFrame) {
	c.mu.Lock()
	if st := c.streams[f.StreamID]; st != nil {
		st.closeLocked(http2.StreamError{StreamID: f.StreamID, Code: f.ErrCode})
	}
	c.mu.Unlock()
}

// onSettings applies the client's SETTINGS and acknowledges them.
func (c *conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	c.mu.Lock()
	// Values out of HTTP/2's ranges are not refused, as on grpc-go (the
	// framer refuses a window past 2^31-1); a frame size is clamped.
	err := f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - int64(c.peerWin)
			for _, st := range c.streams {
				st.sendWin = min(st.sendWin+delta, maxSendWindow)
			}
			c.peerWin = int32(s.Val)
		case http2.SettingMaxFrameSize:
			c.peerFrame = min(max(s.Val, 1<<14), 1<<24-1)
		case http2.SettingMaxHeaderListSize:
			c.peerHdrList = s.Val
		}
		return nil
	})
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.wbuf = appendFrame(c.wbuf, http2.FrameSettings, http2.FlagSettingsAck, 0, nil)
	c.pumpAllLocked()
	c.mu.Unlock()
	return nil
}

// onPing answers a PING and enforces the keepalive policy, as grpc-go's
// server does.
func (c *conn) onPing(f *http2.PingFrame) {
	if f.IsAck() {
		if f.Data == goAwayPing {
			c.finalGoAway()
		}
		return
	}
	c.mu.Lock()
	c.wbuf = appendFrame(c.wbuf, http2.FramePing, http2.FlagPingAck, 0, f.Data[:])
	active := len(c.streams)
	c.mu.Unlock()

	now := time.Now()
	defer func() { c.lastPingAt = now }()
	if c.resetPingStrikes.CompareAndSwap(true, false) {
		c.pingStrikes = 0
		return
	}
	p := &c.s.opts.KeepalivePolicy
	if active < 1 && !p.PermitWithoutStream {
		if c.lastPingAt.Add(pingWithoutStreams).After(now) {
			c.pingStrikes++
		}
	} else if c.lastPingAt.Add(p.MinTime).After(now) {
		c.pingStrikes++
	}
	if c.pingStrikes > maxPingStrikes {
		c.goAway(http2.ErrCodeEnhanceYourCalm, "too_many_pings")
	}
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) {
	c.mu.Lock()
	// A window past 2^31-1 is the client's error, which grpc-go's server
	// does not answer: nor does this one (the window is only capped).
	if f.StreamID == 0 {
		c.sendWin = min(c.sendWin+int64(f.Increment), maxSendWindow)
		c.pumpAllLocked()
	} else if st := c.streams[f.StreamID]; st != nil {
		st.sendWin = min(st.sendWin+int64(f.Increment), maxSendWindow)
		c.pumpLocked(st)
	}
	c.mu.Unlock()
}

// pumpAllLocked writes what the windows now allow of every blocked
// stream's queued data.
func (c *conn) pumpAllLocked() {
	blocked := c.blocked
	c.blocked = nil
	for _, st := range blocked {
		st.blocked = false
		c.pumpLocked(st)
	}
	c.cond.Broadcast()
}

// pumpLocked writes as much of st's queued data as the windows and the
// client's frame size allow, then its trailers once all is written.
func (c *conn) pumpLocked(st *stream) {
	for len(st.out) > 0 && !st.closed {
		n := min(int64(len(st.out)), st.sendWin, c.sendWin, int64(c.peerFrame))
		if n <= 0 {
			if !st.blocked {
				st.blocked = true
				c.blocked = append(c.blocked, st)
			}
			return
		}
		c.wbuf = appendFrame(c.wbuf, http2.FrameData, 0, st.id, st.out[:n])
		st.sendWin -= n
		c.sendWin -= n
		st.out = st.out[n:]
		c.resetPingStrikes.Store(true)
	}
	if len(st.out) == 0 {
		st.out = nil
		c.cond.Broadcast()
		if st.trailer != nil && !st.closed {
			c.wbuf = appendFrame(c.wbuf, http2.FrameHeaders, http2.FlagHeadersEndHeaders|http2.FlagHeadersEndStream, st.id, st.trailer)
			st.trailer = nil
			c.finishLocked(st)
		}
	}
}

// finishLocked ends st after its trailers: RST_STREAM(NO_ERROR) when the
// client has not ended its side (as grpc-go does), then the stream is
// closed.
func (c *conn) finishLocked(st *stream) {
	if !st.recvDone {
		c.appendRST(st.id, http2.ErrCodeNo)
	}
	st.closeLocked(errStreamDone)
}

// resetLocked sends RST_STREAM with code for st and closes it; err is
// what its context reports.
func (c *conn) resetLocked(st *stream, code http2.ErrCode, err error) {
	if st.closed {
		return
	}
	c.appendRST(st.id, code)
	st.closeLocked(err)
}

// removeLocked forgets a closed stream.
func (c *conn) removeLocked(st *stream) {
	if c.streams[st.id] == st {
		delete(c.streams, st.id)
		if len(c.streams) == 0 {
			if c.s.opts.Keepalive.MaxConnectionIdle != infinity {
				c.idleSince = time.Now()
			}
			if c.drainPhase == 2 {
				c.closeAfter = true
			}
		}
	}
}

// flushLocked writes the queued frames, unless another goroutine is
// writing them already (it then writes these too); called with mu held,
// it returns with mu released. With yield (a call's goroutine), the
// writer yields once before writing, so that the answers of the calls
// running at the same moment go out in the same write.
func (c *conn) flushLocked(yield bool) {
	if c.writing || c.err != nil {
		c.mu.Unlock()
		return
	}
	if len(c.wbuf) == 0 {
		closeNow := c.closeAfter && len(c.streams) == 0
		c.mu.Unlock()
		if closeNow {
			c.closeWith(errConnClosed)
		}
		return
	}
	c.writing = true
	if yield {
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
	}
	for len(c.wbuf) > 0 && c.err == nil {
		out := c.wbuf
		c.wbuf = c.spare[:0]
		c.mu.Unlock()
		_, err := c.nc.Write(out)
		c.mu.Lock()
		if cap(out) <= 4*throttleBytes {
			c.spare = out[:0]
		}
		if err != nil && c.err == nil {
			c.writing = false
			c.mu.Unlock()
			c.closeWith(err)
			return
		}
		c.cond.Broadcast()
	}
	c.writing = false
	c.cond.Broadcast()
	closeNow := c.closeAfter && len(c.streams) == 0 && c.err == nil
	c.mu.Unlock()
	if closeNow {
		c.closeWith(errConnClosed)
	}
}

// closeWith closes the connection: every stream is cancelled with err.
func (c *conn) closeWith(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	for _, st := range c.streams {
		st.closeLocked(errConnClosed)
	}
	c.blocked = nil
	c.cond.Broadcast()
	c.mu.Unlock()
	c.nc.Close()
	close(c.done)
}

// drain starts a graceful close: GOAWAY with the largest stream id and a
// PING; the final GOAWAY follows the PING's acknowledgement (or
// drainPingTimeout), and the connection closes when its streams are done.
func (c *conn) drain(debug string) {
	c.mu.Lock()
	if c.drainPhase > 0 || c.err != nil {
		c.mu.Unlock()
		return
	}
	c.drainPhase, c.drainDebug = 1, debug
	c.appendGoAway(1<<31-1, http2.ErrCodeNo, debug)
	c.wbuf = appendFrame(c.wbuf, http2.FramePing, 0, 0, goAwayPing[:])
	c.flushLocked(false)
	go func() {
		t := time.NewTimer(drainPingTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			c.finalGoAway()
		case <-c.done:
		}
	}()
}

// finalGoAway sends the GOAWAY naming the last stream the server serves;
// streams the client opens after it are ignored.
func (c *conn) finalGoAway() {
	c.mu.Lock()
	if c.drainPhase != 1 {
		c.mu.Unlock()
		return
	}
	c.drainPhase = 2
	c.appendGoAway(c.maxStreamID, http2.ErrCodeNo, c.drainDebug)
	if len(c.streams) == 0 {
		c.closeAfter = true
	}
	c.flushLocked(false)
}

// keepalive closes the connection after MaxConnectionIdle without calls,
// after MaxConnectionAge (with a grace for the calls in flight), and when
// a PING sent after Keepalive.Time without reads is not answered within
// Keepalive.Timeout: grpc-go's keepalive.ServerParameters.
func (c *conn) keepalive() {
	kp := &c.s.opts.Keepalive
	age := kp.MaxConnectionAge
	if age != infinity {
		// ±10%, as grpc-go, so that clients reconnect spread in time.
		if j := int64(age / 10); j > 0 {
			age += time.Duration(rand.Int64N(2*j) - j)
		}
	}
	idleT, ageT, pingT := time.NewTimer(kp.MaxConnectionIdle), time.NewTimer(age), time.NewTimer(kp.Time)
	defer func() { idleT.Stop(); ageT.Stop(); pingT.Stop() }()
	outstanding, left := false, time.Duration(0)
	for {
		select {
		case <-c.done:
			return
		case <-idleT.C:
			c.mu.Lock()
			idle := c.idleSince
			if len(c.streams) > 0 {
				idle = time.Time{}
			}
			c.mu.Unlock()
			if idle.IsZero() {
				idleT.Reset(kp.MaxConnectionIdle)
				continue
			}
			if d := kp.MaxConnectionIdle - time.Since(idle); d > 0 {
				idleT.Reset(d)
				continue
			}
			c.drain("max_idle")
			return
		case <-ageT.C:
			c.drain("max_age")
			ageT.Reset(kp.MaxConnectionAgeGrace)
			select {
			case <-ageT.C:
				c.closeWith(errors.New("grpcfast: maximum connection age"))
			case <-c.done:
			}
			return
		case <-pingT.C:
			if c.readActive.Swap(false) {
				outstanding = false
				pingT.Reset(kp.Time)
				continue
			}
			if outstanding && left <= 0 {
				c.closeWith(fmt.Errorf("grpcfast: keepalive ping not acknowledged within %v", kp.Timeout))
				return
			}
			if !outstanding {
				c.mu.Lock()
				c.wbuf = appendFrame(c.wbuf, http2.FramePing, 0, 0, make([]byte, 8))
				c.flushLocked(false)
				outstanding, left = true, kp.Timeout
			}
			d := min(kp.Time, left)
			left -= d
			pingT.Reset(d)
		}
	}
}

// appendFrame appends a frame: its 9-byte header, then payload.
func appendFrame(b []byte, t http2.FrameType, flags http2.Flags, id uint32, payload []byte) []byte {
	b = appendFrameHeader(b, len(payload), t, flags, id)
	return append(b, payload...)
}

func appendFrameHeader(b []byte, n int, t http2.FrameType, flags http2.Flags, id uint32) []byte {
	return append(b, byte(n>>16), byte(n>>8), byte(n), byte(t), byte(flags),
		byte(id>>24)&0x7f, byte(id>>16), byte(id>>8), byte(id))
}

func (c *conn) appendRST(id uint32, code http2.ErrCode) {
	c.wbuf = appendFrame(c.wbuf, http2.FrameRSTStream, 0, id, binary.BigEndian.AppendUint32(nil, uint32(code)))
}

func (c *conn) appendWindowUpdate(id, n uint32) {
	c.wbuf = appendFrame(c.wbuf, http2.FrameWindowUpdate, 0, id, binary.BigEndian.AppendUint32(nil, n))
}

func (c *conn) appendGoAway(last uint32, code http2.ErrCode, debug string) {
	var p bytes.Buffer
	binary.Write(&p, binary.BigEndian, last&(1<<31-1))
	binary.Write(&p, binary.BigEndian, uint32(code))
	p.WriteString(debug)
	c.wbuf = appendFrame(c.wbuf, http2.FrameGoAway, 0, 0, p.Bytes())
}
