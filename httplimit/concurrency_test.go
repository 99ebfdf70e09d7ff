package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// watchedSem wraps a Semaphore and reports each completed Release, and
// counts Extends; extendErr, when set, replaces every Extend's answer.
type watchedSem struct {
	sluice.Semaphore
	released  chan string
	extends   atomic.Int32
	extendErr error
}

func newWatched(s sluice.Semaphore) *watchedSem {
	return &watchedSem{Semaphore: s, released: make(chan string, 64)}
}

func (w *watchedSem) Release(ctx context.Context, key, holder string) error {
	err := w.Semaphore.Release(ctx, key, holder)
	if ctx.Err() != nil {
		err = errors.Join(err, errors.New("released on a canceled context"))
	}
	w.released <- key
	return err
}

func (w *watchedSem) Extend(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	w.extends.Add(1)
	if w.extendErr != nil {
		return sluice.PermitDecision{}, w.extendErr
	}
	return w.Semaphore.Extend(ctx, key, lim, holder)
}

// waitReleased waits, bounded, for one Release of key.
func (w *watchedSem) waitReleased(t *testing.T, key string) {
	t.Helper()
	select {
	case k := <-w.released:
		if k != key {
			t.Fatalf("released %q, want %q", k, key)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no release of %q within 5 s", key)
	}
}

// heldProbe counts the permits of key held in s by acquiring with a fresh
// holder, and releasing that permit again.
func heldProbe(t *testing.T, s sluice.Semaphore, key string, lim sluice.ConcurrencyLimit) int {
	t.Helper()
	h := sluice.NewHolder()
	d, err := s.Acquire(context.Background(), key, lim, h)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Acquired {
		return d.Held
	}
	if err := s.Release(context.Background(), key, h); err != nil {
		t.Fatal(err)
	}
	return d.Held - 1
}

// assertHeld checks both memstore's count and an Acquire probe.
func assertHeld(t *testing.T, s *memstore.Store, key string, lim sluice.ConcurrencyLimit, want int) {
	t.Helper()
	if got := s.Held(key); got != want {
		t.Errorf("memstore Held(%q) = %d, want %d", key, got, want)
	}
	if got := heldProbe(t, s, key, lim); got != want {
		t.Errorf("Acquire probe of %q: %d held, want %d", key, got, want)
	}
}

var tenant = httplimit.Header("X-Tenant")

func newConcurrency(t *testing.T, sem sluice.Semaphore, lim sluice.ConcurrencyLimit, opts ...httplimit.ConcurrencyOption) *httplimit.Concurrency {
	t.Helper()
	c, err := httplimit.NewConcurrency(sem, "inflight", lim, append([]httplimit.ConcurrencyOption{httplimit.WithConcurrencyKey(tenant)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func tenantReq(ctx context.Context, url, tenant string) *http.Request {
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	r.Header.Set("X-Tenant", tenant)
	return r
}

func TestConcurrencyReleasesOnReturn(t *testing.T) {
	s := newMemStore(t)
	w := newWatched(s)
	lim := sluice.ConcurrencyLimit{Max: 2, TTL: 10 * time.Second}
	var during int
	h := newConcurrency(t, w, lim).Handler(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		during = s.Held("inflight:acme")
		io.WriteString(rw, "ok")
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, tenantReq(context.Background(), "/", "acme"))
	if rec.Code != 200 || rec.Body.String() != "ok" {
		t.Fatalf("got %d %q", rec.Code, rec.Body)
	}
	if during != 1 {
		t.Errorf("held during the handler = %d, want 1", during)
	}
	w.waitReleased(t, "inflight:acme")
	assertHeld(t, s, "inflight:acme", lim, 0)
}

func TestConcurrencyDenial(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []httplimit.ConcurrencyOption
		status int
		typ    string
	}{
		{"429", nil, 429, httplimit.ProblemTypeQuotaExceeded},
		{"503", []httplimit.ConcurrencyOption{httplimit.WithConcurrencyStatus(503)}, 503, "about:blank"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock(t0)
			s := newMemStore(t, memstoreClock(clk))
			lim := sluice.ConcurrencyLimit{Max: 1, TTL: 2500 * time.Millisecond}
			// One permit held by another replica, acquired 1 s ago.
			if d, err := s.Acquire(context.Background(), "inflight:acme", lim, "other"); err != nil || !d.Acquired {
				t.Fatal(d, err)
			}
			clk.Advance(time.Second)
			served := false
			h := newConcurrency(t, s, lim, tc.opts...).Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served = true }))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, tenantReq(context.Background(), "/", "acme"))
			if served {
				t.Fatal("denied request was served")
			}
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d", rec.Code, tc.status)
			}
			if got := rec.Header().Get("Retry-After"); got != "2" { // 1.5 s left, rounded up
				t.Errorf("Retry-After %q, want 2", got)
			}
			if got := rec.Header().Get("Content-Type"); got != httplimit.ContentTypeProblem {
				t.Errorf("Content-Type %q", got)
			}
			var p httplimit.Problem
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
			want := httplimit.Problem{Type: tc.typ, Title: http.StatusText(tc.status), Status: tc.status,
				Detail: `Limit "inflight" allows 1 requests at once; retry in 2 s.`, Policy: "inflight", RetryAfter: 2}
			if p != want {
				t.Errorf("problem\n got %+v\nwant %+v", p, want)
			}
			// Another tenant is not limited by acme's permit.
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, tenantReq(context.Background(), "/", "globex"))
			if !served || rec.Code != 200 {
				t.Errorf("other tenant: served %v, status %d", served, rec.Code)
			}
			assertHeld(t, s, "inflight:acme", lim, 1)
			assertHeld(t, s, "inflight:globex", lim, 0)
		})
	}
}

func TestConcurrencyRetryAfterAtLeastOne(t *testing.T) {
	clk := newClock(t0)
	s := newMemStore(t, memstoreClock(clk))
	lim := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
	s.Acquire(context.Background(), "inflight:acme", lim, "other")
	clk.Advance(999 * time.Millisecond)
	rec := httptest.NewRecorder()
	newConcurrency(t, s, lim).Handler(http.NotFoundHandler()).ServeHTTP(rec, tenantReq(context.Background(), "/", "acme"))
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("status %d Retry-After %q, want 429 and 1", rec.Code, rec.Header().Get("Retry-After"))
	}
}

func TestConcurrencyReleasesOnPanic(t *testing.T) {
	s := newMemStore(t)
	w := newWatched(s)
	lim := sluice.ConcurrencyLimit{Max: 1, TTL: 10 * time.Second}
	h := newConcurrency(t, w, lim).Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("boom")
	}))
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want the handler's panic", v)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), tenantReq(context.Background(), "/", "acme"))
		t.Error("the panic did not propagate")
	}()
	w.waitReleased(t, "inflight:acme")
	assertHeld(t, s, "inflight:acme", lim, 0)

	// Through a real server, whose recovery logs the panic: the slot is
	// free for the next request.
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = newDiscardLog()
	srv.Start()
	defer srv.Close()
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("X-Tenant", "acme")
		if _, err := srv.Client().Do(req); err == nil {
			t.Error("a panicking handler answered")
		}
		w.waitReleased(t, "inflight:acme")
	}
	assertHeld(t, s, "inflight:acme", lim, 0)
}

func TestConcurrencyReleasesOnHandlerTimeout(t *testing.T) {
	s := newMemStore(t)
	w := newWatched(s)
	lim := sluice.ConcurrencyLimit{Max: 1, TTL: 10 * time.Second}
	stopped := make(chan error, 1)
	inner := newConcurrency(t, w, lim).Handler(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		stopped <- r.Context().Err()
	}))
	h := http.TimeoutHandler(inner, 20*time.Millisecond, "too slow")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, tenantReq(context.Background(), "/", "acme"))
	if rec.Code != 503 || rec.Body.String() != "too slow" {
		t.Fatalf("got %d %q, want the timeout's 503", rec.Code, rec.Body)
	}
	if err := <-stopped; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("handler's context: %v", err)
	}
	w.waitReleased(t, "inflight:acme")
	assertHeld(t, s, "inflight:acme", lim, 0)
}

func TestConcurrencyReleasesOnClientDisconnect(t *testing.T) {
	s := newMemStore(t)
	w := newWatched(s)
	lim := sluice.ConcurrencyLimit{Max: 1, TTL: 10 * time.Second}
	started := make(chan struct{})
	stopped := make(chan error, 1)
	h := newConcurrency(t, w, lim).Handler(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.WriteHeader(200)
		rw.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
		stopped <- r.Context().Err()
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	req.Header.Set("X-Tenant", "acme")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if got := s.Held("inflight:acme"); got != 1 {
		t.Errorf("held mid-request = %d, want 1", got)
	}
	cancel() // the client goes away mid-response
	resp.Body.Close()
	select {
	case err := <-stopped:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("handler's context: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context was not canceled by the disconnect")
	}
	w.waitReleased(t, "inflight:acme")
	assertHeld(t, s, "inflight:acme", lim, 0)
}

func TestConcurrencyExtendsLongRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.WithSweepInterval(0))
		defer s.Close()
		w := newWatched(s)
		lim := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
		var heldLate int
		h := newConcurrency(t, w, lim).Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			time.Sleep(3200 * time.Millisecond) // 3.2 leases
			heldLate = s.Held("inflight:acme")
		}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, tenantReq(context.Background(), "/", "acme"))
		if heldLate != 1 {
			t.Errorf("held after 3.2 leases = %d, want 1 (extended)", heldLate)
		}
		if got := w.extends.Load(); got != 6 { // at 0.5, 1, 1.5, 2, 2.5, 3 s
			t.Errorf("%d extensions, want 6", got)
		}
		<-w.released
		if got := s.Held("inflight:acme"); got != 0 {
			t.Errorf("held after return = %d", got)
		}
		time.Sleep(time.Second)
		if got := w.extends.Load(); got != 6 {
			t.Errorf("%d extensions after the release, want still 6", got)
		}
	})
}

func TestConcurrencyPermitLostCancelsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.WithSweepInterval(0))
		defer s.Close()
		w := newWatched(s)
		w.extendErr = sluice.ErrPermitLost
		lim := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
		var after time.Duration
		var cause error
		h := newConcurrency(t, w, lim).Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			start := time.Now()
			<-r.Context().Done()
			after, cause = time.Since(start), r.Context().Err()
		}))
		h.ServeHTTP(httptest.NewRecorder(), tenantReq(context.Background(), "/", "acme"))
		if after != 500*time.Millisecond || !errors.Is(cause, context.Canceled) {
			t.Errorf("handler canceled after %v with %v, want 500ms and context.Canceled", after, cause)
		}
		if got := w.extends.Load(); got != 1 {
			t.Errorf("%d extensions, want 1 (none after the loss)", got)
		}
		<-w.released
	})
}

// semErr fails every Acquire.
type semErr struct {
	sluice.Semaphore
	releases atomic.Int32
}

func (s *semErr) Acquire(context.Context, string, sluice.ConcurrencyLimit, string) (sluice.PermitDecision, error) {
	return sluice.PermitDecision{}, errDown
}

func (s *semErr) Release(context.Context, string, string) error { s.releases.Add(1); return nil }

func TestConcurrencyStoreError(t *testing.T) {
	lim := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
	se := &semErr{}
	served := 0
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ })
	rec := httptest.NewRecorder()
	newConcurrency(t, se, lim).Handler(next).ServeHTTP(rec, tenantReq(context.Background(), "/", "acme"))
	if rec.Code != 503 || served != 0 || !strings.Contains(rec.Body.String(), "could not be decided") {
		t.Errorf("store error: %d served=%d %q", rec.Code, served, rec.Body)
	}
	if se.releases.Load() != 1 {
		t.Errorf("%d releases after a failed acquire, want 1 (a lost reply may have taken the permit)", se.releases.Load())
	}
	var gotErr error
	rec = httptest.NewRecorder()
	newConcurrency(t, se, lim, httplimit.WithConcurrencyErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
		gotErr = err
		w.WriteHeader(599)
	})).Handler(next).ServeHTTP(rec, tenantReq(context.Background(), "/", "acme"))
	if rec.Code != 599 || !errors.Is(gotErr, errDown) {
		t.Errorf("error handler: %d %v", rec.Code, gotErr)
	}
	rec = httptest.NewRecorder()
	newConcurrency(t, se, lim, httplimit.WithConcurrencyFailOpen()).Handler(next).ServeHTTP(rec, tenantReq(context.Background(), "/", "acme"))
	if rec.Code != 200 || served != 1 {
		t.Errorf("fail open: %d served=%d", rec.Code, served)
	}
}

func TestConcurrencyNoKey(t *testing.T) {
	s := newMemStore(t)
	lim := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
	rec := httptest.NewRecorder()
	newConcurrency(t, s, lim).Handler(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), "X-Tenant") {
		t.Errorf("no key: %d %q", rec.Code, rec.Body)
	}
	var held int
	h := newConcurrency(t, s, lim, httplimit.WithConcurrencyDefaultKey("anon")).Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		held = s.Held("inflight:anon")
	}))
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 200 || held != 1 {
		t.Errorf("default key: %d held=%d", rec.Code, held)
	}
	// Skipped requests take no permit.
	h = newConcurrency(t, s, lim, httplimit.WithConcurrencySkip(func(*http.Request) bool { return true })).Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		held = s.Held("inflight:acme")
	}))
	h.ServeHTTP(httptest.NewRecorder(), tenantReq(context.Background(), "/", "acme"))
	if held != 0 {
		t.Errorf("skipped request held %d", held)
	}
}

func TestNewConcurrencyValidates(t *testing.T) {
	s := newMemStore(t)
	ok := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
	for _, tc := range []struct {
		name string
		sem  sluice.Semaphore
		lim  sluice.ConcurrencyLimit
		opt  httplimit.ConcurrencyOption
		want string
	}{
		{"nil store", nil, ok, nil, "Semaphore is nil"},
		{"max", s, sluice.ConcurrencyLimit{Max: 0, TTL: time.Second}, nil, "Max 0"},
		{"max high", s, sluice.ConcurrencyLimit{Max: sluice.MaxPermits + 1, TTL: time.Second}, nil, "Max 10001"},
		{"lease", s, sluice.ConcurrencyLimit{Max: 1, TTL: time.Millisecond}, nil, "TTL 1ms"},
		{"status", s, ok, httplimit.WithConcurrencyStatus(500), "WithConcurrencyStatus: status 500"},
		{"key", s, ok, httplimit.WithConcurrencyKey(nil), "WithConcurrencyKey: nil"},
		{"default key", s, ok, httplimit.WithConcurrencyDefaultKey(""), "WithConcurrencyDefaultKey: empty key"},
		{"release", s, ok, httplimit.WithReleaseTimeout(0), "WithReleaseTimeout"},
		{"release high", s, ok, httplimit.WithReleaseTimeout(2 * time.Minute), "WithReleaseTimeout"},
		{"deny", s, ok, httplimit.WithConcurrencyDenyHandler(nil), "WithConcurrencyDenyHandler: nil"},
	} {
		var opts []httplimit.ConcurrencyOption
		if tc.opt != nil {
			opts = append(opts, tc.opt)
		}
		_, err := httplimit.NewConcurrency(tc.sem, "inflight", tc.lim, opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	_, err := httplimit.NewConcurrency(s, "inflight", sluice.ConcurrencyLimit{Max: 1, TTL: 1500 * time.Microsecond})
	var le *sluice.LimitError
	if !errors.As(err, &le) || le.Field != "TTL" || !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("invalid lease: %v, want a *sluice.LimitError on Lease", err)
	}
	if _, err := httplimit.NewConcurrency(s, "", ok); err == nil {
		t.Error("an empty name was accepted")
	}
}

func newDiscardLog() *log.Logger { return log.New(io.Discard, "", 0) }
