package server

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rls"
)

// permitFrom sends a permit request from the socket peer remote, with the
// headers hdr (name, value, ...).
func permitFrom(t *testing.T, s *Server, remote, op, body string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest("POST", "/v1/"+op, strings.NewReader(body))
	r.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

// TestPermitsPerClient: a client holds at most MaxPermitsPerClient
// permits; beyond, 429 until one is released or its lease ends. Another
// client, a renewal and an extend are not refused; a header an untrusted
// peer sends does not make it another client.
func TestPermitsPerClient(t *testing.T) {
	b := engine.DefaultBounds
	b.MaxPermitsPerClient = 3
	s, clk, _ := permitServer(t, b)
	acquire := func(remote, key, holder string, hdr ...string) *httptest.ResponseRecorder {
		return permitFrom(t, s, remote, "acquire", fmt.Sprintf(`{"key":%q,"max":5,"lease":"30s","holder":%q}`, key, holder), hdr...)
	}
	const a, other = "203.0.113.7:1000", "203.0.113.8:1000"
	for i := range 3 {
		if w := acquire(a, fmt.Sprint("k", i), "h"); w.Code != 200 {
			t.Fatalf("acquire %d = %d %s", i, w.Code, w.Body)
		}
		clk.add(time.Second)
	}
	w := acquire(a, "k3", "h", "X-Forwarded-For", "198.51.100.1")
	var pb problemBody
	json.Unmarshal(w.Body.Bytes(), &pb)
	if w.Code != http.StatusTooManyRequests || !strings.Contains(pb.Detail, "--max-permits-per-client") || w.Header().Get("Retry-After") != "27" {
		t.Fatalf("a 4th permit of a client (X-Forwarded-For from an untrusted peer) = %d %s Retry-After %q, want 429 naming --max-permits-per-client, Retry-After 27", w.Code, w.Body, w.Header().Get("Retry-After"))
	}
	if w := acquire(a, "k0", "h"); w.Code != 200 {
		t.Errorf("renewing a permit the client holds = %d %s, want 200", w.Code, w.Body)
	}
	if w := permitFrom(t, s, a, "extend", `{"key":"k1","max":5,"lease":"30s","holder":"h"}`); w.Code != 200 {
		t.Errorf("extend = %d %s, want 200", w.Code, w.Body)
	}
	if w := acquire(other, "k3", "h"); w.Code != 200 {
		t.Errorf("another client's permit = %d %s, want 200", w.Code, w.Body)
	}
	if w := permitFrom(t, s, a, "release", `{"key":"k2","holder":"h"}`); w.Code != 200 {
		t.Fatalf("release = %d", w.Code)
	}
	if w := acquire(a, "k4", "h"); w.Code != 200 {
		t.Errorf("once a permit is released = %d %s, want 200", w.Code, w.Body)
	}
	if w := acquire(a, "k5", "h"); w.Code != http.StatusTooManyRequests {
		t.Errorf("a 4th again = %d, want 429", w.Code)
	}
	clk.add(31 * time.Second) // every lease has ended
	for i := range 3 {
		if w := acquire(a, fmt.Sprint("n", i), "h"); w.Code != 200 {
			t.Errorf("after the leases ended, acquire %d = %d %s, want 200", i, w.Code, w.Body)
		}
	}
	// Behind a trusted proxy (loopback), the forwarded address is the
	// client.
	for i := range 4 {
		w := acquire("127.0.0.1:5", fmt.Sprint("p", i), "h", "X-Forwarded-For", fmt.Sprint("198.51.100.", i))
		if w.Code != 200 {
			t.Errorf("4 clients behind a trusted proxy, acquire %d = %d %s, want 200", i, w.Code, w.Body)
		}
	}
	if n := s.permits.held("203.0.113.7"); n != 3 {
		t.Errorf("%d permits counted for the client, want 3", n)
	}
}

// TestPermitLeaseBound: a lease past MaxPermitLease is a 400 naming the
// field and the flag.
func TestPermitLeaseBound(t *testing.T) {
	s, _, _ := permitServer(t, engine.Bounds{})
	for _, tt := range []struct{ body, field string }{
		{`{"key":"k","max":1,"lease":"10m1s"}`, "lease"},
		{`{"key":"k","max":1,"lease_ms":600001}`, "lease_ms"},
		{`{"key":"k","max":1,"lease":"24h"}`, "lease"},
	} {
		for _, op := range []string{"acquire", "extend"} {
			body := strings.Replace(tt.body, `"max"`, `"holder":"h","max"`, 1)
			w := do(t, s, "POST", "/v1/"+op, body)
			var pb problemBody
			json.Unmarshal(w.Body.Bytes(), &pb)
			if w.Code != 400 || pb.Field != tt.field || !strings.Contains(pb.Detail, "--max-permit-lease 10m0s") {
				t.Errorf("%s %s = %d %s, want 400 naming %s and --max-permit-lease", op, body, w.Code, w.Body, tt.field)
			}
		}
	}
	if w := do(t, s, "POST", "/v1/acquire", `{"key":"k","max":1,"lease":"10m"}`); w.Code != 200 {
		t.Errorf("a lease of --max-permit-lease = %d %s, want 200", w.Code, w.Body)
	}
}

// TestPermitStoreFailuresLogOnce: a store that refuses every new key (its
// table of permits full) refuses each acquire with a 503, and the log has
// one line for them all.
func TestPermitStoreFailuresLogOnce(t *testing.T) {
	cfg, err := config.Parse("example.yaml", config.DefaultExample())
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New(memstore.WithMaxKeys(1))
	t.Cleanup(func() { st.Close() })
	var buf syncBuffer
	s := New(rls.New(engine.New(st, cfg)), st, WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	if w := do(t, s, "POST", "/v1/acquire", `{"key":"first","max":1,"lease":"1m"}`); w.Code != 200 {
		t.Fatalf("first acquire = %d %s", w.Code, w.Body)
	}
	for i := range 50 {
		if w := do(t, s, "POST", "/v1/acquire", fmt.Sprintf(`{"key":"k%d","max":1,"lease":"1m"}`, i)); w.Code != http.StatusServiceUnavailable {
			t.Fatalf("acquire of a new key with the table full = %d %s, want 503", w.Code, w.Body)
		}
	}
	if n := strings.Count(buf.String(), "store failed"); n != 1 {
		t.Fatalf("50 refusals logged %d lines, want 1:\n%s", n, buf.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}
func (b *syncBuffer) String() string { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }
