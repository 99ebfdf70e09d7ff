package httplimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

func okHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})
}

// get sends a GET with the given headers and returns the response with
// its body read.
func get(t *testing.T, c *http.Client, url string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

var rateHeaders = []string{
	"Status", httplimit.HeaderRateLimitPolicy, httplimit.HeaderRateLimit,
	httplimit.HeaderLimit, httplimit.HeaderRemaining, httplimit.HeaderReset,
	httplimit.HeaderRetryAfter, "Content-Type",
}

func headerMap(resp *http.Response) map[string]string {
	m := map[string]string{}
	for _, h := range rateHeaders {
		if h == "Status" {
			m[h] = strconv.Itoa(resp.StatusCode)
		} else if v := resp.Header.Get(h); v != "" {
			m[h] = v
		}
	}
	return m
}

// TestMiddlewareHeaders checks every header against decisions computed by
// hand: two fixed windows (2 per second, 5 per day) on an API key, with
// the store's clock 250 ms into a second and into a UTC day.
func TestMiddlewareHeaders(t *testing.T) {
	clock := newClock(t0)
	lim := sluice.New(newMemStore(t, memstoreClock(clock)))
	mw, err := httplimit.New(lim, []httplimit.Policy{
		{Name: "per-second", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Second}},
		{Name: "per-day", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: 24 * time.Hour}},
	}, httplimit.WithKey(httplimit.Header("X-API-Key")))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(okHandler()))
	defer srv.Close()

	const policy = `"per-second";q=2;w=1, "per-day";q=5;w=86400`
	const problem = "application/problem+json"
	tests := []struct {
		advance time.Duration
		key     string
		want    map[string]string
		wantPol string // violated policy in the problem body
	}{
		{key: "k1", want: map[string]string{"Status": "200", "RateLimit-Policy": policy,
			"RateLimit":         `"per-second";r=1;t=1, "per-day";r=4;t=86400`,
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "1", "Content-Type": "text/plain; charset=utf-8"}},
		{key: "k1", want: map[string]string{"Status": "200", "RateLimit-Policy": policy,
			"RateLimit":         `"per-second";r=0;t=1, "per-day";r=3;t=86400`,
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1", "Content-Type": "text/plain; charset=utf-8"}},
		{key: "k1", wantPol: "per-second", want: map[string]string{"Status": "429", "RateLimit-Policy": policy,
			"RateLimit":         `"per-second";r=0;t=1, "per-day";r=3;t=86400`,
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1", "Retry-After": "1", "Content-Type": problem}},
		{advance: time.Second, key: "k1", want: map[string]string{"Status": "200", "RateLimit-Policy": policy,
			"RateLimit":         `"per-second";r=1;t=1, "per-day";r=2;t=86399`,
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "1", "Content-Type": "text/plain; charset=utf-8"}},
		{key: "k1", want: map[string]string{"Status": "200", "RateLimit-Policy": policy,
			"RateLimit":         `"per-second";r=0;t=1, "per-day";r=1;t=86399`,
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1", "Content-Type": "text/plain; charset=utf-8"}},
		{advance: time.Second, key: "k1", want: map[string]string{"Status": "200", "RateLimit-Policy": policy,
			"RateLimit":         `"per-second";r=1;t=1, "per-day";r=0;t=86398`,
			"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "86398", "Content-Type": "text/plain; charset=utf-8"}},
		{key: "k1", wantPol: "per-day", want: map[string]string{"Status": "429", "RateLimit-Policy": policy,
			"RateLimit":         `"per-second";r=1;t=1, "per-day";r=0;t=86398`,
			"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "86398", "Retry-After": "86398", "Content-Type": problem}},
		// The per-day denial counted nothing in per-second: one is left.
		{key: "k1", wantPol: "per-day", want: map[string]string{"Status": "429", "RateLimit-Policy": policy,
			"RateLimit":         `"per-second";r=1;t=1, "per-day";r=0;t=86398`,
			"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "86398", "Retry-After": "86398", "Content-Type": problem}},
		{key: "k2", want: map[string]string{"Status": "200", "RateLimit-Policy": policy,
			"RateLimit":         `"per-second";r=1;t=1, "per-day";r=4;t=86398`,
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "1", "Content-Type": "text/plain; charset=utf-8"}},
	}
	for i, tt := range tests {
		clock.Advance(tt.advance)
		resp, body := get(t, srv.Client(), srv.URL, "X-API-Key", tt.key)
		if diff := cmp.Diff(tt.want, headerMap(resp)); diff != "" {
			t.Errorf("step %d (key %s, at %v): headers (-want +got):\n%s", i, tt.key, clock.Now().Format("15:04:05.000"), diff)
		}
		checkDraftSyntax(t, resp.Header, []string{"per-second", "per-day"})
		if tt.wantPol == "" {
			continue
		}
		var p map[string]any
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatalf("step %d: problem body %q: %v", i, body, err)
		}
		ra, _ := strconv.Atoi(tt.want["Retry-After"])
		want := map[string]any{
			"type":        httplimit.ProblemTypeQuotaExceeded,
			"title":       "Too Many Requests",
			"status":      float64(429),
			"policy":      tt.wantPol,
			"retry_after": float64(ra),
		}
		delete(p, "detail")
		if diff := cmp.Diff(want, p); diff != "" {
			t.Errorf("step %d: problem body (-want +got):\n%s", i, diff)
		}
	}
}

// checkDraftSyntax parses both draft-11 fields with the test's own RFC 8941
// parser and checks their shape: one member per policy, in order, named by
// an sf-string, with integer q, w (>0), r and t (>=0) and nothing else but
// an optional sf-binary pk.
func checkDraftSyntax(t *testing.T, h http.Header, names []string) {
	t.Helper()
	for _, f := range []struct {
		field string
		keys  []string
	}{{httplimit.HeaderRateLimitPolicy, []string{"q", "w"}}, {httplimit.HeaderRateLimit, []string{"r", "t"}}} {
		items, err := parseSFList(h.Get(f.field))
		if err != nil {
			t.Errorf("%s: %q is not an RFC 8941 list: %v", f.field, h.Get(f.field), err)
			continue
		}
		if len(items) != len(names) {
			t.Errorf("%s: %d members, want %d", f.field, len(items), len(names))
			continue
		}
		for i, it := range items {
			if it.Value != names[i] {
				t.Errorf("%s member %d: item %#v, want the sf-string %q", f.field, i, it.Value, names[i])
			}
			var keys []string
			for _, p := range it.Params {
				keys = append(keys, p.Key)
				switch v := p.Value.(type) {
				case int64:
					if v < 0 || (f.keys[0] == "q" && v == 0) {
						t.Errorf("%s member %d: %s=%d", f.field, i, p.Key, v)
					}
				case []byte:
					if p.Key != "pk" {
						t.Errorf("%s member %d: %s is a byte sequence", f.field, i, p.Key)
					}
				default:
					t.Errorf("%s member %d: %s=%#v is not an integer", f.field, i, p.Key, v)
				}
			}
			if len(keys) > 2 && keys[2] == "pk" {
				keys = keys[:2]
			}
			if diff := cmp.Diff(f.keys, keys); diff != "" {
				t.Errorf("%s member %d: parameters (-want +got):\n%s", f.field, i, diff)
			}
		}
	}
}

func TestMiddlewarePartitionKey(t *testing.T) {
	lim := sluice.New(newMemStore(t, memstoreClock(newClock(t0))))
	mw, err := httplimit.New(lim, []httplimit.Policy{
		{Name: `odd "name"`, Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Minute}},
	}, httplimit.WithKey(httplimit.Header("X-Tenant")), httplimit.WithPartitionKey(httplimit.HashPartitionKey),
		httplimit.WithHeaders(httplimit.DraftHeaders))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(okHandler()))
	defer srv.Close()
	resp, _ := get(t, srv.Client(), srv.URL, "X-Tenant", "acme")
	pk := httplimit.HashPartitionKey(`odd "name"`, "acme")
	b64 := ":" + encodeB64(pk) + ":"
	want := map[string]string{
		"Status":           "200",
		"Content-Type":     "text/plain; charset=utf-8",
		"RateLimit-Policy": `"odd \"name\"";q=10;w=60;pk=` + b64,
		"RateLimit":        `"odd \"name\"";r=9;t=60;pk=` + b64, // 59.75 s rounds up
	}
	if diff := cmp.Diff(want, headerMap(resp)); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	for _, f := range []string{httplimit.HeaderRateLimitPolicy, httplimit.HeaderRateLimit} {
		items, err := parseSFList(resp.Header.Get(f))
		if err != nil || len(items) != 1 {
			t.Fatalf("%s: %v, %d items", f, err, len(items))
		}
		got, _ := items[0].param("pk")
		if !bytes.Equal(got.([]byte), pk) {
			t.Errorf("%s: pk = %x, want %x", f, got, pk)
		}
		if items[0].Value != `odd "name"` {
			t.Errorf("%s: name = %#v", f, items[0].Value)
		}
	}
}

func TestMiddlewareNoKey(t *testing.T) {
	policies := []httplimit.Policy{{Name: "tenant", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Minute}}}
	t.Run("400", func(t *testing.T) {
		var events []httplimit.Event
		mw, err := httplimit.New(sluice.New(newMemStore(t)), policies,
			httplimit.WithKey(httplimit.Header("X-Tenant")),
			httplimit.WithObserver(httplimit.ObserverFunc(func(e httplimit.Event) { events = append(events, e) })))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mw.Handler(okHandler()))
		defer srv.Close()
		for range 2 {
			resp, body := get(t, srv.Client(), srv.URL)
			var p httplimit.Problem
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprintf("%d %s %+v", resp.StatusCode, resp.Header.Get("Content-Type"), p)
			want := "400 application/problem+json {Type:about:blank Title:Bad Request Status:400 Detail:No rate-limit key: header X-Tenant is missing or empty Policy: RetryAfter:0}"
			if got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		}
		if len(events) != 2 || events[0].Outcome != httplimit.NoKey || !errors.Is(events[0].Err, httplimit.ErrNoKey) {
			t.Errorf("events = %+v, want 2 NoKey", events)
		}
	})
	t.Run("default key", func(t *testing.T) {
		mw, err := httplimit.New(sluice.New(newMemStore(t)), policies,
			httplimit.WithKey(httplimit.Header("X-Tenant")), httplimit.WithDefaultKey("anonymous"))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mw.Handler(okHandler()))
		defer srv.Close()
		var got []int
		for _, tenant := range []string{"", "", "acme"} {
			resp, _ := get(t, srv.Client(), srv.URL, "X-Tenant", tenant)
			got = append(got, resp.StatusCode)
		}
		// Anonymous requests share one quota; acme has its own.
		if diff := cmp.Diff([]int{200, 429, 200}, got); diff != "" {
			t.Errorf("statuses (-want +got):\n%s", diff)
		}
	})
}

func TestMiddlewareStoreError(t *testing.T) {
	policies := []httplimit.Policy{{Name: "p", Limit: sluice.PerSecond(1)}, {Name: "q", Limit: sluice.PerMinute(1)}}
	tests := []struct {
		name       string
		opts       []httplimit.Option
		wantStatus int
		wantBody   string
	}{
		{"default", nil, 503, `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"The rate limit could not be decided; try again later."}` + "\n"},
		{"fail open", []httplimit.Option{httplimit.WithFailOpen()}, 200, "ok"},
		{"handler", []httplimit.Option{httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			w.WriteHeader(http.StatusTeapot)
			fmt.Fprint(w, errors.Is(err, errDown))
		})}, 418, "true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var outcome httplimit.Outcome
			opts := append(tt.opts, httplimit.WithObserver(httplimit.ObserverFunc(func(e httplimit.Event) { outcome = e.Outcome })))
			mw, err := httplimit.New(sluice.New(errStore{}), policies, opts...)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(mw.Handler(okHandler()))
			defer srv.Close()
			resp, body := get(t, srv.Client(), srv.URL)
			if resp.StatusCode != tt.wantStatus || string(body) != tt.wantBody || outcome != httplimit.Failed {
				t.Errorf("got %d %q (%v), want %d %q (failed)", resp.StatusCode, body, outcome, tt.wantStatus, tt.wantBody)
			}
		})
	}
}

func TestMiddlewareSkipDenyObserver(t *testing.T) {
	var mu sync.Mutex
	var events []string
	obs := httplimit.ObserverFunc(func(e httplimit.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e.Outcome.String()+":"+e.Policy)
	})
	mw, err := httplimit.New(sluice.New(newMemStore(t, memstoreClock(newClock(t0)))),
		[]httplimit.Policy{
			{Name: "global", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Second}, Key: httplimit.Constant("all")},
			{Name: "ip", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Second}},
			// Applies to /admin only.
			{Name: "admin", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: time.Second},
				Match: func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/admin") }},
		},
		httplimit.WithSkipPaths("/healthz"),
		httplimit.WithObserver(obs),
		httplimit.WithHeaders(httplimit.NoHeaders),
		httplimit.WithDenyHandler(func(w http.ResponseWriter, r *http.Request, d httplimit.Denial) {
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprintf(w, "custom %s %v %d", d.Policy, d.RetryAfter, len(d.Decisions))
		}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(okHandler()))
	defer srv.Close()
	var got []string
	for _, path := range []string{"/healthz", "/admin/x", "/healthz", "/", "/admin/y"} {
		resp, body := get(t, srv.Client(), srv.URL+path)
		got = append(got, fmt.Sprintf("%s %d %s %q %q", path, resp.StatusCode, body, resp.Header.Get(httplimit.HeaderRetryAfter), resp.Header.Get(httplimit.HeaderRateLimit)))
	}
	want := []string{
		`/healthz 200 ok "" ""`,
		`/admin/x 200 ok "" ""`,
		`/healthz 200 ok "" ""`,
		`/ 429 custom ip 750ms 2 "1" ""`,
		`/admin/y 429 custom ip 750ms 3 "1" ""`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("responses (-want +got):\n%s", diff)
	}
	wantEvents := []string{"skipped:", "allowed:", "skipped:", "denied:ip", "denied:ip"}
	if diff := cmp.Diff(wantEvents, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestMiddlewareRoutes(t *testing.T) {
	type tenantKey struct{}
	withTenant := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, r.Header.Get("X-Tenant"))))
		})
	}
	lim := sluice.New(newMemStore(t, memstoreClock(newClock(t0))))
	pol := []httplimit.Policy{{Name: "route", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Minute}}}

	// Outside the mux: RouteOf finds the pattern; tenant from the context.
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", okHandler())
	mux.Handle("GET /users/{id}", okHandler())
	outer, err := httplimit.New(lim, pol, httplimit.WithKey(httplimit.Join(httplimit.FromContext(tenantKey{}), httplimit.RouteOf(mux))))
	if err != nil {
		t.Fatal(err)
	}
	// Inside the mux: Route reads Request.Pattern.
	mux2 := http.NewServeMux()
	inner, err := httplimit.New(lim, []httplimit.Policy{{Name: "inner", Limit: pol[0].Limit}}, httplimit.WithKey(httplimit.Route()))
	if err != nil {
		t.Fatal(err)
	}
	mux2.Handle("GET /a/{id}", inner.Handler(okHandler()))
	mux2.Handle("/", withTenant(outer.Handler(mux)))
	srv := httptest.NewServer(mux2)
	defer srv.Close()

	var got []string
	for _, rq := range []struct{ path, tenant string }{
		{"/items/1", "acme"}, {"/items/2", "acme"}, {"/users/1", "acme"}, {"/items/1", "umbrella"},
		{"/nowhere", "acme"}, {"/a/1", ""}, {"/a/2", ""},
	} {
		resp, _ := get(t, srv.Client(), srv.URL+rq.path, "X-Tenant", rq.tenant)
		got = append(got, fmt.Sprintf("%s %s %d", rq.tenant, rq.path, resp.StatusCode))
	}
	want := []string{
		"acme /items/1 200", "acme /items/2 429", "acme /users/1 200", "umbrella /items/1 200",
		"acme /nowhere 400", " /a/1 200", " /a/2 429",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestJoinIsInjective(t *testing.T) {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	join := func(a, b string) string {
		k, err := httplimit.Join(httplimit.Constant(a), httplimit.Constant(b))(req)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	pairs := [][2]string{{"a|b", "c"}, {"a", "b|c"}, {`a\`, "|c"}, {`a\|`, "c"}, {"a", `\|c`}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		k := join(p[0], p[1])
		if q, ok := seen[k]; ok {
			t.Errorf("Join(%q, %q) = Join(%q, %q) = %q", p[0], p[1], q[0], q[1], k)
		}
		seen[k] = p
	}
	if got, want := join("acme", "GET /items/{id}"), "acme|GET /items/{id}"; got != want {
		t.Errorf("Join = %q, want %q", got, want)
	}
}

func TestNewErrors(t *testing.T) {
	good := sluice.PerSecond(1)
	mem := sluice.New(newMemStore(t))
	tests := []struct {
		name     string
		lim      *sluice.Limiter
		policies []httplimit.Policy
		want     string
	}{
		{"nil limiter", nil, []httplimit.Policy{{Name: "a", Limit: good}}, "httplimit: New: Limiter is nil"},
		{"no policy", mem, nil, "httplimit: New: no policy"},
		{"unnamed", mem, []httplimit.Policy{{Limit: good}}, "httplimit: policy 0: name is empty"},
		{"bad name", mem, []httplimit.Policy{{Name: "é", Limit: good}}, `httplimit: policy 0: name "é" has byte 0xc3 at 0; want printable ASCII`},
		{"duplicate", mem, []httplimit.Policy{{Name: "a", Limit: good}, {Name: "a", Limit: good}}, `httplimit: policy 1: name "a" is used twice`},
		{"invalid limit", mem, []httplimit.Policy{{Name: "a", Limit: sluice.Limit{Algorithm: sluice.GCRA, Period: time.Second}}}, `httplimit: policy "a": sluice: invalid limit: Rate 0 must be > 0`},
		{"no multi", sluice.New(singleStore{newMemStore(t)}), []httplimit.Policy{{Name: "a", Limit: good}, {Name: "b", Limit: good}},
			"httplimit: New: 2 policies need a store that decides them together (AllowMulti), and httplimit_test.singleStore cannot: sluice: store does not support AllowMulti: httplimit_test.singleStore"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := httplimit.New(tt.lim, tt.policies)
			if err == nil || err.Error() != tt.want {
				t.Errorf("New() error = %v, want %s", err, tt.want)
			}
		})
	}
	// One policy on a store without AllowMulti is fine: it uses AllowN.
	mw, err := httplimit.New(sluice.New(singleStore{newMemStore(t)}), []httplimit.Policy{{Name: "a", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(okHandler()))
	defer srv.Close()
	r1, _ := get(t, srv.Client(), srv.URL)
	r2, _ := get(t, srv.Client(), srv.URL)
	if r1.StatusCode != 200 || r2.StatusCode != 429 {
		t.Errorf("statuses %d, %d; want 200, 429", r1.StatusCode, r2.StatusCode)
	}
}

func TestNewInvalidOptions(t *testing.T) {
	mem := sluice.New(newMemStore(t))
	policies := []httplimit.Policy{{Name: "a", Limit: sluice.PerSecond(1)}}
	tests := []struct {
		name string
		give httplimit.Option
		want string
	}{
		{"nil key", httplimit.WithKey(nil), "httplimit: New: WithKey: nil"},
		{"empty default key", httplimit.WithDefaultKey(""), "httplimit: New: WithDefaultKey: empty key"},
		{"unknown headers", httplimit.WithHeaders(httplimit.AllHeaders | 4), "httplimit: New: WithHeaders: unknown headers 0x4"},
		{"nil partition key", httplimit.WithPartitionKey(nil), "httplimit: New: WithPartitionKey: nil"},
		{"nil skip", httplimit.WithSkip(nil), "httplimit: New: WithSkip: nil"},
		{"nil deny handler", httplimit.WithDenyHandler(nil), "httplimit: New: WithDenyHandler: nil"},
		{"nil key error handler", httplimit.WithKeyErrorHandler(nil), "httplimit: New: WithKeyErrorHandler: nil"},
		{"nil error handler", httplimit.WithErrorHandler(nil), "httplimit: New: WithErrorHandler: nil"},
		{"nil observer", httplimit.WithObserver(nil), "httplimit: New: WithObserver: nil"},
		{"nil logger", httplimit.WithLogger(nil), "httplimit: New: WithLogger: nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mw, err := httplimit.New(mem, policies, tt.give)
			if err == nil || err.Error() != tt.want {
				t.Errorf("New(%s) = %v, %v; want error %s", tt.name, mw, err, tt.want)
			}
		})
	}
	if _, err := httplimit.New(mem, policies, httplimit.WithHeaders(httplimit.NoHeaders), httplimit.WithSkipPaths()); err != nil {
		t.Errorf("New(NoHeaders, no skipped path) = %v, want no error", err)
	}
}

func TestLongKeyIsHashed(t *testing.T) {
	mw, err := httplimit.New(sluice.New(newMemStore(t)), []httplimit.Policy{{Name: "k", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Minute}}},
		httplimit.WithKey(httplimit.Header("X-API-Key")))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(okHandler()))
	defer srv.Close()
	long := strings.Repeat("k", 4000)
	r1, _ := get(t, srv.Client(), srv.URL, "X-API-Key", long)
	r2, _ := get(t, srv.Client(), srv.URL, "X-API-Key", long)
	r3, _ := get(t, srv.Client(), srv.URL, "X-API-Key", long+"x")
	if r1.StatusCode != 200 || r2.StatusCode != 429 || r3.StatusCode != 200 {
		t.Errorf("statuses %d, %d, %d; want 200, 429, 200", r1.StatusCode, r2.StatusCode, r3.StatusCode)
	}
}

// TestMiddlewareConcurrentAllOrNothing: 60 concurrent requests from three
// tenants against a per-tenant limit of 10 and a global limit of 25, both
// per minute. Exactly 25 are served, no tenant more than 10, and since a
// denial counts nothing, the counts in the store match what was served.
func TestMiddlewareConcurrentAllOrNothing(t *testing.T) {
	clock := newClock(t0)
	lim := sluice.New(newMemStore(t, memstoreClock(clock)))
	window := func(rate int) sluice.Limit {
		return sluice.Limit{Algorithm: sluice.FixedWindow, Rate: rate, Period: time.Minute}
	}
	mw, err := httplimit.New(lim, []httplimit.Policy{
		{Name: "tenant", Limit: window(10), Key: httplimit.Header("X-Tenant")},
		{Name: "global", Limit: window(25), Key: httplimit.Constant("all")},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(okHandler()))
	defer srv.Close()
	var mu sync.Mutex
	served := map[string]int{}
	var wg sync.WaitGroup
	for i := range 60 {
		tenant := []string{"a", "b", "c"}[i%3]
		wg.Go(func() {
			resp, _ := get(t, srv.Client(), srv.URL, "X-Tenant", tenant)
			if resp.StatusCode == 200 {
				mu.Lock()
				served[tenant]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	total := 0
	for tenant, n := range served {
		total += n
		if n > 10 {
			t.Errorf("tenant %s served %d, more than its 10", tenant, n)
		}
		// The store counted exactly what was served for the tenant.
		d, err := lim.AllowN(context.Background(), "tenant:"+tenant, window(10), 0)
		if err != nil || d.Remaining != 10-n {
			t.Errorf("tenant %s: store has %d remaining, %v; want %d", tenant, d.Remaining, err, 10-n)
		}
	}
	if total != 25 {
		t.Errorf("served %d in all (%v), want 25", total, served)
	}
	d, _ := lim.AllowN(context.Background(), "global:all", window(25), 0)
	if d.Remaining != 0 {
		t.Errorf("global remaining %d, want 0", d.Remaining)
	}
}
