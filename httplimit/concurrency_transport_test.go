package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

const upstreamKey = "httplimit-inflight:upstream"

func newCT(t *testing.T, sem sluice.Semaphore, max int, base http.RoundTripper) *httplimit.ConcurrencyTransport {
	t.Helper()
	return &httplimit.ConcurrencyTransport{
		Base:      base,
		Semaphore: sem,
		Limit:     sluice.ConcurrencyLimit{Max: max, TTL: 10 * time.Second},
		Key:       httplimit.Constant("upstream"),
	}
}

// bodyRT answers every request with a 200 whose body is "hello".
var bodyRT = roundTripFunc(func(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("hello")), Request: r}, nil
})

func TestConcurrencyTransportReleasesOnClose(t *testing.T) {
	s := newMemStore(t)
	ct := newCT(t, s, 2, bodyRT)
	resp, err := ct.RoundTrip(httptest.NewRequest("GET", "http://up.example/", nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Held(upstreamKey); got != 1 {
		t.Errorf("held after RoundTrip = %d, want 1 (the body still streams)", got)
	}
	resp.Body.Close()
	assertHeld(t, s, upstreamKey, ct.Limit, 0)
	resp.Body.Close() // a second close releases nothing more
	assertHeld(t, s, upstreamKey, ct.Limit, 0)
}

func TestConcurrencyTransportReleasesOnEOF(t *testing.T) {
	s := newMemStore(t)
	ct := newCT(t, s, 2, bodyRT)
	resp, err := ct.RoundTrip(httptest.NewRequest("GET", "http://up.example/", nil))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body) // never closed
	if err != nil || string(b) != "hello" {
		t.Fatalf("body %q %v", b, err)
	}
	assertHeld(t, s, upstreamKey, ct.Limit, 0)
}

func TestConcurrencyTransportReleasesOnError(t *testing.T) {
	s := newMemStore(t)
	boom := errors.New("connection refused")
	ct := newCT(t, s, 1, roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, boom }))
	for range 3 { // Max 1: each call would be refused if one leaked
		if _, err := ct.RoundTrip(httptest.NewRequest("GET", "http://up.example/", nil)); !errors.Is(err, boom) {
			t.Fatalf("error %v, want the base's", err)
		}
	}
	assertHeld(t, s, upstreamKey, ct.Limit, 0)
	// A response without a body releases at once.
	ct.Base = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 204, Body: http.NoBody, Request: r}, nil
	})
	if _, err := ct.RoundTrip(httptest.NewRequest("GET", "http://up.example/", nil)); err != nil {
		t.Fatal(err)
	}
	assertHeld(t, s, upstreamKey, ct.Limit, 0)
}

func TestConcurrencyTransportFailFastAndWait(t *testing.T) {
	s := newMemStore(t)
	ct := newCT(t, s, 1, bodyRT)
	first, err := ct.RoundTrip(httptest.NewRequest("GET", "http://up.example/", nil))
	if err != nil {
		t.Fatal(err)
	}
	ct.FailFast = true
	body := &trackedBody{Reader: strings.NewReader("x")}
	_, err = ct.RoundTrip(httptest.NewRequest("POST", "http://up.example/", body))
	var le *httplimit.ConcurrencyLimitedError
	if !errors.As(err, &le) || le.Decision.Held != 1 || le.Decision.Acquired || le.Key != "upstream" {
		t.Fatalf("fail fast: %v (%+v)", err, le)
	}
	if body.closed.Load() != 1 {
		t.Error("the request body was not closed")
	}

	// Waiting: bounded by MaxWait.
	ct.FailFast = false
	ct.MaxWait = 30 * time.Millisecond
	if _, err := ct.RoundTrip(httptest.NewRequest("GET", "http://up.example/", nil)); !errors.As(err, &le) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past MaxWait: %v", err)
	}

	// Waiting: woken when the permit is released.
	ct.MaxWait = 0
	ct.WaitPoll = time.Hour // only a wake-up can end the wait in time
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := ct.RoundTrip(httptest.NewRequestWithContext(ctx, "GET", "http://up.example/", nil))
		if err == nil {
			resp.Body.Close()
		}
		got <- err
	}()
	for s.Held(upstreamKey) != 1 {
		time.Sleep(time.Millisecond)
	}
	first.Body.Close()
	if err := <-got; err != nil {
		t.Fatalf("the waiting call: %v", err)
	}
	assertHeld(t, s, upstreamKey, ct.Limit, 0)
}

func TestConcurrencyTransportNeverMoreThanMax(t *testing.T) {
	const max, calls = 3, 40
	var inFlight, peak atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(2 * time.Millisecond)
		inFlight.Add(-1)
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	s := newMemStore(t)
	ct := newCT(t, s, max, up.Client().Transport)
	client := &http.Client{Transport: ct}
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range calls {
		wg.Go(func() {
			resp, err := client.Get(up.URL)
			if err != nil {
				failed.Add(1)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d calls failed", failed.Load())
	}
	if p := peak.Load(); p > max || p < 1 {
		t.Errorf("peak in flight at the upstream = %d, want 1 to %d", p, max)
	}
	assertHeld(t, s, upstreamKey, ct.Limit, 0)
}

func TestConcurrencyTransportValidates(t *testing.T) {
	s := newMemStore(t)
	for _, tc := range []struct {
		mod  func(*httplimit.ConcurrencyTransport)
		want string
	}{
		{func(ct *httplimit.ConcurrencyTransport) { ct.Semaphore = nil }, "Semaphore: nil"},
		{func(ct *httplimit.ConcurrencyTransport) { ct.Limit.Max = 0 }, "Limit: "},
		{func(ct *httplimit.ConcurrencyTransport) { ct.MaxWait = -1 }, "MaxWait"},
		{func(ct *httplimit.ConcurrencyTransport) { ct.WaitPoll = -1 }, "WaitPoll"},
		{func(ct *httplimit.ConcurrencyTransport) { ct.ReleaseTimeout = 2 * time.Minute }, "ReleaseTimeout"},
	} {
		sent := false
		ct := newCT(t, s, 1, roundTripFunc(func(*http.Request) (*http.Response, error) { sent = true; return nil, errors.New("sent") }))
		tc.mod(ct)
		body := &trackedBody{Reader: strings.NewReader("x")}
		_, err := ct.RoundTrip(httptest.NewRequest("POST", "http://up.example/", body))
		if err == nil || !strings.Contains(err.Error(), tc.want) || sent || body.closed.Load() != 1 {
			t.Errorf("error %v (sent %v, body closed %d), want one naming %q", err, sent, body.closed.Load(), tc.want)
		}
	}
}

func TestConcurrencyTransportStoreError(t *testing.T) {
	se := &semErr{}
	sent := false
	ct := newCT(t, se, 1, roundTripFunc(func(*http.Request) (*http.Response, error) { sent = true; return nil, errors.New("sent") }))
	ct.Key = nil // the host
	_, err := ct.RoundTrip(httptest.NewRequest("GET", "http://up.example:8080/", nil))
	if !errors.Is(err, errDown) || !strings.Contains(err.Error(), `"up.example:8080"`) || sent {
		t.Errorf("error %v (sent %v), want the store's, naming the host", err, sent)
	}
	if se.releases.Load() != 1 {
		t.Errorf("%d releases after a failed acquire, want 1", se.releases.Load())
	}
}
