package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// logAddr returns the addr= of the first stderr line containing msg.
func (p *proc) logAddr(t *testing.T, msg string) string {
	t.Helper()
	p.waitLog(t, msg)
	m := regexp.MustCompile(regexp.QuoteMeta(msg) + `.* addr=(\S+)`).FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no addr= on the %q line:\n%s", msg, p.stderr)
	}
	return m[1]
}

// connClosedWithin reports whether the server closes c (read returns EOF or
// an error other than our own deadline) within d; what it sent before is
// returned too.
func connClosedWithin(c net.Conn, d time.Duration) (bool, string) {
	c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, string(b)
	}
	return true, string(b)
}

func TestE2EHTTPSlowBodyIsCutOff(t *testing.T) {
	p := start(t, nil, "--http-read-timeout", "500ms")
	c, err := net.Dial("tcp", strings.TrimPrefix(p.http, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	begin := time.Now()
	fmt.Fprintf(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
	// One byte every 100ms: the whole body would take 100s.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	closed, got := connClosedWithin(c, 5*time.Second)
	took := time.Since(begin)
	if !closed {
		t.Fatalf("a body trickling one byte per 100ms was still being read after %v; want the connection cut at the 500ms read timeout", took)
	}
	if took < 400*time.Millisecond || took > 3*time.Second {
		t.Errorf("connection closed after %v, want about the 500ms read timeout", took)
	}
	if got != "" && !strings.HasPrefix(got, "HTTP/1.1 400") {
		t.Errorf("answer before closing = %q, want nothing or a 400", got)
	}
}

func TestE2EHTTPSlowHeadersAreCutOff(t *testing.T) {
	p := start(t, nil, "--http-read-header-timeout", "300ms")
	c, err := net.Dial("tcp", strings.TrimPrefix(p.http, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	begin := time.Now()
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
	go func() {
		for i := 0; i < 50; i++ {
			time.Sleep(100 * time.Millisecond)
			if _, err := fmt.Fprintf(c, "X-Slow-%d: y\r\n", i); err != nil {
				return
			}
		}
	}()
	if closed, got := connClosedWithin(c, 4*time.Second); !closed || strings.Contains(got, "200 OK") {
		t.Fatalf("headers trickled for %v: closed=%v answer=%q; want the connection cut at 300ms without an answer", time.Since(begin), closed, got)
	}
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("closed after %v, want about 300ms", took)
	}
}

func TestE2EHTTPMaxHeaderBytes(t *testing.T) {
	p := start(t, nil, "--http-max-header-bytes", "8KiB")
	for _, tt := range []struct {
		size int
		want int
	}{{6 << 10, 200}, {9 << 10, http.StatusRequestHeaderFieldsTooLarge}} {
		req, _ := http.NewRequest("GET", p.http+"/healthz", nil)
		req.Header.Set("X-Big", strings.Repeat("a", tt.size))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("GET /healthz with a %d-byte header = %d, want %d", tt.size, resp.StatusCode, tt.want)
		}
	}
}

// holdHTTP opens a keep-alive HTTP connection that has answered one request.
func holdHTTP(t *testing.T, addr string) (net.Conn, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	resp.Body.Close()
	c.SetReadDeadline(time.Time{})
	return c, nil
}

func TestE2EMaxConnections(t *testing.T) {
	p := start(t, nil, "--max-connections", "3")
	addr := strings.TrimPrefix(p.http, "http://")
	var held []net.Conn
	for i := 0; i < 3; i++ {
		c, err := holdHTTP(t, addr)
		if err != nil {
			t.Fatalf("connection %d of 3: %v", i+1, err)
		}
		held = append(held, c)
	}
	if _, err := holdHTTP(t, addr); err == nil {
		t.Fatal("a 4th HTTP connection was served with --max-connections 3")
	}
	// The gRPC listener has its own cap.
	var grpcHeld []net.Conn
	for i := 0; i < 4; i++ {
		c, err := net.Dial("tcp", p.grpc)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		grpcHeld = append(grpcHeld, c)
	}
	if closed, _ := connClosedWithin(grpcHeld[3], 2*time.Second); !closed {
		t.Error("a 4th gRPC connection stayed open with --max-connections 3")
	}
	if closed, _ := connClosedWithin(grpcHeld[0], 200*time.Millisecond); closed {
		t.Error("the 1st gRPC connection was closed")
	}
	// A freed slot is usable again.
	held[0].Close()
	var c net.Conn
	var err error
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err = holdHTTP(t, addr); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("no connection after one of the 3 closed: %v", err)
	}
	c.Close()
	for _, c := range held[1:] {
		c.Close()
	}
	time.Sleep(50 * time.Millisecond)
	_, metrics := p.get(t, "/metrics")
	if !regexp.MustCompile(`sluice_connections_rejected_total\{listener="http"\} [1-9]`).MatchString(metrics) ||
		!regexp.MustCompile(`sluice_connections_rejected_total\{listener="grpc"\} [1-9]`).MatchString(metrics) {
		t.Errorf("metrics lack the rejected connections:\n%s", grepLines(metrics, "sluice_connections"))
	}
}

// h2conn is a raw HTTP/2 client connection to the gRPC listener, to do what
// a well-behaved client library would not.
type h2conn struct {
	c  net.Conn
	fr *http2.Framer
	mu sync.Mutex // a Framer's writes are not safe for concurrent use
}

// write runs one framer write under the lock.
func (h *h2conn) write(f func(*http2.Framer) error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return f(h.fr)
}

func dialH2(t *testing.T, addr string) *h2conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return &h2conn{c: c, fr: fr}
}

// openStream sends the HEADERS of a ShouldRateLimit call and no body.
func (h *h2conn) openStream(t *testing.T, id uint32, enc *hpack.Encoder, buf *bytes.Buffer) {
	t.Helper()
	buf.Reset()
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
		{":authority", "sluice"}, {"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := h.write(func(fr *http2.Framer) error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndHeaders: true})
	}); err != nil {
		t.Fatal(err)
	}
}

// eachGRPCTransport runs f once per value of --grpc-transport, as a
// subtest, with the flag that selects it: what a gRPC client sees must not
// depend on it.
func eachGRPCTransport(t *testing.T, f func(t *testing.T, transport ...string)) {
	for _, tr := range []string{"lean", "grpc-go"} {
		t.Run(tr, func(t *testing.T) { f(t, "--grpc-transport", tr) })
	}
}

func TestE2EGRPCMaxConcurrentStreams(t *testing.T) {
	eachGRPCTransport(t, testGRPCMaxConcurrentStreams)
}

func testGRPCMaxConcurrentStreams(t *testing.T, transport ...string) {
	p := start(t, nil, append(transport, "--grpc-max-concurrent-streams", "100")...)
	h := dialH2(t, p.grpc)
	const streams = 5000
	refused := make(chan int, 1)
	go func() {
		n := 0
		h.c.SetReadDeadline(time.Now().Add(20 * time.Second))
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				refused <- n
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					h.write((*http2.Framer).WriteSettingsAck)
				}
			case *http2.RSTStreamFrame:
				if f.ErrCode == http2.ErrCodeRefusedStream {
					n++
					if n == streams-100 {
						refused <- n
						return
					}
				}
			}
		}
	}()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for i := 0; i < streams; i++ {
		h.openStream(t, uint32(2*i+1), enc, &buf)
	}
	if n := <-refused; n != streams-100 {
		t.Fatalf("%d idle streams on one connection with --grpc-max-concurrent-streams 100: %d refused, want %d", streams, n, streams-100)
	}
	// The server still answers others.
	p.should(t, "example", 1, d("generic_key", "default"))
}

func TestE2EGRPCKeepalivePingFlood(t *testing.T) {
	eachGRPCTransport(t, testGRPCKeepalivePingFlood)
}

func testGRPCKeepalivePingFlood(t *testing.T, transport ...string) {
	for _, tt := range []struct {
		minTime  string
		wantAway bool
	}{{"1m", true}, {"1ms", false}} {
		t.Run("min-time="+tt.minTime, func(t *testing.T) {
			p := start(t, nil, append(transport, "--grpc-keepalive-min-time", tt.minTime)...)
			h := dialH2(t, p.grpc)
			var ga *http2.GoAwayFrame
			gone := make(chan struct{}) // closed when the reader stops; ga is set then
			acks := make(chan struct{}, 16)
			go func() {
				defer close(gone)
				for {
					f, err := h.fr.ReadFrame()
					if err != nil {
						return
					}
					switch f := f.(type) {
					case *http2.SettingsFrame:
						if !f.IsAck() {
							h.write((*http2.Framer).WriteSettingsAck)
						}
					case *http2.PingFrame:
						if f.IsAck() {
							acks <- struct{}{}
						}
					case *http2.GoAwayFrame:
						ga = f
						return
					}
				}
			}()
		pings:
			for i := 0; i < 6; i++ {
				if err := h.write(func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{byte(i)}) }); err != nil {
					break
				}
				select {
				case <-acks:
				case <-gone:
					break pings
				case <-time.After(2 * time.Second):
				}
				time.Sleep(5 * time.Millisecond)
			}
			select {
			case <-gone:
			case <-time.After(300 * time.Millisecond):
				h.c.SetReadDeadline(time.Now()) // stop the reader
				<-gone
			}
			if tt.wantAway {
				if ga == nil || ga.ErrCode != http2.ErrCodeEnhanceYourCalm || string(ga.DebugData()) != "too_many_pings" {
					t.Fatalf("6 pings 5ms apart with --grpc-keepalive-min-time %s: GOAWAY %+v, want ENHANCE_YOUR_CALM too_many_pings", tt.minTime, ga)
				}
			} else if ga != nil {
				t.Fatalf("6 pings 5ms apart with --grpc-keepalive-min-time %s: GOAWAY %v %q, want none", tt.minTime, ga.ErrCode, ga.DebugData())
			}
		})
	}
}

func TestE2EGRPCMaxConnectionAge(t *testing.T) {
	eachGRPCTransport(t, testGRPCMaxConnectionAge)
}

func testGRPCMaxConnectionAge(t *testing.T, transport ...string) {
	p := start(t, nil, append(transport, "--grpc-max-connection-age", "300ms", "--grpc-max-connection-age-grace", "300ms")...)
	h := dialH2(t, p.grpc)
	begin := time.Now()
	var away time.Duration
	// The deadline only ends a test whose flag is ignored (the connection
	// would stay open for ever): the bounds below are the ones a starved
	// scheduler cannot break (never early; GOAWAY before the close).
	h.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open after 30s with --grpc-max-connection-age 300ms (GOAWAY after %v)", away)
			}
			break
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.write((*http2.Framer).WriteSettingsAck)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.write(func(fr *http2.Framer) error { return fr.WritePing(true, f.Data) })
			}
		case *http2.GoAwayFrame:
			if away == 0 {
				away = time.Since(begin)
			}
		}
	}
	closed := time.Since(begin)
	// grpc-go jitters the age by ±10%.
	if away < 270*time.Millisecond {
		t.Errorf("GOAWAY after %v, want no earlier than the age (300ms, less 10%% of jitter)", away)
	}
	if away == 0 || closed < away {
		t.Errorf("closed after %v, GOAWAY after %v: want a GOAWAY, then the close", closed, away)
	}
	// A client reconnects and carries on.
	p.should(t, "example", 1, d("generic_key", "default"))
}

func TestE2EGRPCMaxMessageSize(t *testing.T) {
	eachGRPCTransport(t, testGRPCMaxMessageSize)
}

func testGRPCMaxMessageSize(t *testing.T, transport ...string) {
	p := start(t, nil, append(transport, "--grpc-max-message-size", "4KiB")...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "example", Descriptors: []*rlpb.RateLimitDescriptor{d("generic_key", strings.Repeat("x", 5000))}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a 5 KB request with --grpc-max-message-size 4KiB: %v, want ResourceExhausted", err)
	}
	p.should(t, "example", 1, d("generic_key", "default"))
}

// services lists the services a reflection client sees.
func services(t *testing.T, conn *grpc.ClientConn) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	// A Send on a stream the server has already ended (Unimplemented, at
	// once) returns io.EOF, whatever the server said: Recv returns its
	// status.
	if err := st.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	resp, err := st.Recv()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	return names, nil
}

func TestE2EGRPCReflection(t *testing.T) {
	eachGRPCTransport(t, testGRPCReflection)
}

func testGRPCReflection(t *testing.T, transport ...string) {
	p := start(t, nil, transport...)
	names, err := services(t, p.conn)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(names, " "), "envoy.service.ratelimit.v3.RateLimitService") {
		t.Errorf("reflection lists %q, want envoy.service.ratelimit.v3.RateLimitService", names)
	}
	off := start(t, nil, append(transport, "--grpc-reflection=false")...)
	if _, err := services(t, off.conn); status.Code(err) != codes.Unimplemented {
		t.Errorf("reflection with --grpc-reflection=false: %v, want Unimplemented", err)
	}
}

func TestE2EAdminListener(t *testing.T) {
	get := func(url string) int {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	t.Run("none", func(t *testing.T) {
		p := start(t, nil)
		if c := get(p.http + "/metrics"); c != 200 {
			t.Errorf("GET /metrics on --http without --admin = %d, want 200", c)
		}
		if c := get(p.http + "/debug/pprof/"); c != 404 {
			t.Errorf("GET /debug/pprof/ on --http = %d, want 404", c)
		}
	})
	t.Run("admin", func(t *testing.T) {
		p := start(t, nil, "--admin", "127.0.0.1:0")
		admin := "http://" + p.logAddr(t, "admin listener")
		for _, tt := range []struct {
			url  string
			want int
		}{
			{p.http + "/metrics", 404}, {p.http + "/debug/pprof/", 404}, {p.http + "/healthz", 200}, {p.http + "/readyz", 200},
			{admin + "/metrics", 200}, {admin + "/debug/pprof/", 200}, {admin + "/debug/pprof/cmdline", 200}, {admin + "/v1/check", 404},
		} {
			if c := get(tt.url); c != tt.want {
				t.Errorf("GET %s = %d, want %d", tt.url, c, tt.want)
			}
		}
		if c, _ := p.post(t, "/v1/check", `{"key":"k","algorithm":"gcra","rate":5,"period":"1s"}`); c != 200 {
			t.Errorf("POST /v1/check on --http with --admin = %d, want 200", c)
		}
	})
	t.Run("debug-addr", func(t *testing.T) {
		p := start(t, nil, "--debug-addr", "127.0.0.1:0")
		admin := "http://" + p.logAddr(t, "admin listener")
		if c := get(p.http + "/metrics"); c != 200 {
			t.Errorf("GET /metrics on --http with the deprecated --debug-addr = %d, want 200 (it stays)", c)
		}
		if c := get(admin + "/debug/pprof/"); c != 200 {
			t.Errorf("GET /debug/pprof/ on --debug-addr = %d, want 200", c)
		}
	})
}

func TestServeTransportFlagBounds(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--http-max-header-bytes", "4KiB"}, 0, ""},
		{[]string{"--http-max-header-bytes", "4095"}, 2, "--http-max-header-bytes"},
		{[]string{"--http-max-header-bytes", "16MiB"}, 0, ""},
		{[]string{"--http-max-header-bytes", "16777217"}, 2, "--http-max-header-bytes"},
		{[]string{"--grpc-max-message-size", "64MiB"}, 0, ""},
		{[]string{"--grpc-max-message-size", "67108865"}, 2, "--grpc-max-message-size"},
		{[]string{"--grpc-max-concurrent-streams", "0"}, 2, "--grpc-max-concurrent-streams"},
		{[]string{"--grpc-max-concurrent-streams", "4294967295"}, 0, ""},
		{[]string{"--grpc-max-concurrent-streams", "4294967296"}, 2, "--grpc-max-concurrent-streams"},
		{[]string{"--max-connections", "-1"}, 2, "--max-connections"},
		{[]string{"--max-connections", "1048576"}, 0, ""},
		{[]string{"--max-connections", "1048577"}, 2, "--max-connections"},
		{[]string{"--request-timeout", "-1s"}, 2, "--request-timeout"},
		{[]string{"--conn-write-timeout", "0s"}, 2, "--conn-write-timeout 0s: must be > 0"},
		{[]string{"--grpc-first-message-timeout", "0s"}, 2, "--grpc-first-message-timeout 0s: must be > 0"},
		{[]string{"--grpc-max-header-list-size", "1KiB"}, 0, ""},
		{[]string{"--grpc-max-header-list-size", "1023"}, 2, "--grpc-max-header-list-size"},
		{[]string{"--grpc-max-header-list-size", "16777217"}, 2, "--grpc-max-header-list-size"},
		{[]string{"--grpc-max-header-list-size", "512KiB"}, 2, "--grpc-max-pending-header-bytes"}, // the budget (256KiB) must hold one list
		{[]string{"--grpc-max-pending-header-bytes", "8KiB"}, 2, "--grpc-max-pending-header-bytes"},
		{[]string{"--http2-max-concurrent-streams", "0"}, 2, "--http2-max-concurrent-streams"},
		{[]string{"--http-read-timeout", "-1s"}, 2, "--http-read-timeout"},
		{[]string{"--admin", ":1", "--debug-addr", ":2"}, 2, "--debug-addr"},
		{[]string{"--tls-cert", "c.pem"}, 2, "--tls-cert and --tls-key"},
		{[]string{"--tls-client-ca", "ca.pem"}, 2, "--tls-client-ca needs --tls-cert"},
		{[]string{"--tls-cert", "c", "--tls-key", "k", "--tls-client-san", "x"}, 2, "--tls-client-san needs --tls-client-ca"},
		{[]string{"--redis", "redis://127.0.0.1:1", "--redis-tls-ca", "ca.pem"}, 2, "rediss://"},
		{[]string{"--redis-required"}, 2, "--redis-required needs --redis"},
		{[]string{"--redis-timeout", "0s"}, 2, "--redis-timeout 0s: want > 0"},
		{[]string{"--redis-timeout", "-5ms"}, 2, "--redis-timeout -5ms: want > 0"},
	} {
		_, code, stderr := parseServe(t, nil, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("serve %q: exit %d, stderr %q; want %d with %q", tt.args, code, stderr, tt.code, tt.want)
		}
	}
}
