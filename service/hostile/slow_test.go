package hostile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
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

// The margins are generous: a server without the timeout never closes
// (the client keeps the request alive), so they cost nothing in what the
// class can find, and a check returns as soon as the server closes; a
// busy machine runs the server's timers late.
const (
	slowConns       = 10
	slowMargin      = 5 * time.Second
	readHeaderBound = time.Second + slowMargin
	readBodyBound   = 2*time.Second + slowMargin
	slowReaderReqs  = 3000
	slowReaderDrain = 10 * time.Second
)

// slowConn is a connection that sends its request one byte a second.
type slowConn struct {
	c      net.Conn
	opened time.Time
	got    bytes.Buffer
}

func openSlow(addr, head string, stop <-chan struct{}, wg *sync.WaitGroup) (*slowConn, error) {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return nil, err
	}
	s := &slowConn{c: c, opened: time.Now()}
	if _, err := c.Write([]byte(head)); err != nil {
		c.Close()
		return nil, err
	}
	wg.Go(func() { dribble(c, stop, time.Second) })
	return s, nil
}

// closedWithin reports whether the server closes s within bound of its
// opening, reading what it sent; it returns as soon as the server closes.
func (s *slowConn) closedWithin(bound time.Duration) bool {
	return serverClosedBy(s.c, &s.got, s.opened.Add(bound))
}

// serverClosedBy reports whether c is closed by its peer (EOF or a reset)
// by the time by, copying what is left to read to w. A close already seen
// by the socket counts even when a busy machine runs the check after by
// (it reads for checkWindow then).
func serverClosedBy(c net.Conn, w io.Writer, by time.Time) bool {
	c.SetReadDeadline(later(by, time.Now().Add(checkWindow)))
	_, err := io.Copy(w, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// checkWindow is how long a check waits for a close on its way.
const checkWindow = 100 * time.Millisecond

func runSlow(t *testing.T, h *harness) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var conns []*slowConn
	defer func() {
		close(stop)
		for _, s := range conns {
			s.c.Close()
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
		open := 0
		for _, s := range g.conns {
			if !s.closedWithin(g.bound) {
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
			t.Logf("%s: %d connections closed by the server within %v", g.what, len(g.conns), g.bound)
		}
	}
	if err := <-writeDone; err != nil {
		t.Errorf("a client that never reads (%d pipelined GET /metrics): %v", slowReaderReqs, err)
	}
}

// slowReader sends pipelined GET /metrics (about 10 KB each, some 30 MB
// in all: more than the socket buffers hold) and reads nothing until the
// server has closed its end of the connection (/proc/net/tcp shows it
// leaving ESTABLISHED: the server gave up its blocked write after
// --http-write-timeout), then what is left to read (what the buffers
// held) must end in EOF. A server without a write timeout keeps its end
// open while its write waits for the client: it fails after
// slowReaderGuard. Nothing is timed: a busy machine's server fills the
// buffers and times out later, and the client waits for it.
func slowReader(addr string) error {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	opened := time.Now()
	reqs := strings.Repeat("GET /metrics HTTP/1.1\r\nHost: sluice\r\n\r\n", slowReaderReqs)
	go func() {
		c.SetWriteDeadline(time.Now().Add(slowReaderGuard))
		c.Write([]byte(reqs))
	}()
	for {
		open, err := serverEndOpen(c)
		if err != nil {
			return err
		}
		if !open {
			break
		}
		if time.Since(opened) > slowReaderGuard {
			return fmt.Errorf("the server still held its end of the connection open %v after it was opened, its write blocked on a client that reads nothing: want it closed after --http-write-timeout", slowReaderGuard)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.SetReadDeadline(time.Now().Add(slowReaderDrain))
	n, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("the server closed its end, yet reading went on for %v (%d bytes) without EOF", slowReaderDrain, n)
	}
	return nil
}

// slowReaderGuard bounds the wait for the server to close a connection
// whose client reads nothing (--http-write-timeout is 2 s).
const slowReaderGuard = 30 * time.Second

// serverEndOpen reports whether the server's end of c (the socket whose
// local address is c's remote one and whose peer is c's local one) is
// still ESTABLISHED, from /proc/net/tcp: once the server closes it, it
// leaves that state (FIN_WAIT1 while our unread buffers hold its data, or
// gone after a reset).
func serverEndOpen(c net.Conn) (bool, error) {
	hexAddr := func(a net.Addr) (string, error) {
		ta, ok := a.(*net.TCPAddr)
		ip := ta.IP.To4()
		if !ok || ip == nil {
			return "", fmt.Errorf("not an IPv4 TCP address: %v", a)
		}
		// /proc/net/tcp writes an IPv4 address as a little-endian word.
		return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], ta.Port), nil
	}
	server, err := hexAddr(c.RemoteAddr())
	if err != nil {
		return false, err
	}
	client, err := hexAddr(c.LocalAddr())
	if err != nil {
		return false, err
	}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && f[1] == server && f[2] == client {
			return f[3] == "01", nil // TCP_ESTABLISHED
		}
	}
	return false, nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\r\n")
	return l
}
