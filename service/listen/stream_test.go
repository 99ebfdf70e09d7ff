package listen

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) Inc() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *counter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// grpcServer serves the health service with l's limits on loopback and
// returns its address.
func grpcServer(t *testing.T, l StreamLimits) string {
	t.Helper()
	s := NewStreams(l)
	gs := grpc.NewServer(append(s.ServerOptions(),
		grpc.ChainUnaryInterceptor(s.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(s.StreamInterceptor()))...)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	ln, err := Listen("127.0.0.1:0", Options{WriteTimeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

// rawH2 is an HTTP/2 client that opens gRPC streams and sends their
// messages when told, and records each stream's grpc-status.
type rawH2 struct {
	nc   net.Conn
	wmu  sync.Mutex
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
	next uint32

	mu     sync.Mutex
	status map[uint32]string // grpc-status, or "rst" for RST_STREAM
	change chan struct{}
}

const checkPath = "/grpc.health.v1.Health/Check"

func dialRaw(t *testing.T, addr string) *rawH2 {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &rawH2{nc: nc, fr: http2.NewFramer(nc, nc), next: 1, status: map[uint32]string{}, change: make(chan struct{})}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	nc.Write([]byte(http2.ClientPreface))
	c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	go c.read()
	t.Cleanup(func() { nc.Close() })
	return c
}

func (c *rawH2) read() {
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
		case *http2.MetaHeadersFrame:
			if v := f.PseudoValue("status"); v == "" || f.StreamEnded() {
				for _, hf := range f.Fields {
					if hf.Name == "grpc-status" {
						c.record(f.StreamID, hf.Value)
					}
				}
			}
		case *http2.RSTStreamFrame:
			c.record(f.StreamID, "rst")
		}
	}
}

func (c *rawH2) record(id uint32, s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.status[id]; !ok {
		c.status[id] = s
	}
	close(c.change)
	c.change = make(chan struct{})
}

func (c *rawH2) write(fn func() error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return fn()
}

// open opens a Check stream whose headers carry pad bytes of metadata, and
// sends no message; it returns the stream's id.
func (c *rawH2) open(pad int) uint32 {
	var id uint32
	c.write(func() error {
		c.hbuf.Reset()
		for _, hf := range [][2]string{
			{":method", "POST"}, {":scheme", "http"}, {":path", checkPath}, {":authority", "test"},
			{"content-type", "application/grpc"}, {"te", "trailers"}, {"x-pad", strings.Repeat("p", pad)},
		} {
			c.enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
		}
		id = c.next
		c.next += 2
		return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true})
	})
	return id
}

// send sends stream id's message, an empty HealthCheckRequest.
func (c *rawH2) send(id uint32) {
	c.write(func() error { return c.fr.WriteData(id, true, []byte{0, 0, 0, 0, 0}) })
}

// wait waits until every stream of ids has a status, and returns them.
func (c *rawH2) wait(t *testing.T, ids ...uint32) []string {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		c.mu.Lock()
		out := make([]string, 0, len(ids))
		for _, id := range ids {
			if s, ok := c.status[id]; ok {
				out = append(out, s)
			}
		}
		ch := c.change
		c.mu.Unlock()
		if len(out) == len(ids) {
			return out
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("streams %v: %d of them ended within a minute", ids, len(out))
		}
	}
}

func (c *rawH2) statusOf(id uint32) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.status[id]
	return s, ok
}

// TestFirstMessageTimeout: a stream that sends only its headers is
// cancelled after FirstMessage; one that sends its message is answered.
func TestFirstMessageTimeout(t *testing.T) {
	var expired counter
	addr := grpcServer(t, StreamLimits{FirstMessage: 50 * time.Millisecond, Expired: &expired})
	c := dialRaw(t, addr)
	var idle []uint32
	for range 5 {
		idle = append(idle, c.open(10))
	}
	for i, s := range c.wait(t, idle...) {
		if s != "1" { // CANCELLED
			t.Errorf("stream %d without a message ended with grpc-status %s, want 1 (CANCELLED)", idle[i], s)
		}
	}
	if n := expired.get(); n != len(idle) {
		t.Errorf("Expired counted %d streams, want %d", n, len(idle))
	}
	id := c.open(10)
	c.send(id)
	if s := c.wait(t, id)[0]; s != "0" {
		t.Errorf("a stream with its message ended with grpc-status %s, want 0", s)
	}
}

// TestPendingHeaderBudget: a connection's streams without a message hold
// at most MaxPendingHeaderBytes of headers; a stream beyond is refused at
// once, another connection has its own budget, and a message that arrives
// gives its stream's bytes back.
func TestPendingHeaderBudget(t *testing.T) {
	var refused counter
	// Each stream's header list is about 1 KiB (the pad and the gRPC
	// headers, about 1.15 KiB); the budget holds four.
	const pad = 1000
	addr := grpcServer(t, StreamLimits{MaxPendingHeaderBytes: 4 * (pad + 200), Refused: &refused})
	c := dialRaw(t, addr)
	var held []uint32
	for range 4 {
		held = append(held, c.open(pad))
	}
	over := c.open(pad)
	if s := c.wait(t, over)[0]; s != "8" { // RESOURCE_EXHAUSTED
		t.Fatalf("the fifth stream without a message ended with grpc-status %s, want 8 (RESOURCE_EXHAUSTED)", s)
	}
	for _, id := range held {
		if s, ok := c.statusOf(id); ok {
			t.Fatalf("stream %d, within the budget, ended with %s", id, s)
		}
	}
	other := dialRaw(t, addr)
	o := other.open(pad)
	other.send(o)
	if s := other.wait(t, o)[0]; s != "0" {
		t.Errorf("another connection's stream: grpc-status %s, want 0", s)
	}
	c.send(held[0])
	if s := c.wait(t, held[0])[0]; s != "0" {
		t.Errorf("a held stream's message: grpc-status %s, want 0", s)
	}
	next := c.open(pad)
	c.send(next)
	if s := c.wait(t, next)[0]; s != "0" {
		t.Errorf("a stream once a message gave its bytes back: grpc-status %s, want 0", s)
	}
	if n := refused.get(); n != 1 {
		t.Errorf("Refused counted %d streams, want 1", n)
	}
}

// TestStreamsNormalCalls: unary and streaming calls of a gRPC client pass
// through the limits, and the streams they held give their bytes back.
func TestStreamsNormalCalls(t *testing.T) {
	addr := grpcServer(t, StreamLimits{FirstMessage: time.Minute, MaxPendingHeaderBytes: 4 << 10})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 100 { // more than the budget holds at once, were the bytes kept
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("Check %d: %v", i, err)
		}
	}
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("Watch: %v", err)
	}
	big := metadata.AppendToOutgoingContext(ctx, "x-pad", strings.Repeat("p", 8<<10))
	if _, err = hc.Check(big, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Check with 8 KiB of headers, over the 4 KiB budget: %v, want ResourceExhausted", err)
	}
}
