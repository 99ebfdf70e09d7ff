// Package listen holds the listeners of sluice serve: a cap on the
// connections each listener holds open, a bound on how long any write to a
// connection may block, and, for the gRPC listener, bounds on what a stream
// may hold before its request message arrives (stream.go).
//
// A server on these listeners cannot be held by a client that connects and
// never sends (the cap, with the servers' own read timeouts), nor by a
// client that sends and never reads its answers (the write timeout): every
// listener, the admin listener included, has both.
package listen

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// Options are the limits of one listener.
type Options struct {
	// MaxConns is the most connections held open at once; a connection
	// beyond it is closed as soon as it is accepted. 0: no cap.
	MaxConns int
	// WriteTimeout bounds each write to a connection: a write that has not
	// finished after it (a client that does not read its answers, so that
	// the socket's buffers stay full) fails, and the server then closes
	// the connection. A deadline the server sets itself (net/http's
	// WriteTimeout) still applies when it is earlier. 0: none.
	WriteTimeout time.Duration
	// Open counts the connections held open (Inc on accept, Dec on
	// close), and Rejected those closed at once for the cap; either may
	// be nil. A prometheus.Gauge and a prometheus.Counter fit.
	Open interface {
		Inc()
		Dec()
	}
	Rejected interface{ Inc() }
}

// Listen listens on the TCP address addr with the limits of o, and with
// TLS when tc is not nil (the cap applies before the TLS handshake, so a
// connection beyond it costs no handshake).
func Listen(addr string, o Options, tc *tls.Config) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ll := Limit(l, o)
	if tc != nil {
		ll = tls.NewListener(ll, tc)
	}
	return ll, nil
}

// Limit wraps l with the limits of o.
//
// Rejecting a connection beyond the cap rather than blocking Accept (as
// golang.org/x/net/netutil.LimitListener does) tells the client straight
// away, so that it retries elsewhere, instead of leaving its connection in
// the kernel's accept queue, unanswered, until it times out, and then
// serving it long after it gave up.
func Limit(l net.Listener, o Options) net.Listener {
	ll := &listener{Listener: l, o: o}
	if o.MaxConns > 0 {
		ll.sem = make(chan struct{}, o.MaxConns)
	}
	return ll
}

type listener struct {
	net.Listener
	o   Options
	sem chan struct{} // nil: no cap
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.sem != nil {
			select {
			case l.sem <- struct{}{}:
			default:
				// Counted before the close, so that whoever sees the
				// connection closed finds it counted.
				if l.o.Rejected != nil {
					l.o.Rejected.Inc()
				}
				c.Close()
				continue
			}
		}
		if l.o.Open != nil {
			l.o.Open.Inc()
		}
		return &conn{Conn: c, l: l, timeout: l.o.WriteTimeout}, nil
	}
}

// release gives a closed connection's slot back.
func (l *listener) release() {
	if l.o.Open != nil {
		l.o.Open.Dec()
	}
	if l.sem != nil {
		<-l.sem
	}
}

// conn is an accepted connection: its slot is given back on its first
// Close, and each Write has a deadline of at most timeout from its start.
type conn struct {
	net.Conn
	l       *listener
	once    sync.Once
	timeout time.Duration

	mu   sync.Mutex
	user time.Time // the write deadline the server set (zero: none)
	set  time.Time // the write deadline in force on Conn
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.l.release)
	return err
}

// slack is the part of the timeout by which a write's deadline may be
// early: a deadline set less than timeout/slack ago is kept, so that a
// stream of small writes does not reset the deadline on every one.
const slack = 16

// Write writes b within the write timeout. When the timeout (rather than
// a deadline of the server's own) ends the write, the connection is
// closed: a server whose writes are done by a goroutine of their own (gRPC's)
// does not close it on a write error, and would keep it, with its slot,
// for as long as the client keeps it open.
func (c *conn) Write(b []byte) (int, error) {
	if c.timeout <= 0 {
		return c.Conn.Write(b)
	}
	ours, err := c.arm()
	if err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(b)
	if ours && errors.Is(err, os.ErrDeadlineExceeded) {
		c.Close()
	}
	return n, err
}

// arm sets the write deadline to the server's own or timeout from now,
// whichever is earlier (unless the one in force is at most timeout/slack
// earlier than that); ours reports that the deadline in force is the
// timeout's.
func (c *conn) arm() (ours bool, err error) {
	d := time.Now().Add(c.timeout)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.user.IsZero() && c.user.Before(d) {
		d = c.user
	}
	if c.set.IsZero() || c.set.After(d) || d.Sub(c.set) >= c.timeout/slack {
		c.set = d
		err = c.Conn.SetWriteDeadline(d)
	}
	return c.user.IsZero() || c.set.Before(c.user), err
}

// SetWriteDeadline records the server's deadline; it takes effect at once
// when it is earlier than the one in force, else at the next write.
func (c *conn) SetWriteDeadline(t time.Time) error {
	if c.timeout <= 0 {
		return c.Conn.SetWriteDeadline(t)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.user = t
	if t.IsZero() || !c.set.IsZero() && !t.Before(c.set) {
		return nil
	}
	c.set = t
	return c.Conn.SetWriteDeadline(t)
}

func (c *conn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}
