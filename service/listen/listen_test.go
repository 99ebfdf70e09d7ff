package listen

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type gauge struct{ n atomic.Int64 }

func (g *gauge) Inc() { g.n.Add(1) }
func (g *gauge) Dec() { g.n.Add(-1) }

// serve accepts on l and hands each connection to got.
func serve(t *testing.T, l net.Listener) <-chan net.Conn {
	t.Helper()
	got := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(got)
				return
			}
			got <- c
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for c := range got {
			c.Close()
		}
	})
	return got
}

func dial(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByPeer reports whether c reads EOF (or a reset): the server closed
// it.
func closedByPeer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func TestLimitCapsConnections(t *testing.T) {
	var open, rejected gauge
	l, err := Listen("127.0.0.1:0", Options{MaxConns: 2, Open: &open, Rejected: &rejected}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := serve(t, l)
	dial(t, l)
	dial(t, l)
	a, b := <-got, <-got
	third := dial(t, l)
	if !closedByPeer(third) {
		t.Fatal("the third connection beyond MaxConns 2 was not closed")
	}
	if o, r := open.n.Load(), rejected.n.Load(); o != 2 || r != 1 {
		t.Fatalf("open %d, rejected %d; want 2 and 1", o, r)
	}
	a.Close()
	a.Close() // the slot is given back once
	dial(t, l)
	c := <-got
	if o := open.n.Load(); o != 2 {
		t.Fatalf("open %d after a close and a new connection, want 2", o)
	}
	b.Close()
	c.Close()
	if o := open.n.Load(); o != 0 {
		t.Fatalf("open %d after every close, want 0", o)
	}
}

// blockingCounter's Inc waits for release.
type blockingCounter struct {
	entered, release chan struct{}
}

func (b *blockingCounter) Inc() {
	close(b.entered)
	<-b.release
}

// TestRejectedCountedBeforeClose: a connection beyond the cap is counted
// before it is closed, so that a client (or a test) that sees it closed
// finds it counted.
func TestRejectedCountedBeforeClose(t *testing.T) {
	rejected := &blockingCounter{entered: make(chan struct{}), release: make(chan struct{})}
	l, err := Listen("127.0.0.1:0", Options{MaxConns: 1, Rejected: rejected}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := serve(t, l)
	var released sync.Once
	release := func() { released.Do(func() { close(rejected.release) }) }
	t.Cleanup(release) // before serve's, which waits for the accept loop
	dial(t, l)
	<-got
	second := dial(t, l)
	<-rejected.entered
	// Counting holds the close back: nothing to read, no end of stream.
	second.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var ne net.Error
	if _, err := second.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("the rejected connection while it was being counted: read %v, want a timeout (still open)", err)
	}
	release()
	if !closedByPeer(second) {
		t.Fatal("the connection beyond MaxConns 1 was not closed once counted")
	}
}

// fill writes to c until a write fails, and returns the error.
func fill(c net.Conn) error {
	buf := make([]byte, 64<<10)
	for {
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
}

// TestWriteTimeoutClientThatDoesNotRead: a write to a client that reads
// nothing fails with a deadline error once the socket's buffers are full,
// even when the server set a later deadline of its own, or none; the
// connection is closed, and its slot given back.
func TestWriteTimeoutClientThatDoesNotRead(t *testing.T) {
	for _, tt := range []struct {
		name   string
		server time.Duration // the server's own deadline from now; 0: none
	}{
		{"no server deadline", 0},
		{"a later server deadline", time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var open gauge
			l, err := Listen("127.0.0.1:0", Options{WriteTimeout: 50 * time.Millisecond, Open: &open}, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := serve(t, l)
			client := dial(t, l)
			c := <-got
			if tt.server > 0 {
				c.SetWriteDeadline(time.Now().Add(tt.server))
			}
			done := make(chan error, 1)
			go func() { done <- fill(c) }()
			select {
			case err := <-done:
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("write to a client that does not read: %v, want a deadline error", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("a write to a client that does not read still blocks after a minute (WriteTimeout 50ms)")
			}
			if !closedByPeer(client) {
				t.Fatal("the connection is still open after its write timed out")
			}
			if n := open.n.Load(); n != 0 {
				t.Fatalf("%d connections counted open after the write timed out, want 0", n)
			}
		})
	}
}

// TestWriteTimeoutEarlierServerDeadline: the server's own earlier deadline
// applies, at once and to the next writes.
func TestWriteTimeoutEarlierServerDeadline(t *testing.T) {
	l, err := Listen("127.0.0.1:0", Options{WriteTimeout: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := serve(t, l)
	dial(t, l)
	c := <-got
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	c.SetWriteDeadline(time.Now().Add(-time.Second))
	if _, err := c.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past the server's deadline: %v, want a deadline error", err)
	}
	c.SetWriteDeadline(time.Time{})
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("write once the server's deadline is cleared: %v", err)
	}
	c.SetDeadline(time.Now().Add(-time.Second))
	if _, err := c.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past SetDeadline: %v, want a deadline error", err)
	}
}

// deadlines is a net.Conn that records its write deadlines.
type deadlines struct {
	net.Conn
	set []time.Time
}

func (d *deadlines) Write(b []byte) (int, error)        { return len(b), nil }
func (d *deadlines) SetWriteDeadline(t time.Time) error { d.set = append(d.set, t); return nil }

// TestWriteDeadlineOfEachWrite: each write's deadline is timeout from its
// start (so a client that reads is served however long the whole answer
// takes), or the server's own when that is earlier.
func TestWriteDeadlineOfEachWrite(t *testing.T) {
	const timeout = time.Hour
	d := &deadlines{}
	c := &conn{Conn: d, timeout: timeout}
	before := time.Now()
	c.Write([]byte("x"))
	after := time.Now()
	if len(d.set) != 1 || d.set[0].Before(before.Add(timeout)) || d.set[0].After(after.Add(timeout)) {
		t.Fatalf("deadlines %v after a write between %v and %v, want one timeout (%v) after it", d.set, before, after, timeout)
	}
	c.Write([]byte("x"))
	if len(d.set) != 1 {
		t.Fatalf("a second write at once set the deadline again: %v", d.set)
	}
	// A deadline set more than timeout/slack ago is moved on.
	c.set = c.set.Add(-timeout / slack)
	before = time.Now()
	c.Write([]byte("x"))
	if len(d.set) != 2 || d.set[1].Before(before.Add(timeout)) {
		t.Fatalf("deadlines %v: a write timeout/%d after the last did not move the deadline to %v", d.set, slack, before.Add(timeout))
	}
	// The server's earlier deadline applies at once, a later one waits
	// for the next write and does not lift the bound.
	early := time.Now().Add(time.Minute)
	c.SetWriteDeadline(early)
	if last := d.set[len(d.set)-1]; !last.Equal(early) {
		t.Fatalf("the server's earlier deadline %v: in force %v", early, last)
	}
	c.Write([]byte("x"))
	if last := d.set[len(d.set)-1]; !last.Equal(early) {
		t.Fatalf("a write under the server's earlier deadline %v: in force %v", early, last)
	}
	n := len(d.set)
	c.SetWriteDeadline(time.Now().Add(48 * time.Hour))
	if len(d.set) != n {
		t.Fatalf("a later server deadline was set at once: %v", d.set[n:])
	}
	before = time.Now()
	c.Write([]byte("x"))
	after = time.Now()
	if last := d.set[len(d.set)-1]; last.Before(before.Add(timeout)) || last.After(after.Add(timeout)) {
		t.Fatalf("a write under a later server deadline: in force %v, want timeout from the write", last)
	}
}
