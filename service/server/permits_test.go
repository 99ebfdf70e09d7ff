package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/metrics"
	"github.com/sluicehq/sluice/service/rls"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// permitServer is a server on a memory store with a fake clock and the
// bounds b (zero: the defaults).
func permitServer(t *testing.T, b engine.Bounds) (*Server, *fakeClock, *metrics.Metrics) {
	t.Helper()
	cfg, err := config.Parse("example.yaml", config.DefaultExample())
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	st := memstore.New(memstore.WithClock(clk.now))
	t.Cleanup(func() { st.Close() })
	if b == (engine.Bounds{}) {
		b = engine.DefaultBounds
	}
	m := metrics.New()
	s := New(rls.New(engine.New(st, cfg, engine.WithBounds(b))), st, WithMetrics(m))
	s.permits.now = clk.now
	return s, clk, m
}

func permit(t *testing.T, s *Server, op, body string) (int, PermitResponse, string) {
	t.Helper()
	w := do(t, s, "POST", "/v1/"+op, body)
	var p PermitResponse
	if w.Code == 200 || w.Code == 429 {
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatalf("POST /v1/%s %s = %d %q: %v", op, body, w.Code, w.Body, err)
		}
	}
	return w.Code, p, w.Header().Get("Retry-After")
}

// TestAcquireRelease: max permits are acquired, the next is a 429 with the
// time until the earliest lease ends, a release frees a slot at once, and a
// release is idempotent.
func TestAcquireRelease(t *testing.T) {
	s, clk, m := permitServer(t, engine.Bounds{})
	for i := 1; i <= 3; i++ {
		code, p, _ := permit(t, s, "acquire", fmt.Sprintf(`{"key":"reports","max":3,"lease":"30s","holder":"h%d"}`, i))
		want := PermitResponse{Acquired: true, Holder: fmt.Sprintf("h%d", i), Held: i, Max: 3, TTLMS: 30000, LeaseMS: 30000,
			ExpiresAt: fmt.Sprintf("2026-01-02T03:04:%d.000Z", 34+i), ExpiresInMS: 30000}
		if code != 200 || p != want {
			t.Fatalf("acquire %d = %d %+v, want 200 %+v", i, code, p, want)
		}
		clk.add(time.Second)
	}
	// h1's lease ends at 03:04:35, 27s from now.
	code, p, ra := permit(t, s, "acquire", `{"key":"reports","max":3,"lease_ms":30000,"holder":"h4"}`)
	if want := (PermitResponse{Held: 3, Max: 3, TTLMS: 30000, LeaseMS: 30000, RetryAfterMS: 27000}); code != 429 || p != want || ra != "27" {
		t.Fatalf("4th acquire = %d %+v Retry-After %q, want 429 %+v Retry-After 27", code, p, ra, want)
	}
	// Acquiring again with a holder that holds renews it: still 3.
	if code, p, _ := permit(t, s, "acquire", `{"key":"reports","max":3,"lease":"30s","holder":"h2"}`); code != 200 || p.Held != 3 {
		t.Errorf("acquire by a holder that holds = %d %+v, want 200 held 3", code, p)
	}
	for i := 0; i < 2; i++ { // twice: idempotent
		w := do(t, s, "POST", "/v1/release", `{"key":"reports","holder":"h1"}`)
		if w.Code != 200 || strings.TrimSpace(w.Body.String()) != `{"released":true}` {
			t.Fatalf("release %d = %d %s, want 200 released", i+1, w.Code, w.Body)
		}
	}
	if code, p, _ := permit(t, s, "acquire", `{"key":"reports","max":3,"lease":"30s","holder":"h4"}`); code != 200 || p.Held != 3 {
		t.Errorf("acquire after a release = %d %+v, want 200 held 3", code, p)
	}
	// Another key has its own permits.
	if code, p, _ := permit(t, s, "acquire", `{"key":"other","max":1,"lease":"1s"}`); code != 200 || p.Held != 1 || len(p.Holder) != 32 {
		t.Errorf("acquire of another key without a holder = %d %+v, want 200 held 1 and a generated holder", code, p)
	}
	// The lease frees what is not released: at 03:05:08 h3 (03:04:37), h2
	// (renewed at 03:04:08, ends 03:04:38) and h4 have all ended.
	clk.add(time.Minute)
	if code, p, _ := permit(t, s, "acquire", `{"key":"reports","max":3,"lease":"30s","holder":"h5"}`); code != 200 || p.Held != 1 {
		t.Errorf("acquire after every lease ended = %d %+v, want 200 held 1", code, p)
	}
	for _, c := range []struct {
		op, result string
		want       float64
	}{{"acquire", "acquired", 7}, {"acquire", "denied", 1}, {"release", "released", 2}} {
		if got := counterValue(t, m, "sluice_permit_operations_total", "operation", c.op, "result", c.result); got != c.want {
			t.Errorf("sluice_permit_operations_total{operation=%q,result=%q} = %v, want %v", c.op, c.result, got, c.want)
		}
	}
}

// TestExtend: an extend renews a held permit from now; one whose lease
// ended is a 409 naming the holder, and the slot is another's.
func TestExtend(t *testing.T) {
	s, clk, m := permitServer(t, engine.Bounds{})
	if code, _, _ := permit(t, s, "acquire", `{"key":"job","max":1,"lease":"10s","holder":"a"}`); code != 200 {
		t.Fatalf("acquire = %d", code)
	}
	clk.add(8 * time.Second)
	code, p, _ := permit(t, s, "extend", `{"key":"job","max":1,"lease":"10s","holder":"a"}`)
	if want := (PermitResponse{Acquired: true, Holder: "a", Held: 1, Max: 1, TTLMS: 10000, LeaseMS: 10000, ExpiresAt: "2026-01-02T03:04:23.000Z", ExpiresInMS: 10000}); code != 200 || p != want {
		t.Fatalf("extend = %d %+v, want 200 %+v", code, p, want)
	}
	clk.add(9 * time.Second) // within the extended lease: still held
	if code, _, _ := permit(t, s, "acquire", `{"key":"job","max":1,"lease":"10s","holder":"b"}`); code != 429 {
		t.Errorf("acquire while extended = %d, want 429", code)
	}
	clk.add(2 * time.Second) // past it
	if code, _, _ := permit(t, s, "acquire", `{"key":"job","max":1,"lease":"10s","holder":"b"}`); code != 200 {
		t.Errorf("acquire after the lease ended = %d, want 200", code)
	}
	w := do(t, s, "POST", "/v1/extend", `{"key":"job","max":1,"lease":"10s","holder":"a"}`)
	var pb problemBody
	json.Unmarshal(w.Body.Bytes(), &pb)
	if w.Code != 409 || pb.Field != "holder" || !strings.Contains(pb.Detail, "permit lost") || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("extend of a lost permit = %d %s %s, want 409 problem+json naming holder, permit lost", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	if got := counterValue(t, m, "sluice_permit_operations_total", "operation", "extend", "result", "lost"); got != 1 {
		t.Errorf("extend lost counted %v, want 1", got)
	}
}

// TestPermitErrors: every invalid field is a 400 problem+json naming it,
// before any store call.
func TestPermitErrors(t *testing.T) {
	s, _, _ := permitServer(t, engine.Bounds{MaxPermits: 100})
	long := strings.Repeat("k", MaxPermitKeyLen)
	tests := []struct {
		op, give   string
		wantCode   int
		wantField  string
		wantDetail string
	}{
		{"acquire", `{"max":1,"lease":"1s"}`, 400, "key", "missing"},
		{"acquire", `{"key":"` + long + `k","max":1,"lease":"1s"}`, 400, "key", "longer than 1016"},
		{"acquire", `{"key":"` + long + `","max":1,"lease":"1s","holder":"h"}`, 200, "", ""},
		{"acquire", `{"key":"a\udc00","max":1,"lease":"1s"}`, 400, "key", "UTF-8"},
		{"acquire", `{"key":"k","lease":"1s"}`, 400, "max", "missing"},
		{"acquire", `{"key":"k","max":-1,"lease":"1s"}`, 400, "max", "within [1, 10000]"},
		{"acquire", `{"key":"k","max":100,"lease":"1s"}`, 200, "", ""},
		{"acquire", `{"key":"k","max":101,"lease":"1s"}`, 400, "max", "max 101 exceeds --max-permits 100"},
		{"acquire", `{"key":"k","max":"3","lease":"1s"}`, 400, "max", "must be a JSON int"},
		{"acquire", `{"key":"k","max":1}`, 400, "ttl", "missing"},
		{"acquire", `{"key":"kt1","max":1,"ttl":"1s","holder":"t1"}`, 200, "", ""},
		{"acquire", `{"key":"kt2","max":2,"ttl_ms":1000,"holder":"t2"}`, 200, "", ""},
		{"acquire", `{"key":"k","max":1,"ttl":"soon"}`, 400, "ttl", "not a duration"},
		{"acquire", `{"key":"k","max":1,"ttl":"9ms"}`, 400, "ttl", "within [10ms, 24h0m0s]"},
		{"acquire", `{"key":"k","max":1,"ttl":"1s","ttl_ms":1000}`, 400, "ttl", "not both"},
		{"acquire", `{"key":"k","max":1,"ttl_ms":9}`, 400, "ttl_ms", "within"},
		{"acquire", `{"key":"k","max":1,"ttl":"1s","lease":"1s"}`, 400, "ttl", "not the deprecated lease"},
		{"acquire", `{"key":"k","max":1,"lease":"soon"}`, 400, "lease", "not a duration"},
		{"acquire", `{"key":"k","max":1,"lease":"9ms"}`, 400, "lease", "within [10ms, 24h0m0s]"},
		{"acquire", `{"key":"k","max":1,"lease":"24h0m0.001s"}`, 400, "lease", "within [10ms, 24h0m0s]"},
		{"acquire", `{"key":"k","max":1,"lease":"1.5ms"}`, 400, "lease", "within"},
		{"acquire", `{"key":"k","max":1,"lease":"10.5ms"}`, 400, "lease", "whole number of milliseconds"},
		{"acquire", `{"key":"k","max":1,"lease":"1s","lease_ms":1000}`, 400, "lease", "not both"},
		{"acquire", `{"key":"k","max":1,"lease_ms":9}`, 400, "lease_ms", "within"},
		{"acquire", `{"key":"k","max":1,"lease_ms":86400001}`, 400, "lease_ms", "within"},
		{"acquire", `{"key":"k","max":1,"lease_ms":9223372036854775807}`, 400, "lease_ms", "within"},
		{"acquire", `{"key":"k","max":1,"lease":"1s","holder":"` + strings.Repeat("h", 129) + `"}`, 400, "holder", "longer than 128"},
		{"acquire", `{"key":"k128","max":1,"lease":"1s","holder":"` + strings.Repeat("h", 128) + `"}`, 200, "", ""},
		{"acquire", "{\"key\":\"k\",\"max\":1,\"lease\":\"1s\",\"holder\":\"h\xff\"}", 400, "holder", "UTF-8"},
		{"acquire", `{"key":"k","max":1,"lease":"1s","rate":1}`, 400, "rate", "unknown field"},
		{"acquire", `{"key":"k","max":1,"lease":"1s"} {}`, 400, "", "data after the object"},
		{"acquire", `{"key":"k"`, 400, "", "malformed JSON"},
		{"acquire", ``, 400, "", "empty body"},
		{"release", `{"key":"k"}`, 400, "holder", "missing"},
		{"release", `{"holder":"h"}`, 400, "key", "missing"},
		{"release", `{"key":"k","holder":"h","max":1}`, 400, "", "key and holder only"},
		{"extend", `{"key":"k","max":1,"lease":"1s"}`, 400, "holder", "missing"},
		{"extend", `{"key":"k","lease":"1s","holder":"h"}`, 400, "max", "missing"},
		{"extend", `{"key":"k","max":1,"holder":"h"}`, 400, "ttl", "missing"},
	}
	for _, tt := range tests {
		w := do(t, s, "POST", "/v1/"+tt.op, tt.give)
		if w.Code != tt.wantCode {
			t.Errorf("POST /v1/%s %.80s = %d %s, want %d", tt.op, tt.give, w.Code, w.Body, tt.wantCode)
			continue
		}
		if tt.wantCode == 200 {
			continue
		}
		var p problemBody
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Field != tt.wantField || !strings.Contains(p.Detail, tt.wantDetail) ||
			w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("POST /v1/%s %.80s = %s, want field %q and detail %q", tt.op, tt.give, w.Body, tt.wantField, tt.wantDetail)
		}
	}
	// The body's bound.
	big := `{"key":"k","max":1,"lease":"1s","holder":"` + strings.Repeat(" ", DefaultMaxBody) + `"}`
	if w := do(t, s, "POST", "/v1/acquire", big); w.Code != 413 {
		t.Errorf("POST /v1/acquire of %d bytes = %d, want 413", len(big), w.Code)
	}
}

// rateOnly is a store without concurrency limits.
type rateOnly struct{ sluice.Store }

func (rateOnly) String() string { return "rate-only" }

// TestPermitUnsupported: a store that does not keep concurrency limits is
// a 501 naming it, after the request is validated.
func TestPermitUnsupported(t *testing.T) {
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	s := New(nil, rateOnly{st})
	for _, op := range []string{"acquire", "release", "extend"} {
		w := do(t, s, "POST", "/v1/"+op, `{"key":"k","max":1,"lease":"1s","holder":"h"}`)
		if op == "release" {
			w = do(t, s, "POST", "/v1/"+op, `{"key":"k","holder":"h"}`)
		}
		if w.Code != 501 || !strings.Contains(w.Body.String(), "rate-only") {
			t.Errorf("POST /v1/%s on a rate-only store = %d %s, want 501 naming it", op, w.Code, w.Body)
		}
	}
	if w := do(t, s, "POST", "/v1/acquire", `{"key":"k","max":0,"lease":"1s"}`); w.Code != 400 {
		t.Errorf("an invalid acquire on a rate-only store = %d, want 400", w.Code)
	}
}

// TestPermitConcurrent: many goroutines acquire and release one key with
// max 3 through the handler; never more than 3 hold at once.
func TestPermitConcurrent(t *testing.T) {
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	s := New(nil, st)
	var mu sync.Mutex
	holding, peak, acquired := 0, 0, 0
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				w := do(t, s, "POST", "/v1/acquire", `{"key":"c","max":3,"lease":"1m"}`)
				if w.Code == 429 {
					continue
				}
				var p PermitResponse
				if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &p) != nil {
					t.Errorf("acquire = %d %s", w.Code, w.Body)
					return
				}
				mu.Lock()
				holding++
				acquired++
				peak = max(peak, holding)
				mu.Unlock()
				time.Sleep(50 * time.Microsecond)
				mu.Lock()
				holding--
				mu.Unlock()
				if w := do(t, s, "POST", "/v1/release", `{"key":"c","holder":"`+p.Holder+`"}`); w.Code != 200 {
					t.Errorf("release = %d %s", w.Code, w.Body)
				}
			}
		}()
	}
	wg.Wait()
	if peak > 3 || acquired == 0 {
		t.Errorf("peak holders %d (of %d acquired), want at most 3", peak, acquired)
	}
	d, err := st.Acquire(context.Background(), permitKeyPrefix+"c", sluice.ConcurrencyLimit{Max: 3, TTL: time.Minute}, "last")
	if err != nil || d.Held != 1 {
		t.Errorf("after every release, an acquire holds %d (%v), want 1", d.Held, err)
	}
}

// FuzzPermitEndpoints: any body is a 200, 400, 409 or 429 with a JSON
// body, never a panic or a store error.
func FuzzPermitEndpoints(f *testing.F) {
	for _, s := range []string{
		`{"key":"k","max":3,"lease":"30s","holder":"h"}`,
		`{"key":"k","max":10000,"lease_ms":86400000}`,
		`{"key":"k","max":1,"lease":"-1s"}`,
		`{"key":"k","max":1,"lease_ms":-9223372036854775808}`,
		`{"key":"k","holder":"h"}`,
		`{"key":"\ud800","max":1,"lease":"1s"}`,
		`{"key":null}`, `[]`, `""`, `{"max":1e400}`,
	} {
		f.Add(s)
	}
	s, _ := newTestServer(f)
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v1/acquire", "/v1/extend", "/v1/release"} {
			w := do(t, s, "POST", path, body)
			switch w.Code {
			case 200, 400, 409, 429:
			default:
				t.Errorf("POST %s %q = %d %s", path, body, w.Code, w.Body)
			}
			if !json.Valid(w.Body.Bytes()) {
				t.Errorf("POST %s %q: body is not JSON: %s", path, body, w.Body)
			}
		}
	})
}
