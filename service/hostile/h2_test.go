package hostile

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2conn is a raw HTTP/2 client connection to the gRPC listener, for what a
// well-behaved gRPC client never does: open streams past the server's
// limit and leave them idle, or flood pings. It acknowledges the server's
// SETTINGS and PINGs and counts what the server sends back.
type h2conn struct {
	nc     net.Conn
	opened time.Time

	wmu    sync.Mutex
	fr     *http2.Framer
	hbuf   bytes.Buffer
	enc    *hpack.Encoder
	nextID uint32

	refused  atomic.Int64 // RST_STREAM REFUSED_STREAM
	resets   atomic.Int64 // every RST_STREAM
	answered atomic.Int64 // HEADERS frames (responses or trailers)
	goAway   atomic.Int64 // GOAWAY error code + 1, 0 while none
	closed   chan struct{}
	closedAt time.Time
}

const rlsPath = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

func dialH2(addr string) (*h2conn, error) {
	nc, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return nil, err
	}
	c := &h2conn{nc: nc, opened: time.Now(), nextID: 1, closed: make(chan struct{})}
	c.fr = http2.NewFramer(nc, nc)
	c.enc = hpack.NewEncoder(&c.hbuf)
	if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
		nc.Close()
		return nil, err
	}
	if err := c.fr.WriteSettings(); err != nil {
		nc.Close()
		return nil, err
	}
	go c.read()
	return c, nil
}

func (c *h2conn) read() {
	defer func() { c.closedAt = time.Now(); close(c.closed) }()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.write(func() error { return c.fr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				c.write(func() error { return c.fr.WritePing(true, f.Data) })
			}
		case *http2.RSTStreamFrame:
			c.resets.Add(1)
			if f.ErrCode == http2.ErrCodeRefusedStream {
				c.refused.Add(1)
			}
		case *http2.HeadersFrame:
			c.answered.Add(1)
		case *http2.GoAwayFrame:
			c.goAway.CompareAndSwap(0, int64(f.ErrCode)+1)
		}
	}
}

func (c *h2conn) write(fn func() error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(2 * time.Second))
	return fn()
}

// openStreams opens n ShouldRateLimit streams that never send their
// request message.
func (c *h2conn) openStreams(n int) error { return c.openStreamsOn(rlsPath, n) }

// openStreamsOn opens n streams of the gRPC method path that never send
// their request message.
func (c *h2conn) openStreamsOn(path string, n int) error {
	for range n {
		err := c.write(func() error {
			c.hbuf.Reset()
			for _, hf := range [][2]string{
				{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", c.nc.RemoteAddr().String()},
				{"content-type", "application/grpc"}, {"te", "trailers"},
			} {
				c.enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
			}
			id := c.nextID
			c.nextID += 2
			return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true})
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// pings sends n PING frames at once.
func (c *h2conn) pings(n int) error {
	for i := range n {
		if err := c.write(func() error { return c.fr.WritePing(false, [8]byte{byte(i)}) }); err != nil {
			return err
		}
	}
	return nil
}

// isClosed reports whether the server has closed the connection.
func (c *h2conn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// closedWithin reports whether the server closed the connection within
// bound of its opening; a close already seen by the socket when the bound
// passes counts, even when a busy machine runs the reader late.
func (c *h2conn) closedWithin(bound time.Duration) bool {
	select {
	case <-c.closed:
		return true
	case <-time.After(time.Until(c.opened.Add(bound))):
	}
	select {
	case <-c.closed:
		return true
	case <-time.After(checkWindow):
		return false
	}
}

func (c *h2conn) Close() { c.nc.Close(); <-c.closed }
