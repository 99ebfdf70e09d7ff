package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/check"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/stack"
)

const testYAML = `
domain: api
descriptors:
  - key: user
    rate_limit:
      name: per_user
      unit: minute
      requests_per_unit: 3
  - key: plan
    value: free
    rate_limits:
      - name: free_minute
        unit: minute
        requests_per_unit: 5
      - name: free_hour
        unit: hour
        requests_per_unit: 50
  - key: trial
    shadow_mode: true
    rate_limit:
      unit: second
      requests_per_unit: 2
  - key: blocked
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: open
    rate_limit:
      unlimited: true
`

type fixture struct {
	eng   *engine.Engine
	store sluice.Store
	h     http.Handler
	cfg   *ConfigState
	log   *bytes.Buffer
}

func newFixture(t *testing.T, store sluice.Store, auth Auth) *fixture {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(testYAML))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{store: store, eng: engine.New(store, cfg), cfg: &ConfigState{}, log: &bytes.Buffer{}}
	f.cfg.Loaded("file", "abc123", time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "test_total", Help: "t"}))
	f.h, err = New(Options{Registry: reg, Pprof: true, Engine: f.eng, Store: store, Config: f.cfg, Auth: auth,
		Log:    slog.New(slog.NewTextHandler(f.log, nil)),
		Routes: map[string]http.Handler{"GET /admin/extra": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "extra by "+Caller(r.Context())) })}})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// do serves one request from remote with header hdr ("Authorization: ...").
func (f *fixture) do(t *testing.T, method, target, body string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	r.RemoteAddr = "127.0.0.1:4321"
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "RemoteAddr" {
			r.RemoteAddr = hdr[i+1]
			continue
		}
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w.Code, w.Body.String(), w.Header()
}

func decide(t *testing.T, e *engine.Engine, n int, entries ...engine.Entry) (admitted int) {
	t.Helper()
	for range n {
		res, err := e.Decide(context.Background(), &engine.Request{Domain: "api", Descriptors: []engine.Descriptor{{Entries: entries}}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Code == engine.OK {
			admitted++
		}
	}
	return admitted
}

func decodeInspect(t *testing.T, body string) inspectJSON {
	t.Helper()
	var out inspectJSON
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return out
}

func TestLoopbackOnly(t *testing.T) {
	f := newFixture(t, memstore.New(), Auth{})
	for _, path := range []string{"/admin/v1/config", "/debug/pprof/cmdline", "/admin/extra"} {
		code, body, h := f.do(t, "GET", path, "", "RemoteAddr", "10.1.2.3:5555")
		if code != http.StatusForbidden || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, "loopback") {
			t.Errorf("GET %s from 10.1.2.3 = %d %s %q, want 403 problem+json", path, code, h.Get("Content-Type"), body)
		}
		for _, remote := range []string{"127.0.0.1:1", "[::1]:1", "127.3.2.1:9"} {
			if code, body, _ := f.do(t, "GET", path, "", "RemoteAddr", remote); code != http.StatusOK {
				t.Errorf("GET %s from %s = %d %s, want 200", path, remote, code, body)
			}
		}
	}
	if code, body, _ := f.do(t, "GET", "/admin/extra", ""); body != "extra by loopback" {
		t.Errorf("GET /admin/extra = %d %q, want the route with its caller", code, body)
	}
	// /metrics answers anyone, as without the admin API.
	if code, body, _ := f.do(t, "GET", "/metrics", "", "RemoteAddr", "10.1.2.3:5555"); code != 200 || !strings.Contains(body, "test_total") {
		t.Errorf("GET /metrics from 10.1.2.3 = %d %q", code, body)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestTokenFileRotates(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, file, "# operators\nalice:aaaaaaaaaaaaaaaaaaaa\nbbbbbbbbbbbbbbbbbbbb\n")
	f := newFixture(t, memstore.New(), Auth{TokenFile: file, Metrics: true})
	caller := func(tok string) (int, string) {
		code, body, _ := f.do(t, "GET", "/admin/extra", "", "Authorization", "Bearer "+tok, "RemoteAddr", "10.0.0.9:1")
		return code, body
	}
	if code, body := caller("aaaaaaaaaaaaaaaaaaaa"); code != 200 || body != "extra by alice" {
		t.Errorf("alice's token = %d %q", code, body)
	}
	if code, body := caller("bbbbbbbbbbbbbbbbbbbb"); code != 200 || body != "extra by line 3" {
		t.Errorf("the bare token = %d %q", code, body)
	}
	code, body, h := f.do(t, "GET", "/admin/v1/config", "")
	if code != http.StatusUnauthorized || h.Get("WWW-Authenticate") == "" || !strings.Contains(body, "Bearer") {
		t.Errorf("no token, from loopback = %d %q %v, want 401 with WWW-Authenticate", code, body, h)
	}
	if code, _ := caller("cccccccccccccccccccc"); code != http.StatusUnauthorized {
		t.Errorf("unknown token = %d, want 401", code)
	}
	if code, _, _ := f.do(t, "GET", "/metrics", "", "RemoteAddr", "10.0.0.9:1"); code != http.StatusUnauthorized {
		t.Errorf("/metrics with Auth.Metrics, no token = %d, want 401", code)
	}
	if code, _, _ := f.do(t, "GET", "/debug/pprof/cmdline", "", "RemoteAddr", "10.0.0.9:1"); code != http.StatusUnauthorized {
		t.Errorf("/debug/pprof without a token = %d, want 401", code)
	}

	// Rotation: alice's token is replaced; the old one stops working at
	// the next request.
	writeFile(t, file, "alice:dddddddddddddddddddd\n")
	if code, _ := caller("aaaaaaaaaaaaaaaaaaaa"); code != http.StatusUnauthorized {
		t.Errorf("alice's old token after rotation = %d, want 401", code)
	}
	if code, body := caller("dddddddddddddddddddd"); code != 200 || body != "extra by alice" {
		t.Errorf("alice's new token = %d %q", code, body)
	}
	// A file that does not load keeps the tokens in force, and says why.
	writeFile(t, file, "alice:short\n")
	if code, _ := caller("dddddddddddddddddddd"); code != 200 {
		t.Errorf("after a broken rewrite, the previous token = %d, want 200", code)
	}
	if !strings.Contains(f.log.String(), "shorter than 16 bytes") {
		t.Errorf("log does not tell the broken token file: %s", f.log)
	}
	// A file holding no token revokes them all.
	writeFile(t, file, "# revoked\n")
	if code, _ := caller("dddddddddddddddddddd"); code != http.StatusUnauthorized {
		t.Errorf("after revoking every token = %d, want 401", code)
	}
}

func TestParseTokens(t *testing.T) {
	tests := []struct {
		give string
		want string // error substring, "" for none
	}{
		{"a:0123456789abcdef\nb:0123456789abcdeg\n", ""},
		{":0123456789abcdef\n", "empty token name"},
		{"a:0123456789abcdef\na:0123456789abcdeg\n", "given twice"},
		{"a:0123 456789abcdef\n", "no blank"},
		{"a:" + strings.Repeat("x", MaxTokenLen+1), "longer than"},
		{strings.Repeat("0123456789abcdef0\n", MaxTokens+1), "more than 1000 tokens"},
	}
	for _, tt := range tests {
		_, err := parseTokens([]byte(tt.give))
		if got := ""; err != nil {
			got = err.Error()
			if tt.want == "" || !strings.Contains(got, tt.want) {
				t.Errorf("parseTokens(%.40q) = %v, want %q", tt.give, err, tt.want)
			}
		} else if tt.want != "" {
			t.Errorf("parseTokens(%.40q) = nil, want %q", tt.give, tt.want)
		}
	}
	big := filepath.Join(t.TempDir(), "big")
	writeFile(t, big, strings.Repeat("#", MaxTokenFileSize+1))
	if _, err := readTokens(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("readTokens(a file over the bound) = %v", err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	writeFile(t, empty, "# nothing\n")
	if _, err := New(Options{Auth: Auth{TokenFile: empty}}); err == nil {
		t.Error("New with a token file holding no token = nil error")
	}
}

func TestInspectResetMemstore(t *testing.T) {
	f := newFixture(t, memstore.New(), Auth{})
	user := engine.Entry{Key: "user", Value: "u1"}
	if got := decide(t, f.eng, 2, user); got != 2 {
		t.Fatalf("admitted %d of 2", got)
	}
	code, body, _ := f.do(t, "GET", "/admin/v1/inspect?domain=api&descriptor=user=u1", "")
	if code != 200 {
		t.Fatalf("inspect = %d %s", code, body)
	}
	out := decodeInspect(t, body)
	if len(out.Descriptors) != 1 || len(out.Descriptors[0].Rules) != 1 {
		t.Fatalf("inspect = %s, want one descriptor with one rule", body)
	}
	r := out.Descriptors[0].Rules[0]
	if r.Rule.Name != "per_user" || r.Rule.Rate != 3 || r.State.Remaining != 1 || r.State.Over || r.State.Limit != 3 || r.State.ResetAfterMS <= 0 {
		t.Errorf("inspect rule = %+v state %+v, want per_user, 1 of 3 remaining", r.Rule, r.State)
	}
	// Inspecting counts nothing: the third request is still admitted.
	for range 3 {
		f.do(t, "GET", "/admin/v1/inspect?domain=api&descriptor=user=u1", "")
	}
	if got := decide(t, f.eng, 2, user); got != 1 {
		t.Fatalf("after inspecting, admitted %d of 2, want 1 (the limit is 3)", got)
	}
	_, body, _ = f.do(t, "POST", "/admin/v1/inspect", `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}`)
	if st := decodeInspect(t, body).Descriptors[0].Rules[0].State; st.Remaining != 0 || !st.Over || st.RetryAfterMS <= 0 {
		t.Errorf("inspect when used up = %+v, want over, 0 remaining, a retry", st)
	}

	code, body, _ = f.do(t, "POST", "/admin/v1/reset?domain=api&descriptor=user=u1", "")
	if code != 200 || !strings.Contains(body, `"rule": "per_user"`) || !strings.Contains(body, `"by": "loopback"`) {
		t.Fatalf("reset = %d %s", code, body)
	}
	if !strings.Contains(f.log.String(), "admin reset") || !strings.Contains(f.log.String(), "by=loopback") || !strings.Contains(f.log.String(), "user=u1") {
		t.Errorf("reset log = %s", f.log)
	}
	if got := decide(t, f.eng, 4, user); got != 3 {
		t.Errorf("after reset, admitted %d of 4, want the full limit 3", got)
	}
	// Another user's counter was never touched.
	if got := decide(t, f.eng, 1, engine.Entry{Key: "user", Value: "u2"}); got != 1 {
		t.Errorf("u2 admitted %d of 1", got)
	}
}

func TestInspectRuleKinds(t *testing.T) {
	f := newFixture(t, memstore.New(), Auth{})
	decide(t, f.eng, 2, engine.Entry{Key: "plan", Value: "free"})
	_, body, _ := f.do(t, "GET", "/admin/v1/inspect?domain=api&descriptor=plan=free&descriptor=blocked=x&descriptor=open=y&descriptor=nothing=z&descriptor=trial=t", "")
	out := decodeInspect(t, body)
	if len(out.Descriptors) != 5 {
		t.Fatalf("inspect = %s", body)
	}
	free := out.Descriptors[0].Rules
	if len(free) != 2 || free[0].State.Remaining != 3 || free[1].State.Remaining != 48 || free[0].Key == free[1].Key && free[0].Rule.Period == free[1].Rule.Period {
		t.Errorf("plan=free rules = %s", body)
	}
	if b := out.Descriptors[1].Rules; len(b) != 1 || !b[0].Rule.Deny || !b[0].State.Over {
		t.Errorf("blocked = %+v, want a deny rule, over", b)
	}
	if u := out.Descriptors[2].Rules; len(u) != 1 || !u[0].Rule.Unlimited || u[0].State != nil {
		t.Errorf("open = %+v, want unlimited with no state", u)
	}
	if n := out.Descriptors[3]; !n.KnownDomain || len(n.Rules) != 0 {
		t.Errorf("nothing=z = %+v, want no rule", n)
	}
	if tr := out.Descriptors[4].Rules; len(tr) != 1 || !tr[0].Rule.ShadowMode || tr[0].State.Remaining != 2 {
		t.Errorf("trial = %+v, want a shadow rule with 2 remaining", tr)
	}
	_, body, _ = f.do(t, "GET", "/admin/v1/inspect?domain=other&descriptor=a=b", "")
	if d := decodeInspect(t, body).Descriptors[0]; d.KnownDomain {
		t.Errorf("unknown domain = %+v", d)
	}
}

func TestInspectResetKey(t *testing.T) {
	store := memstore.New()
	f := newFixture(t, store, Auth{})
	lim := sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 10, Period: time.Minute, Burst: 4}
	for range 3 {
		if _, err := store.AllowN(context.Background(), check.StoreKey("acct-7"), lim, 1); err != nil {
			t.Fatal(err)
		}
	}
	q := "key=acct-7&algorithm=token_bucket&rate=10&period=1m&burst=4"
	_, body, _ := f.do(t, "GET", "/admin/v1/inspect?"+q, "")
	out := decodeInspect(t, body)
	if out.Key != "acct-7" || out.State == nil || out.State.Remaining != 1 || out.State.Limit != 4 {
		t.Fatalf("inspect key = %s, want 1 of 4 remaining", body)
	}
	if code, body, _ := f.do(t, "POST", "/admin/v1/reset", `{"key":"acct-7","algorithm":"token_bucket","rate":10,"period":"1m","burst":4}`); code != 200 {
		t.Fatalf("reset key = %d %s", code, body)
	}
	d, err := store.AllowN(context.Background(), check.StoreKey("acct-7"), lim, 0)
	if err != nil || d.Remaining != 4 {
		t.Errorf("after reset: %+v %v, want 4 remaining", d, err)
	}
}

func TestInspectErrors(t *testing.T) {
	f := newFixture(t, memstore.New(), Auth{})
	tests := []struct {
		method, target, body string
		wantCode             int
		wantField            string
	}{
		{"GET", "/admin/v1/inspect?descriptor=a=b", "", 400, "domain"},
		{"GET", "/admin/v1/inspect?domain=api", "", 400, "descriptor"},
		{"GET", "/admin/v1/inspect?domain=api&descriptor=user", "", 400, "descriptor[0]"},
		{"GET", "/admin/v1/inspect?domain=api&descriptor=user=a,=b", "", 400, "descriptor[0]"},
		{"GET", "/admin/v1/inspect?domain=api&descriptor=" + strings.Repeat("a=b,", 17) + "c=d", "", 400, "descriptor[0]"},
		{"GET", "/admin/v1/inspect?domain=api" + strings.Repeat("&descriptor=a=b", 17), "", 400, "descriptor"},
		{"GET", "/admin/v1/inspect?domain=api&descriptor=a=" + strings.Repeat("x", sluice.MaxKeyLen), "", 400, "descriptor[0]"},
		{"GET", "/admin/v1/inspect?domain=api&descriptor=a=b&colour=red", "", 400, "colour"},
		{"GET", "/admin/v1/inspect?domain=api&domain=x&descriptor=a=b", "", 400, "domain"},
		{"GET", "/admin/v1/inspect?key=k&algorithm=leaky&rate=1&period=1s", "", 400, "algorithm"},
		{"GET", "/admin/v1/inspect?key=k&algorithm=gcra&rate=1", "", 400, "period"},
		{"GET", "/admin/v1/inspect?key=k&algorithm=gcra&rate=x&period=1s", "", 400, "rate"},
		{"GET", "/admin/v1/inspect?key=k&algorithm=gcra&rate=0&period=1s", "", 400, "rate"},
		{"GET", "/admin/v1/inspect?key=k&algorithm=gcra&rate=2000000000&period=1s", "", 400, "rate"},
		{"GET", "/admin/v1/inspect?algorithm=gcra&rate=1&period=1s", "", 400, "key"},
		{"GET", "/admin/v1/inspect?key=k&domain=api&algorithm=gcra&rate=1&period=1s", "", 400, "key"},
		{"GET", "/admin/v1/inspect?domain=api&descriptor=a=b&x=" + strings.Repeat("y", MaxQueryLen), "", 400, ""},
		{"POST", "/admin/v1/inspect", `{"domain":"api","descriptors":[{"entries":[]}]}`, 400, "descriptor[0]"},
		{"POST", "/admin/v1/inspect", `{"domain":"api","colour":1}`, 400, ""},
		{"POST", "/admin/v1/inspect", `{"domain":"api","descriptors":[{"entries":[{"key":"a","value":"` + strings.Repeat("x", MaxBodySize) + `"}]}]}`, 400, ""},
		{"POST", "/admin/v1/reset", `{"domain":"api"}`, 400, "descriptor"},
	}
	for _, tt := range tests {
		code, body, h := f.do(t, tt.method, tt.target, tt.body)
		var p struct{ Field, Detail string }
		json.Unmarshal([]byte(body), &p)
		if code != tt.wantCode || p.Field != tt.wantField || h.Get("Content-Type") != "application/problem+json" || p.Detail == "" {
			t.Errorf("%s %.80s %.60s = %d field %q (%s), want %d field %q", tt.method, tt.target, tt.body, code, p.Field, p.Detail, tt.wantCode, tt.wantField)
		}
	}
}

// plainStore is a store that cannot reset.
type plainStore struct{ sluice.Store }

func TestResetNotImplemented(t *testing.T) {
	f := newFixture(t, plainStore{memstore.New()}, Auth{})
	code, body, _ := f.do(t, "POST", "/admin/v1/reset?domain=api&descriptor=user=u1", "")
	if code != http.StatusNotImplemented || !strings.Contains(body, "admin.plainStore") {
		t.Errorf("reset on a store without Reset = %d %s, want 501 naming the store", code, body)
	}
}

func TestConfigEndpoint(t *testing.T) {
	f := newFixture(t, memstore.New(), Auth{})
	code, body, _ := f.do(t, "GET", "/admin/v1/config", "")
	var c configJSON
	if err := json.Unmarshal([]byte(body), &c); err != nil || code != 200 {
		t.Fatalf("config = %d %s %v", code, body, err)
	}
	if c.Source != "file" || c.Version != "abc123" || c.LoadedAt == nil || !c.LoadedAt.Equal(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)) || c.LastError != "" {
		t.Errorf("config info = %+v", c)
	}
	if len(c.Domains) != 1 || c.Domains[0] != "api" || len(c.Rules) != 6 {
		t.Errorf("config domains %v, %d rules, want [api] and 6: %s", c.Domains, len(c.Rules), body)
	}
	var pu *ruleJSON
	for i := range c.Rules {
		if c.Rules[i].Name == "per_user" {
			pu = &c.Rules[i]
		}
	}
	if pu == nil || pu.Rate != 3 || pu.Period != "1m0s" || pu.Algorithm != "fixed_window" || pu.Unit != "MINUTE" {
		t.Errorf("per_user = %+v", pu)
	}
	f.cfg.Failed(os.ErrNotExist, time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC))
	_, body, _ = f.do(t, "GET", "/admin/v1/config", "")
	json.Unmarshal([]byte(body), &c)
	if c.LastError != "file does not exist" || c.Version != "abc123" || c.LastErrorAt == nil {
		t.Errorf("after a failed reload: %+v", c)
	}
	f.cfg.Loaded("file", "def456", time.Now())
	c = configJSON{}
	_, body, _ = f.do(t, "GET", "/admin/v1/config", "")
	json.Unmarshal([]byte(body), &c)
	if c.LastError != "" || c.Version != "def456" {
		t.Errorf("after a good reload: %+v", c)
	}
}

func TestNewRejectsTakenRoute(t *testing.T) {
	cfg, _ := config.Parse("t.yaml", []byte(testYAML))
	st := memstore.New()
	_, err := New(Options{Engine: engine.New(st, cfg), Store: st, Routes: map[string]http.Handler{"GET /admin/v1/config": http.NotFoundHandler()}})
	if err == nil {
		t.Error("New with a route taking /admin/v1/config = nil error")
	}
}

func TestUnknownRouteProblems(t *testing.T) {
	f := newFixture(t, memstore.New(), Auth{})
	code, body, h := f.do(t, "GET", "/admin/v1/reset?domain=api&descriptor=a=b", "")
	if code != http.StatusMethodNotAllowed || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(h.Get("Allow"), "POST") || !strings.Contains(body, "GET is not allowed") {
		t.Errorf("GET /admin/v1/reset = %d %v %s, want 405 problem+json with Allow", code, h, body)
	}
	code, body, h = f.do(t, "GET", "/admin/v1/nothing", "")
	if code != http.StatusNotFound || h.Get("Content-Type") != "application/problem+json" {
		t.Errorf("GET /admin/v1/nothing = %d %v %s, want 404 problem+json", code, h, body)
	}
	// Unknown paths are behind the authentication too.
	if code, _, _ := f.do(t, "GET", "/admin/v1/nothing", "", "RemoteAddr", "10.9.9.9:1"); code != http.StatusForbidden {
		t.Errorf("GET /admin/v1/nothing from 10.9.9.9 = %d, want 403", code)
	}
}

// TestResetUnsupportedLayer checks that a wrapper whose shared store cannot
// reset answers 501 too, naming the store.
func TestResetUnsupportedLayer(t *testing.T) {
	s, err := stack.New(plainStore{memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := newFixture(t, s, Auth{})
	code, body, _ := f.do(t, "POST", "/admin/v1/reset?domain=api&descriptor=user=u1", "")
	if code != http.StatusNotImplemented || !strings.Contains(body, "admin.plainStore") {
		t.Errorf("reset through a stack over a store without Reset = %d %s, want 501 naming the store", code, body)
	}
}
