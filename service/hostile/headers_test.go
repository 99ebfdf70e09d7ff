package hostile

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// headerListsClass: HTTP/2 streams of the gRPC listener that send their
// HEADERS and never their message.
//
//   - amplified: one connection opens ampStreams ShouldRateLimit streams,
//     each header list one small field repeated by its HPACK index up to
//     gRPC's own limit (16 MiB decoded from about 470 KB sent): the live
//     heap (after a forced GC) grows by at most ampHeapBound while they
//     are open;
//   - idle: idleHeaderStreams streams of normal headers end within
//     --grpc-first-message-timeout (1s) + firstMessageMargin, and hold at
//     most one goroutine each (+ idleGoroutineSlack) while they wait, as
//     grpc-go's transport does (a stream's worker);
//   - budget: maxStreams streams of about 15 KiB of headers each on one
//     connection: all but what --grpc-max-pending-header-bytes (its
//     default) holds are refused (RESOURCE_EXHAUSTED).
var headerListsClass = class{
	name:  "header-lists",
	flags: []flagArg{adminFlag, {"grpc-first-message-timeout", firstMessageTimeout.String()}},
	run:   func(t *testing.T, h *harness) { runHeaderLists(t, h, rlsPath) },
}

// headerListsLeanClass: the same attacks on the lean gRPC transport
// (--grpc-transport lean), on the calls it serves itself (ShouldRateLimit)
// and on those it hands to grpc-go on the same connection (server
// reflection here; health and compressed calls take the same way), each
// held to the bounds of headerListsClass.
var headerListsLeanClass = class{
	name:  "header-lists-lean",
	flags: append(append([]flagArg{}, headerListsClass.flags...), flagArg{"grpc-transport", "lean"}),
	run: func(t *testing.T, h *harness) {
		for _, path := range []string{rlsPath, reflectionPath} {
			t.Run(path[strings.LastIndexByte(path, '/')+1:], func(t *testing.T) { runHeaderLists(t, h, path) })
		}
	},
}

const (
	ampStreams          = 24
	ampRefs             = 470_000 // of a 35-byte field: just under gRPC's default 16 MiB
	ampHeapBound        = 64 << 20
	idleHeaderStreams   = 24
	idleGoroutineSlack  = 20 // the probes' and the sampler's own
	firstMessageTimeout = time.Second
	firstMessageMargin  = 10 * time.Second
	budgetRefs          = 440 // about 15 KiB a stream
)

// runHeaderLists runs the class' attacks with streams of path.
func runHeaderLists(t *testing.T, h *harness, path string) {
	base := h.liveHeap()

	amp, err := dialRaw(h.p.grpcAddr, path)
	if err != nil {
		t.Fatal(err)
	}
	defer amp.Close()
	for range ampStreams {
		if _, err := amp.open(ampRefs); err != nil {
			break // the server closed the connection: nothing held
		}
	}
	amp.settled(t)
	held := h.liveHeap() - base
	if held > ampHeapBound {
		t.Errorf("%d streams without a message, each a header list of %d indexed fields: the live heap grew by %s, want at most %s", ampStreams, ampRefs, mib(held), mib(ampHeapBound))
	} else {
		t.Logf("%d streams of amplified header lists: live heap %+.1f MiB (%d streams ended by the server)", ampStreams, float64(held)/(1<<20), amp.ended())
	}
	amp.Close()

	idle, err := dialRaw(h.p.grpcAddr, path)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	g0, err := h.metric("go_goroutines")
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint32
	for range idleHeaderStreams {
		id, err := idle.open(0)
		if err != nil {
			t.Fatalf("opening idle streams: %v", err)
		}
		ids = append(ids, id)
	}
	idle.settled(t)
	// The goroutines the streams hold, sampled until they end.
	ended := make(chan struct{})
	peak := make(chan float64, 1)
	go func() {
		top := g0
		for {
			if g, err := h.metric("go_goroutines"); err == nil {
				top = max(top, g)
			}
			select {
			case <-ended:
				peak <- top
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	within := firstMessageTimeout + firstMessageMargin
	open := idle.waitEnded(ids, within)
	close(ended)
	heldG := int(<-peak - g0)
	if open > 0 {
		t.Errorf("%d of %d streams without a message still open %v after they were opened, want ended within --grpc-first-message-timeout %v (+%v)", open, len(ids), within, firstMessageTimeout, firstMessageMargin)
	} else {
		t.Logf("%d streams without a message: ended by the server (statuses %v), %+d goroutines while open", len(ids), idle.statuses(ids), heldG)
	}
	if heldG > idleHeaderStreams+idleGoroutineSlack {
		t.Errorf("%d streams without a message held %d goroutines, want at most one a stream (+%d), as grpc-go's transport holds (a worker)", len(ids), heldG, idleGoroutineSlack)
	}
	idle.Close()

	budget, err := dialRaw(h.p.grpcAddr, path)
	if err != nil {
		t.Fatal(err)
	}
	defer budget.Close()
	ids = ids[:0]
	for range maxStreams {
		id, err := budget.open(budgetRefs)
		if err != nil {
			t.Fatalf("opening streams of 15 KiB headers: %v", err)
		}
		ids = append(ids, id)
	}
	budget.settled(t)
	refused := 0
	for _, s := range budget.statuses(ids) {
		if s == "8" {
			refused++
		}
	}
	pending := parseBytes(t, bound(t, "grpc-max-pending-header-bytes", "256KiB"))
	perStream := int64(budgetRefs*35 + 100)
	if want := maxStreams - int(pending/perStream) - 1; refused < want {
		t.Errorf("%d streams of about %d bytes of headers on one connection, none with a message: %d refused (RESOURCE_EXHAUSTED), want at least %d (--grpc-max-pending-header-bytes %d)", maxStreams, perStream, refused, want, pending)
	} else {
		t.Logf("%d streams of about %d bytes of headers: %d refused at once", maxStreams, perStream, refused)
	}
}

// parseBytes reads a byte size as sluice serve -h prints it: 262144,
// 256KiB, 16MiB.
func parseBytes(t *testing.T, s string) int64 {
	t.Helper()
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if v, ok := cutSuffix(s, u.suffix); ok {
			s, mult = v, u.m
			break
		}
	}
	var n int64
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("byte size %q", s)
		}
		n = n*10 + int64(c-'0')
	}
	return n * mult
}

func cutSuffix(s, suffix string) (string, bool) {
	if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
		return s[:len(s)-len(suffix)], true
	}
	return s, false
}

// rawConn is an HTTP/2 connection to the gRPC listener that writes header
// blocks of its own making, of calls of path, and reads the grpc-status the
// server ends each stream with.
type rawConn struct {
	nc   net.Conn
	path string
	wmu  sync.Mutex
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
	next uint32

	mu     sync.Mutex
	status map[uint32]string // grpc-status; "rst" for RST_STREAM
	pings  map[byte]bool     // acknowledged
	closed bool
	change chan struct{}
}

func dialRaw(addr, path string) (*rawConn, error) {
	nc, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return nil, err
	}
	c := &rawConn{nc: nc, path: path, fr: http2.NewFramer(nc, nc), next: 1, status: map[uint32]string{}, pings: map[byte]bool{}, change: make(chan struct{})}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	if err := c.write(func() error {
		if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
			return err
		}
		return c.fr.WriteSettings()
	}); err != nil {
		nc.Close()
		return nil, err
	}
	go c.read()
	return c, nil
}

func (c *rawConn) notify() {
	close(c.change)
	c.change = make(chan struct{})
}

func (c *rawConn) read() {
	defer func() {
		c.mu.Lock()
		c.closed = true
		c.notify()
		c.mu.Unlock()
	}()
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
			if f.IsAck() {
				c.mu.Lock()
				c.pings[f.Data[0]] = true
				c.notify()
				c.mu.Unlock()
			} else {
				c.write(func() error { return c.fr.WritePing(true, f.Data) })
			}
		case *http2.MetaHeadersFrame:
			for _, hf := range f.Fields {
				if hf.Name == "grpc-status" {
					c.end(f.StreamID, hf.Value)
				}
			}
		case *http2.RSTStreamFrame:
			c.end(f.StreamID, "rst")
		}
	}
}

func (c *rawConn) end(id uint32, s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.status[id]; !ok {
		c.status[id] = s
		c.notify()
	}
}

func (c *rawConn) write(fn func() error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	return fn()
}

// open opens a stream of c.path without its message: the gRPC
// headers and refs times the field x-a: "" by its HPACK index (one byte
// each after the first), in as many frames as it takes.
func (c *rawConn) open(refs int) (uint32, error) {
	var id uint32
	err := c.write(func() error {
		c.hbuf.Reset()
		for _, hf := range [][2]string{
			{":method", "POST"}, {":scheme", "http"}, {":path", c.path}, {":authority", c.nc.RemoteAddr().String()},
			{"content-type", "application/grpc"}, {"te", "trailers"},
		} {
			c.enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
		}
		for range refs {
			c.enc.WriteField(hpack.HeaderField{Name: "x-a", Value: ""})
		}
		id = c.next
		c.next += 2
		block := c.hbuf.Bytes()
		const frame = 16 << 10
		first := block[:min(len(block), frame)]
		block = block[len(first):]
		if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: len(block) == 0}); err != nil {
			return err
		}
		for len(block) > 0 {
			part := block[:min(len(block), frame)]
			block = block[len(part):]
			if err := c.fr.WriteContinuation(id, len(block) == 0, part); err != nil {
				return err
			}
		}
		return nil
	})
	return id, err
}

// settled waits until the server has read everything sent so far: it
// acknowledges a PING sent after it (or has closed the connection).
func (c *rawConn) settled(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	n := byte(len(c.pings) + 1)
	c.mu.Unlock()
	if err := c.write(func() error { return c.fr.WritePing(false, [8]byte{n}) }); err != nil {
		return // closed
	}
	deadline := time.After(time.Minute)
	for {
		c.mu.Lock()
		done, ch := c.pings[n] || c.closed, c.change
		c.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("the server did not acknowledge a PING within a minute")
		}
	}
}

// waitEnded waits until every stream of ids has ended (or the connection
// is closed), at most until within after now, and returns how many have
// not.
func (c *rawConn) waitEnded(ids []uint32, within time.Duration) (open int) {
	deadline := time.After(within)
	for {
		c.mu.Lock()
		open = 0
		for _, id := range ids {
			if _, ok := c.status[id]; !ok && !c.closed {
				open++
			}
		}
		ch := c.change
		c.mu.Unlock()
		if open == 0 {
			return 0
		}
		select {
		case <-ch:
		case <-deadline:
			return open
		}
	}
}

// statuses are the ends of the streams of ids ("" while open).
func (c *rawConn) statuses(ids []uint32) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = c.status[id]
	}
	return out
}

// ended counts the streams the server ended.
func (c *rawConn) ended() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.status)
}

func (c *rawConn) Close() { c.nc.Close() }
