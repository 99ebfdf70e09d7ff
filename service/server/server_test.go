package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/check"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/metrics"
	"github.com/sluicehq/sluice/service/rls"
)

// testNow is the time of newTestServer's store.
var testNow = time.Date(2026, 1, 2, 3, 4, 30, 0, time.UTC)

func newTestServer(t testing.TB, opts ...Option) (*Server, *metrics.Metrics) {
	t.Helper()
	cfg, err := config.Parse("example.yaml", config.DefaultExample())
	if err != nil {
		t.Fatal(err)
	}
	// The store's clock stands still in the middle of a minute, so a
	// test's requests share one window of a per-minute fixed-window
	// limit whenever the machine runs them.
	st := memstore.New(memstore.WithClock(func() time.Time { return testNow }))
	t.Cleanup(func() { st.Close() })
	m := metrics.New()
	obs := metrics.Observe(st, m, nil) // as sluice serve wires it
	svc := rls.New(engine.New(obs, cfg, engine.WithObserver(m)))
	return New(svc, obs, append([]Option{WithMetrics(m)}, opts...)...), m
}

func do(t testing.TB, h http.Handler, method, path, body string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestCheck(t *testing.T) {
	s, _ := newTestServer(t)
	body := `{"key":"tenant-1:/search","algorithm":"sliding_log","rate":5,"period":"1s","burst":0,"cost":1}`
	for i := 4; i >= 0; i-- {
		w := do(t, s, "POST", "/v1/check", body)
		var got check.Response
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != 200 {
			t.Fatalf("POST /v1/check = %d %s (%v)", w.Code, w.Body, err)
		}
		want := check.Response{Allowed: true, Limit: 5, Remaining: i, ResetAfterMS: 1000}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("call %d mismatch (-want +got):\n%s", 5-i, d)
		}
	}
	w := do(t, s, "POST", "/v1/check", body)
	var got check.Response
	json.Unmarshal(w.Body.Bytes(), &got)
	if w.Code != 200 || got.Allowed || got.Remaining != 0 || got.RetryAfterMS <= 0 || got.RetryAfterMS > 1000 {
		t.Errorf("6th call = %d %+v, want 200, denied, 0 < retry_after_ms <= 1000", w.Code, got)
	}
	// cost 0 asks without spending; a different key has its own count.
	w = do(t, s, "POST", "/v1/check", `{"key":"other","algorithm":"gcra","rate":10,"period":"1m","burst":3,"cost":0}`)
	json.Unmarshal(w.Body.Bytes(), &got)
	if want := (check.Response{Allowed: true, Limit: 3, Remaining: 3}); got != want {
		t.Errorf("cost 0 = %+v, want %+v", got, want)
	}
}

func TestCheckErrors(t *testing.T) {
	s, _ := newTestServer(t)
	tests := []struct {
		give      string
		wantCode  int
		wantField string
	}{
		{`{"algorithm":"gcra","rate":1,"period":"1s"}`, 400, "key"},
		{`{"key":"k","rate":1,"period":"1s"}`, 400, "algorithm"},
		{`{"key":"k","algorithm":"leaky","rate":1,"period":"1s"}`, 400, "algorithm"},
		{`{"key":"k","algorithm":"gcra","rate":0,"period":"1s"}`, 400, "rate"},
		{`{"key":"k","algorithm":"gcra","rate":1}`, 400, "period"},
		{`{"key":"k","algorithm":"gcra","rate":1,"period":"soon"}`, 400, "period"},
		{`{"key":"k","algorithm":"gcra","rate":1,"period":"1us"}`, 400, "period"},
		{`{"key":"k","algorithm":"gcra","rate":1,"period":"1s","burst":-1}`, 400, "burst"},
		{`{"key":"k","algorithm":"fixed_window","rate":1,"period":"1s","burst":2}`, 400, "burst"},
		{`{"key":"k","algorithm":"gcra","rate":1,"period":"1s","cost":-1}`, 400, "cost"},
		{`{"key":"k","algorithm":"gcra","rate":1,"period":"1s","cost":2}`, 400, "cost"},
		{`{"key":"k","algorithm":"gcra","rate":"1","period":"1s"}`, 400, "rate"},
		{`{"key":"k","algorithm":"gcra","rate":1,"period":"1s","tenant":"x"}`, 400, "tenant"},
		{`{"key":"` + strings.Repeat("k", check.MaxKeyLen+1) + `","algorithm":"gcra","rate":1,"period":"1s"}`, 400, "key"},
		{`{"key":"k",`, 400, ""},
		{`not json`, 400, ""},
		{``, 400, ""},
		{`{"key":"k","algorithm":"gcra","rate":1,"period":"1s"} {}`, 400, ""},
		{`{"key":"` + strings.Repeat("k", DefaultMaxBody) + `"}`, 413, ""},
	}
	for _, tt := range tests {
		w := do(t, s, "POST", "/v1/check", tt.give)
		var p problemBody
		err := json.Unmarshal(w.Body.Bytes(), &p)
		if w.Code != tt.wantCode || err != nil || p.Field != tt.wantField || p.Status != tt.wantCode || p.Detail == "" ||
			w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("POST /v1/check %.60q = %d %s, want %d problem+json naming field %q", tt.give, w.Code, w.Body, tt.wantCode, tt.wantField)
		}
	}
}

func TestJSONEndpoint(t *testing.T) {
	s, m := newTestServer(t)
	body := `{"domain":"example","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}],"hits_addend":19}`
	w := do(t, s, "POST", "/json", body)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"limitRemaining":1`) || !strings.Contains(w.Body.String(), `"overallCode":"OK"`) {
		t.Errorf("POST /json = %d %s, want 200 OK with limitRemaining 1", w.Code, w.Body)
	}
	w = do(t, s, "POST", "/json", strings.Replace(body, "19", "2", 1))
	if w.Code != 429 || !strings.Contains(w.Body.String(), `"overallCode":"OVER_LIMIT"`) {
		t.Errorf("POST /json over the limit = %d %s, want 429 OVER_LIMIT", w.Code, w.Body)
	}
	for _, bad := range []string{`{"domain":""}`, `{"domain":"example"}`, `{"domain":5}`, `{`, `{"domain":"x","bogus":1}`} {
		if w := do(t, s, "POST", "/json", bad); w.Code != 400 {
			t.Errorf("POST /json %s = %d %s, want 400", bad, w.Code, w.Body)
		}
	}
	// Metrics carry the configured rule name, never the request's value.
	w = do(t, s, "GET", "/metrics", "")
	out := w.Body.String()
	for _, want := range []string{
		`sluice_rls_decisions_total{domain="example",result="ok",rule="example.remote_address"} 1`,
		`sluice_rls_decisions_total{domain="example",result="over_limit",rule="example.remote_address"} 1`,
		`sluice_store_duration_seconds_count 2`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(out, "10.0.0.1") {
		t.Errorf("/metrics mentions a request value (10.0.0.1)")
	}
	m.Reloaded(nil)
	if out := do(t, s, "GET", "/metrics", "").Body.String(); !strings.Contains(out, `sluice_config_reloads_total{result="success"} 1`) {
		t.Errorf("/metrics lacks the reload count")
	}
}

func TestProbes(t *testing.T) {
	breakerOK := true
	s, _ := newTestServer(t, WithReadiness(func() (bool, string) { return breakerOK, "breaker open" }))
	for _, p := range []string{"/healthz", "/healthcheck", "/readyz"} {
		if w := do(t, s, "GET", p, ""); w.Code != 200 {
			t.Errorf("GET %s = %d, want 200", p, w.Code)
		}
	}
	breakerOK = false
	if w := do(t, s, "GET", "/readyz", ""); w.Code != 503 || !strings.Contains(w.Body.String(), "breaker open") {
		t.Errorf("GET /readyz with breaker open = %d %s, want 503", w.Code, w.Body)
	}
	breakerOK = true
	s.Drain()
	for _, tt := range []struct {
		path string
		want int
	}{{"/readyz", 503}, {"/healthcheck", 503}, {"/healthz", 200}} {
		if w := do(t, s, "GET", tt.path, ""); w.Code != tt.want {
			t.Errorf("draining: GET %s = %d, want %d", tt.path, w.Code, tt.want)
		}
	}
}

// The JSON endpoints never panic and answer with a known status.
func FuzzJSONEndpoints(f *testing.F) {
	for _, s := range []string{
		`{"key":"tenant-1:/search","algorithm":"sliding_log","rate":5,"period":"1s","burst":0,"cost":1}`,
		`{"key":"k","algorithm":"gcra","rate":1000000000,"period":"8760h","burst":1000000000,"cost":1}`,
		`{"key":"k","algorithm":"token_bucket","rate":1,"period":"-1s"}`,
		`{"domain":"example","descriptors":[{"entries":[{"key":"remote_address","value":"1"}],"hits_addend":5}],"hits_addend":4294967295}`,
		`{"domain":"example","descriptors":[{"entries":[{"key":"path","value":"/search"}],"limit":{"requests_per_unit":1,"unit":"YEAR"}}]}`,
		`{"domain":"example","descriptors":[{"entries":[]}]}`,
		`{"key":null}`, `[]`, `""`, `{"cost":1e400}`,
	} {
		f.Add(s)
	}
	s, _ := newTestServer(f)
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v1/check", "/json"} {
			r := httptest.NewRequest("POST", path, bytes.NewBufferString(body))
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			switch w.Code {
			case 200, 400, 429:
			default:
				t.Errorf("POST %s %q = %d %s", path, body, w.Code, w.Body)
			}
			if w.Code == 400 && !json.Valid(w.Body.Bytes()) {
				t.Errorf("POST %s %q: 400 body is not JSON: %s", path, body, w.Body)
			}
			io.Copy(io.Discard, w.Body)
		}
	})
}

// An invalid limit's problem names the request field and gives the
// limit's reason, without the sentinel's text.
func TestCheckErrorDetail(t *testing.T) {
	s, _ := newTestServer(t)
	tests := []struct {
		give      string
		wantField string
		want      string
	}{
		{`{"key":"k","algorithm":"leaky","rate":1,"period":"1s"}`, "algorithm", `algorithm: unknown algorithm "leaky" (want fixed_window, sliding_log, sliding_window, token_bucket or gcra)`},
		{`{"key":"k","algorithm":"gcra","rate":0,"period":"1s"}`, "rate", "rate: Rate 0 must be > 0"},
		{`{"key":"k","algorithm":"gcra","rate":1,"period":"1us"}`, "period", "period: Period 1µs must be >= 1ms"},
		{`{"key":"k","algorithm":"fixed_window","rate":1,"period":"1s","burst":2}`, "burst", "burst: Burst 2 applies only to token_bucket and gcra, not fixed_window"},
		{`{"key":"k","algorithm":"sliding_window","rate":200000000,"period":"24h"}`, "rate", "rate: Rate × Period (200000000 × 86400000000µs) is too large for exact sliding_window arithmetic (limit 2^53); use a shorter Period or fixed_window"},
	}
	for _, tt := range tests {
		w := do(t, s, "POST", "/v1/check", tt.give)
		var p problemBody
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != 400 || p.Field != tt.wantField || p.Detail != tt.want {
			t.Errorf("POST /v1/check %s = %d %s, want 400 naming field %q with detail %q", tt.give, w.Code, w.Body, tt.wantField, tt.want)
		}
	}
}

// problemBody is a problem+json answer, as the tests read it.
type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Field  string `json:"field,omitempty"`
}

// counterValue is the value of the counter name with the label pairs
// labels in m's registry, 0 when it has no such series.
func counterValue(t testing.TB, m *metrics.Metrics, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range s.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue series
				}
			}
			return s.GetCounter().GetValue()
		}
	}
	return 0
}
