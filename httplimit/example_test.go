package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// A Middleware with two policies on an API key: 2 per second and 5 per
// day, decided all-or-nothing. (The store's clock is fixed, 250 ms into a
// second and into a day, so that the output is exact.)
func ExampleMiddleware() {
	now := time.Date(2026, 11, 29, 0, 0, 0, 250_000_000, time.UTC)
	store := memstore.New(memstore.WithClock(func() time.Time { return now }))
	defer store.Close()

	mw, err := httplimit.New(sluice.New(store), []httplimit.Policy{
		{Name: "per-second", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Second}},
		{Name: "per-day", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: 24 * time.Hour}},
	}, httplimit.WithKey(httplimit.Header("X-API-Key")), httplimit.WithSkipPaths("/healthz"))
	if err != nil {
		panic(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	srv := httptest.NewServer(mw.Handler(api))
	defer srv.Close()

	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("X-API-Key", "k-123")
		resp, err := srv.Client().Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.Status)
		for _, h := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After", "Content-Type"} {
			if v := resp.Header.Get(h); v != "" {
				fmt.Printf("%s: %s\n", h, v)
			}
		}
		fmt.Printf("%s\n", body)
	}
	// Output:
	// 200 OK
	// RateLimit-Policy: "per-second";q=2;w=1, "per-day";q=5;w=86400
	// RateLimit: "per-second";r=1;t=1, "per-day";r=4;t=86400
	// X-RateLimit-Limit: 2
	// X-RateLimit-Remaining: 1
	// X-RateLimit-Reset: 1
	// Content-Type: text/plain; charset=utf-8
	// hello
	//
	// 200 OK
	// RateLimit-Policy: "per-second";q=2;w=1, "per-day";q=5;w=86400
	// RateLimit: "per-second";r=0;t=1, "per-day";r=3;t=86400
	// X-RateLimit-Limit: 2
	// X-RateLimit-Remaining: 0
	// X-RateLimit-Reset: 1
	// Content-Type: text/plain; charset=utf-8
	// hello
	//
	// 429 Too Many Requests
	// RateLimit-Policy: "per-second";q=2;w=1, "per-day";q=5;w=86400
	// RateLimit: "per-second";r=0;t=1, "per-day";r=3;t=86400
	// X-RateLimit-Limit: 2
	// X-RateLimit-Remaining: 0
	// X-RateLimit-Reset: 1
	// Retry-After: 1
	// Content-Type: application/problem+json
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"Policy \"per-second\" allows 2 requests per 1s; retry in 1 s.","policy":"per-second","retry_after":1}
}

// Two replicas share one store (a redisstore in production): both stay
// inside the upstream's quota together, and when the upstream answers one
// of them 429 with Retry-After: 30, the other does not send at all.
func ExampleTransport() {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.WithClock(func() time.Time { return now }))
	defer store.Close()
	lim := sluice.New(store)

	calls := 0
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer upstream.Close()

	quota := sluice.Limit{Algorithm: sluice.GCRA, Rate: 100, Period: time.Minute}
	replica := func() *http.Client {
		return &http.Client{Transport: &httplimit.Transport{
			Base:    upstream.Client().Transport,
			Limiter: lim,
			Limit:   quota,
			Key:     httplimit.Constant("api.example.com"),
			MaxWait: 5 * time.Second,
		}}
	}
	a, b := replica(), replica()

	resp, err := a.Get(upstream.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("replica a:", resp.Status)

	_, err = b.Get(upstream.URL)
	var le *httplimit.LimitedError
	if errors.As(err, &le) {
		fmt.Println("replica b: limited by back-off:", le.Backoff, "retry after", le.Decision.RetryAfter)
	}
	left, _ := (&httplimit.Transport{Limiter: lim}).Backoff(context.Background(), "api.example.com")
	fmt.Println("fleet back-off left:", left, "upstream calls:", calls)
	// Output:
	// replica a: 429 Too Many Requests
	// replica b: limited by back-off: true retry after 30s
	// fleet back-off left: 30s upstream calls: 1
}
