package hostile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowClass: slowloris (a header byte every second), slow bodies (a body
// byte every second) and a client that never reads its responses. The
// server closes each connection within its timeout
// (--http-read-header-timeout 1s, --http-read-timeout 2s,
// --http-write-timeout 2s) plus slowMargin.
var slowClass = class{name: "slow", run: runSlow}

const (
	slowConns       = 10
	slowMargin      = 1500 * time.Millisecond
	readHeaderBound = time.Second + slowMargin
	readBodyBound   = 2*time.Second + slowMargin
	writeBound      = 2*time.Second + slowMargin
	slowReaderReqs  = 3000
	slowReaderDrain = 2 * time.Second
)

// slowConn is a connection that sends its request one byte a second and
// records when, and with what, the server closed it.
type slowConn struct {
	c        net.Conn
	opened   time.Time
	closed   chan struct{}
	closedAt time.Time
	got      bytes.Buffer
}

func openSlow(addr, head string, stop <-chan struct{}, wg *sync.WaitGroup) (*slowConn, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	s := &slowConn{c: c, opened: time.Now(), closed: make(chan struct{})}
	if _, err := c.Write([]byte(head)); err != nil {
		c.Close()
		return nil, err
	}
	wg.Go(func() { dribble(c, stop, time.Second) })
	go func() {
		io.Copy(&s.got, c)
		s.closedAt = time.Now()
		close(s.closed)
	}()
	return s, nil
}

// waitClosed waits until the server closed s or bound passed since it was
// opened, and reports how long it stayed open.
func (s *slowConn) waitClosed(bound time.Duration) (time.Duration, bool) {
	select {
	case <-s.closed:
		return s.closedAt.Sub(s.opened), true
	case <-time.After(time.Until(s.opened.Add(bound))):
		return time.Since(s.opened), false
	}
}

func runSlow(t *testing.T, h *harness) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var conns []*slowConn
	defer func() {
		close(stop)
		for _, s := range conns {
			s.c.Close()
			<-s.closed
		}
		wg.Wait()
	}()
	type group struct {
		what  string
		head  string
		bound time.Duration
		conns []*slowConn
	}
	groups := []*group{
		{what: "slow headers", head: "GET /healthz HTTP/1.1\r\nHost: sluice\r\nX-Slowloris: ", bound: readHeaderBound},
		{what: "slow body", head: "POST /v1/check HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"key\":\"", bound: readBodyBound},
	}
	for _, g := range groups {
		for range slowConns {
			s, err := openSlow(h.p.httpAddr, g.head, stop, &wg)
			if err != nil {
				t.Fatalf("%s: %v", g.what, err)
			}
			g.conns = append(g.conns, s)
			conns = append(conns, s)
		}
	}
	writeDone := make(chan error, 1)
	go func() { writeDone <- slowReader(h.p.httpAddr) }()

	for _, g := range groups {
		open, longest := 0, time.Duration(0)
		for _, s := range g.conns {
			took, closed := s.waitClosed(g.bound)
			longest = max(longest, took)
			if !closed {
				open++
				continue
			}
			if status := firstLine(s.got.String()); strings.Contains(status, " 200 ") {
				t.Errorf("%s: answered %q to an incomplete request", g.what, status)
			}
		}
		if open > 0 {
			t.Errorf("%s: %d of %d connections still open %v after they were opened (want closed by the server within %v)", g.what, open, len(g.conns), g.bound.Round(time.Millisecond), g.bound)
		} else {
			t.Logf("%s: %d connections closed by the server, the last after %v", g.what, len(g.conns), longest.Round(time.Millisecond))
		}
	}
	if err := <-writeDone; err != nil {
		t.Errorf("a client that never reads (%d pipelined GET /metrics): %v", slowReaderReqs, err)
	}
}

// slowReader sends pipelined GET /metrics (about 10 KB each, some 30 MB
// in all: more than the socket buffers hold) and reads nothing until
// writeBound has passed; then the server must have given up its blocked
// write and closed the connection, so that what is left to read (what the
// buffers held) ends in EOF within slowReaderDrain. A server without a
// write timeout serves every response once the client reads, then waits
// for the next request: no EOF.
func slowReader(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	opened := time.Now()
	reqs := strings.Repeat("GET /metrics HTTP/1.1\r\nHost: sluice\r\n\r\n", slowReaderReqs)
	go func() {
		c.SetWriteDeadline(time.Now().Add(writeBound))
		c.Write([]byte(reqs))
	}()
	time.Sleep(time.Until(opened.Add(writeBound)))
	c.SetReadDeadline(time.Now().Add(slowReaderDrain))
	n, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("the connection was still served %v after it was opened (read %d bytes in %v, no EOF): want it closed within --http-write-timeout", writeBound+slowReaderDrain, n, slowReaderDrain)
	}
	return nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\r\n")
	return l
}
