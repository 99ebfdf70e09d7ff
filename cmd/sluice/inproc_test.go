package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/wait"
)

// inproc is a serve running in this test process, so that testStoreWrap
// can put a hostile store under it.
type inproc struct {
	http, grpc string
	storeAPI   string // with --store-api-addr
	conn       *grpc.ClientConn
	rls        pb.RateLimitServiceClient
	stderr     *syncBuffer
	cancel     context.CancelFunc
	done       chan int
}

// serveInProcess runs serve with args and wrap as testStoreWrap until the
// test ends (or stop is called).
func serveInProcess(t *testing.T, wrap func(sluice.Store) sluice.Store, args ...string) *inproc {
	t.Helper()
	testStoreWrap = wrap
	t.Cleanup(func() { testStoreWrap = nil })
	ready := filepath.Join(t.TempDir(), "ready.json")
	args = append([]string{"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--ready-file", ready}, args...)
	var f serveFlags
	p := &inproc{stderr: &syncBuffer{}, done: make(chan int, 1)}
	fs := serveFlagSet(&f, p.stderr)
	if code, done := parse(fs, args); done {
		t.Fatalf("serve %q: exit %d: %s", args, code, p.stderr)
	}
	if err := f.validate(); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(p.stderr, nil))
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() { p.done <- runServe(ctx, cancel, &f, log, p.stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			t.Error("serve did not return 20s after its context ended")
		}
		if t.Failed() {
			t.Logf("serve's log:\n%s", p.stderr)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile(ready)
		if err == nil {
			var a struct {
				HTTP, GRPC string
				StoreAPI   string `json:"store_api"`
			}
			if err := json.Unmarshal(b, &a); err != nil {
				t.Fatal(err)
			}
			p.http, p.grpc, p.storeAPI = "http://"+a.HTTP, a.GRPC, a.StoreAPI
			break
		}
		select {
		case code := <-p.done:
			t.Fatalf("serve exited %d before listening:\n%s", code, p.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not listen within 10s:\n%s", p.stderr)
		}
	}
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p.conn, p.rls = conn, pb.NewRateLimitServiceClient(conn)
	return p
}

// hostileStore panics on keys containing "panic" and blocks, whatever its
// context says, on keys containing "block" until release is closed; its
// Close blocks until release too when hangClose is set.
type hostileStore struct {
	sluice.Store
	release   chan struct{}
	hangClose bool
	ctxBlock  bool        // block on "block" keys until ctx ends instead
	entered   chan string // when not nil, gets each "block" key on arrival
}

func (h *hostileStore) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	switch {
	case strings.Contains(key, "panic"):
		panic("hostile store: " + key)
	case strings.Contains(key, "block") && h.entered != nil:
		h.entered <- key
		<-h.release
	case strings.Contains(key, "block") && h.ctxBlock:
		<-ctx.Done()
		return sluice.Decision{}, ctx.Err()
	case strings.Contains(key, "block"):
		<-h.release
	}
	return h.Store.AllowN(ctx, key, lim, n)
}

func (h *hostileStore) Close() error {
	if h.hangClose {
		<-h.release
	}
	return nil
}

func checkBody(key string) string {
	return `{"key":"` + key + `","algorithm":"gcra","rate":100,"period":"1s"}`
}

func postCheck(t *testing.T, base, key string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(checkBody(key)))
	if err != nil {
		t.Fatalf("POST /v1/check %s: %v", key, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestServePanicIsRecovered(t *testing.T) {
	hs := &hostileStore{release: make(chan struct{})}
	defer close(hs.release)
	p := serveInProcess(t, func(s sluice.Store) sluice.Store { hs.Store = s; return hs })

	code, h, body := postCheck(t, p.http, "panic-1")
	if code != 500 || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, `"status":500`) {
		t.Errorf("POST /v1/check on a panicking store = %d %s %s, want 500 problem+json", code, h.Get("Content-Type"), body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "example", Descriptors: rlsDescriptors("remote_address", "panic")})
	if status.Code(err) != codes.Internal {
		t.Errorf("ShouldRateLimit on a panicking store: %v, want Internal", err)
	}
	// The servers go on serving.
	if code, _, body := postCheck(t, p.http, "fine"); code != 200 {
		t.Errorf("POST /v1/check after the panics = %d %s, want 200", code, body)
	}
	if _, err := p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "example", Descriptors: rlsDescriptors("remote_address", "fine")}); err != nil {
		t.Errorf("ShouldRateLimit after the panics: %v", err)
	}
	resp, err := http.Get(p.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`sluice_panics_total{server="grpc"} 1`, `sluice_panics_total{server="http"} 1`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(string(m), "sluice_panics"))
		}
	}
	log := p.stderr.String()
	for _, want := range []string{"panic serving HTTP request", "panic serving gRPC call", "hostile store: *check/panic-1", "inproc_test.go"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q (the panic and its stack)", want)
		}
	}
}

func rlsDescriptors(kv ...string) []*rlpb.RateLimitDescriptor {
	return []*rlpb.RateLimitDescriptor{d(kv...)}
}

func TestServeRequestTimeout(t *testing.T) {
	eachGRPCTransport(t, testServeRequestTimeout)
}

func testServeRequestTimeout(t *testing.T, transport ...string) {
	hs := &hostileStore{release: make(chan struct{}), ctxBlock: true}
	defer close(hs.release)
	p := serveInProcess(t, func(s sluice.Store) sluice.Store { hs.Store = s; return hs }, append(transport, "--request-timeout", "200ms")...)

	begin := time.Now()
	code, _, body := postCheck(t, p.http, "block")
	if took := time.Since(begin); code < 500 || took < 150*time.Millisecond || took > 3*time.Second {
		t.Errorf("POST /v1/check on a store that waits for its context = %d after %v (%s), want a 5xx after about 200ms", code, took, body)
	}
	begin = time.Now()
	_, err := p.rls.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "example", Descriptors: rlsDescriptors("remote_address", "block")})
	if took := time.Since(begin); status.Code(err) != codes.DeadlineExceeded || took < 150*time.Millisecond || took > 3*time.Second {
		t.Errorf("ShouldRateLimit without a deadline = %v after %v, want DeadlineExceeded after about 200ms", err, took)
	}
	// A caller's own shorter deadline wins: the call ends with it, no
	// later than a goroutine woken by it (plus 100ms), whatever a busy
	// machine's scheduling.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	past := wait.PastDeadline(ctx, func() {
		_, err = p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "example", Descriptors: rlsDescriptors("remote_address", "block")})
	})
	if status.Code(err) != codes.DeadlineExceeded || past > 100*time.Millisecond {
		t.Errorf("ShouldRateLimit with a 50ms deadline = %v, %v past it, want DeadlineExceeded at it", err, past)
	}
}

func TestServeShutdownWithStuckHandlersAndStore(t *testing.T) {
	hs := &hostileStore{release: make(chan struct{}), hangClose: true, entered: make(chan string, 2)}
	defer close(hs.release)
	p := serveInProcess(t, func(s sluice.Store) sluice.Store { hs.Store = s; return hs },
		"--shutdown-timeout", "300ms", "--request-timeout", "0")

	// Calls that never return: the store ignores their contexts.
	go http.Post(p.http+"/v1/check", "application/json", strings.NewReader(checkBody("block-http")))
	go p.rls.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "example", Descriptors: rlsDescriptors("remote_address", "block")})
	for i := 0; i < 2; i++ {
		select {
		case <-hs.entered: // both calls are stuck in the store
		case <-time.After(5 * time.Second):
			t.Fatal("the calls did not reach the store")
		}
	}
	begin := time.Now()
	p.cancel()
	select {
	case code := <-p.done:
		p.done <- code // for the cleanup
		if took := time.Since(begin); took > 1500*time.Millisecond {
			t.Errorf("serve returned %v after the signal, want within about --shutdown-timeout 300ms", took)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serve still running 5s after the signal with --shutdown-timeout 300ms")
	}
	if log := p.stderr.String(); !strings.Contains(log, "store close did not finish") {
		t.Errorf("log lacks the warning about the store's Close:\n%s", log)
	}
}
