package statsd

import (
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

const (
	// MaxUDPPacket is the most a UDP packet carries: 1432 bytes, which an
	// MTU of 1500 carries unfragmented (the size envoyproxy/ratelimit's
	// clients use).
	MaxUDPPacket = 1432
	// MaxTCPPacket is the most one write over TCP carries.
	MaxTCPPacket = 64 << 10
	// MaxQueueBytes bounds the packets waiting to be sent (while the
	// server does not answer, say): past it, lines are dropped.
	MaxQueueBytes = 4 << 20
	// MaxLine bounds one line; a longer one is dropped (never the case of
	// the names sluice sends, which are bounded by configuration).
	MaxLine = MaxUDPPacket

	// DefaultFlushInterval is how often the packet being filled is sent
	// when it does not fill up (as envoyproxy/ratelimit's statsd client).
	DefaultFlushInterval = time.Second
	// RetryMin and RetryMax bound the wait before connecting again after a
	// failure: it doubles from RetryMin up to RetryMax, the interval at
	// which envoyproxy/ratelimit's client retries.
	RetryMin = 100 * time.Millisecond
	RetryMax = 3 * time.Second

	dialTimeout  = 1500 * time.Millisecond
	writeTimeout = time.Second
)

// Options configure a Client.
type Options struct {
	// Network is "tcp" (the default) or "udp".
	Network string
	// Addr is the server's host:port.
	Addr string
	// FlushInterval is how often a packet that is not full is sent
	// (default DefaultFlushInterval).
	FlushInterval time.Duration
	// Log receives the connection's errors, at most one warning per
	// failure streak (default: discarded).
	Log *slog.Logger
	// Metrics counts the lines sent and dropped (nil: not counted).
	Metrics *Metrics
	// Dial replaces net.Dialer's DialTimeout (for tests).
	Dial func(network, addr string, timeout time.Duration) (net.Conn, error)
}

// Client sends lines to a statsd server. Its methods are safe for
// concurrent use and never wait on the network.
type Client struct {
	network, addr string
	maxPacket     int
	flushEvery    time.Duration
	log           *slog.Logger
	m             *Metrics
	dial          func(network, addr string, timeout time.Duration) (net.Conn, error)

	mu      sync.Mutex
	cur     packet // the packet being filled
	line    []byte // the line being added
	closed  bool
	queue   chan packet   // bounded by MaxQueueBytes
	free    chan []byte   // packets' buffers, for reuse
	closing chan struct{} // closed by Close
	stop    chan struct{} // closed when Close stops waiting for the server
	done    chan struct{} // closed when run returns
}

// packet is lines ready to be written together.
type packet struct {
	b     []byte
	lines int
}

// New returns a Client sending to o.Addr; it connects in the background.
func New(o Options) (*Client, error) {
	max := MaxTCPPacket
	switch o.Network {
	case "", "tcp":
		o.Network = "tcp"
	case "udp":
		max = MaxUDPPacket
	default:
		return nil, fmt.Errorf("statsd: network %q: want tcp or udp", o.Network)
	}
	if _, _, err := net.SplitHostPort(o.Addr); err != nil {
		return nil, fmt.Errorf("statsd: address %q: want host:port", o.Addr)
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Dial == nil {
		o.Dial = net.DialTimeout
	}
	c := &Client{network: o.Network, addr: o.Addr, maxPacket: max, flushEvery: o.FlushInterval, log: o.Log, m: o.Metrics, dial: o.Dial,
		queue: make(chan packet, MaxQueueBytes/max), free: make(chan []byte, 8),
		closing: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	c.cur.b = c.buffer()
	go c.run()
	return c, nil
}

// buffer returns an empty packet buffer, reused when one is free.
func (c *Client) buffer() []byte {
	select {
	case b := <-c.free:
		return b[:0]
	default:
		return make([]byte, 0, c.maxPacket)
	}
}

// release keeps b for reuse, unless enough are kept.
func (c *Client) release(b []byte) {
	select {
	case c.free <- b[:0]:
	default:
	}
}

// Write adds one line, which ends in '\n', to the packet being filled. It
// never waits: when the queue is full, a packet is dropped and counted.
func (c *Client) Write(line []byte) {
	c.append(func(b []byte) []byte { return append(b, line...) })
}

// append adds the line that enc appends to an empty buffer.
func (c *Client) append(enc func([]byte) []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		c.m.dropped(1, "closed")
		return
	}
	c.line = enc(c.line[:0])
	if len(c.line) > MaxLine {
		c.m.dropped(1, "too_long")
		return
	}
	if len(c.cur.b)+len(c.line) > c.maxPacket {
		c.enqueueLocked()
	}
	c.cur.b = append(c.cur.b, c.line...)
	c.cur.lines++
}

// Flush queues the packet being filled, to be sent now.
func (c *Client) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.enqueueLocked()
	}
}

func (c *Client) enqueueLocked() {
	if c.cur.lines == 0 {
		return
	}
	select {
	case c.queue <- c.cur:
		c.cur = packet{b: c.buffer()}
	default:
		c.m.dropped(c.cur.lines, "queue_full")
		c.cur = packet{b: c.cur.b[:0]}
	}
}

// Close sends what is queued, waiting at most timeout for the server, then
// closes the connection. Lines written after Close are dropped.
func (c *Client) Close(timeout time.Duration) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.enqueueLocked()
	c.closed = true
	close(c.closing)
	c.mu.Unlock()
	t := time.AfterFunc(timeout, func() { close(c.stop) })
	<-c.done
	if !t.Stop() {
		return
	}
	close(c.stop)
}

// run connects, writes the queued packets and sends the packet being
// filled every flushEvery, until Close.
func (c *Client) run() {
	defer close(c.done)
	t := time.NewTicker(c.flushEvery)
	defer t.Stop()
	var (
		conn    net.Conn
		retry   packet // a packet to write again on the next connection
		failing bool   // the last connection attempt or write failed
		wait    = RetryMin
		closing = c.closing
	)
	defer func() {
		if conn != nil {
			conn.Close()
		}
		c.m.dropped(retry.lines, "closed")
		for {
			select {
			case p := <-c.queue:
				c.m.dropped(p.lines, "closed")
			default:
				return
			}
		}
	}()
	for {
		if conn == nil {
			var err error
			if conn, err = c.dial(c.network, c.addr, dialTimeout); err != nil {
				conn = nil
				c.m.connectError()
				if !failing {
					c.log.Warn("statsd: cannot connect; the stats wait (up to 4 MiB) and are sent once it answers", "addr", c.addr, "network", c.network, "err", err)
				}
				failing = true
				if !c.sleep(wait, t) {
					return
				}
				wait = min(2*wait, RetryMax)
				continue
			}
			if failing {
				c.log.Info("statsd: connected", "addr", c.addr, "network", c.network)
			}
			failing, wait = false, RetryMin
		}
		if retry.lines > 0 {
			p := retry
			retry = packet{}
			if err := c.write(conn, p); err != nil {
				c.m.dropped(p.lines, "write_error")
				conn.Close()
				conn = nil
			}
			continue
		}
		var p packet
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.Flush()
			continue
		case <-closing:
			// Closed: write what is queued, then stop.
			select {
			case p = <-c.queue:
			default:
				return
			}
		case p = <-c.queue:
		}
		if err := c.write(conn, p); err != nil {
			if !failing {
				c.log.Warn("statsd: write failed; connecting again", "addr", c.addr, "network", c.network, "err", err)
			}
			failing = true
			conn.Close()
			conn = nil
			if c.network == "tcp" {
				retry = p // once more, on the next connection
			} else {
				c.m.dropped(p.lines, "write_error")
			}
		}
	}
}

// sleep waits d, sending the packet being filled to the queue on every
// tick meanwhile; false when Close stopped it.
func (c *Client) sleep(d time.Duration, t *time.Ticker) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-c.stop:
			return false
		case <-t.C:
			c.Flush()
		case <-timer.C:
			return true
		}
	}
}

// write writes p on conn and gives its buffer back once written.
func (c *Client) write(conn net.Conn, p packet) error {
	_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := conn.Write(p.b); err != nil {
		return err
	}
	c.m.sent(p.lines)
	c.release(p.b)
	return nil
}
