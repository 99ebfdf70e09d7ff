package hostile

import (
	"net/http"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// panicClass: the binary's hostiletest hook makes the store panic on a
// key containing "hostile-panic". Every entry point that reaches the store
// with such a key (POST /v1/check, POST /json, GET /v1/auth, gRPC
// ShouldRateLimit) answers 500 / Internal, panicRounds times, the log
// carries the panic, and the process keeps answering normal requests.
var panicClass = class{name: "panic", panics: true, flags: []flagArg{{"auth-domain", "hostile"}}, run: runPanic}

const (
	panicKey    = "hostile-panic" // as in cmd/sluice/hostile_hook.go
	panicRounds = 10
)

func runPanic(t *testing.T, h *harness) {
	cl := hostileClient(2 * time.Second)
	defer cl.CloseIdleConnections()
	httpCases := []struct {
		name string
		req  func() (*http.Request, error)
	}{
		{"POST /v1/check", func() (*http.Request, error) {
			return http.NewRequest("POST", h.p.httpURL("/v1/check"), strings.NewReader(`{"key":"`+panicKey+`","algorithm":"gcra","rate":10,"period":"1s"}`))
		}},
		{"POST /json", func() (*http.Request, error) {
			return http.NewRequest("POST", h.p.httpURL("/json"), strings.NewReader(`{"domain":"hostile","descriptors":[{"entries":[{"key":"hostile","value":"`+panicKey+`"}]}]}`))
		}},
		{"GET /v1/auth", func() (*http.Request, error) {
			r, err := http.NewRequest("GET", h.p.httpURL("/v1/auth"), nil)
			if err == nil {
				// A client address too, so that the request has an
				// identity whether or not the suite's peer is a trusted
				// proxy.
				r.Header.Set("X-Forwarded-For", "203.0.113.50")
				r.Header.Set("X-Api-Key", panicKey)
			}
			return r, err
		}},
	}
	_, rls := h.p.hostileConn(t)
	for round := range panicRounds {
		for _, c := range httpCases {
			req, err := c.req()
			if err != nil {
				t.Fatal(err)
			}
			code, body, err := statusOf(cl.Do(req))
			if err != nil || code != 500 {
				t.Errorf("%s on a panicking store path, round %d: %d %s %v, want 500", c.name, round+1, code, trim(body), err)
			}
		}
		ctx, cancel := rpcCtx(2 * time.Second)
		_, err := rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "hostile", Descriptors: []*rlpb.RateLimitDescriptor{desc("hostile", panicKey)}})
		cancel()
		if status.Code(err) != codes.Internal {
			t.Errorf("gRPC ShouldRateLimit on a panicking store path, round %d: %v, want Internal", round+1, errOrOK(err))
		}
		if h.p.exited() {
			t.Errorf("sluice exited after a panic: %v", h.p.exitErr)
			return
		}
	}
	if !strings.Contains(h.p.stderr.String(), panicKey) {
		t.Errorf("the log does not report the panics (no line with %q)", panicKey)
	}
}
