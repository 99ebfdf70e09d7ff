package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// A Concurrency middleware holding each tenant to one report in flight at
// once: while acme's first report runs, its second is answered 429 with
// the time until the first permit's lease ends (the store's clock is
// fixed so that the output is exact), and another tenant is served.
func ExampleConcurrency() {
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.WithClock(func() time.Time { return now }))
	defer store.Close()

	reports, err := httplimit.NewConcurrency(store, "reports", sluice.ConcurrencyLimit{Max: 1, TTL: 30 * time.Second},
		httplimit.WithConcurrencyKey(httplimit.Header("X-Tenant")))
	if err != nil {
		panic(err)
	}
	running, finish := make(chan struct{}), make(chan struct{})
	report := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("slow") != "" {
			close(running)
			<-finish
		}
		io.WriteString(w, "report\n")
	})
	srv := httptest.NewServer(reports.Handler(report))
	defer srv.Close()

	get := func(tenant, query string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+query, nil)
		req.Header.Set("X-Tenant", tenant)
		resp, err := srv.Client().Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s: %s", tenant, resp.Status)
		if v := resp.Header.Get("Retry-After"); v != "" {
			fmt.Printf(", Retry-After: %s", v)
		}
		fmt.Printf("\n%s", body)
	}

	done := make(chan struct{})
	go func() { defer close(done); get("acme", "?slow=1") }()
	<-running
	get("acme", "")
	get("globex", "")
	close(finish)
	<-done
	// Output:
	// acme: 429 Too Many Requests, Retry-After: 30
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"Limit \"reports\" allows 1 requests at once; retry in 30 s.","policy":"reports","retry_after":30}
	// globex: 200 OK
	// report
	// acme: 200 OK
	// report
}

// A ConcurrencyTransport keeping every replica that shares the store
// within 4 calls in flight to an upstream; each permit is released when
// the response body is closed.
func ExampleConcurrencyTransport() {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	defer upstream.Close()
	store := memstore.New()
	defer store.Close()

	client := &http.Client{Transport: &httplimit.ConcurrencyTransport{
		Semaphore: store,
		Limit:     sluice.ConcurrencyLimit{Max: 4, TTL: time.Minute},
		Key:       httplimit.Constant("upstream"),
		MaxWait:   10 * time.Second,
	}}
	resp, err := client.Get(upstream.URL)
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.Status, store.Held("httplimit-inflight:upstream"))
	resp.Body.Close()
	fmt.Println(store.Held("httplimit-inflight:upstream"))
	// Output:
	// 200 OK 1
	// 0
}
