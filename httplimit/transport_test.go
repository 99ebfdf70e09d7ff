package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redisclock"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// handlerTransport serves requests with h in memory, closing the request
// body as a RoundTripper must. It works inside synctest bubbles, where real
// sockets do not.
func handlerTransport(h http.Handler) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			defer r.Body.Close()
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Result(), nil
	})
}

// upstream records arrival times and answers by the plan: the status and
// Retry-After to send to the i-th request (0-based); 200 otherwise.
type upstream struct {
	mu       sync.Mutex
	arrivals []time.Time
	bodies   []string
	plan     func(i int) (int, string)
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
	}
	u.mu.Lock()
	i := len(u.arrivals)
	u.arrivals = append(u.arrivals, time.Now())
	u.bodies = append(u.bodies, string(body))
	u.mu.Unlock()
	status, ra := http.StatusOK, ""
	if u.plan != nil {
		status, ra = u.plan(i)
	}
	if ra != "" {
		w.Header().Set("Retry-After", ra)
	}
	w.WriteHeader(status)
	io.WriteString(w, http.StatusText(status))
}

func (u *upstream) times() []time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.arrivals)
}

// maxInWindow returns the largest number of arrivals in any half-open
// interval (t-w, t], on the stores' clock: whole microseconds (an entry
// 999.9997 ms old in nanoseconds is a full second old in microseconds).
func maxInWindow(ts []time.Time, w time.Duration) int {
	ts = slices.Clone(ts)
	for i := range ts {
		ts[i] = time.UnixMicro(ts[i].UnixMicro())
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	most, lo := 0, 0
	for hi := range ts {
		for !ts[lo].After(ts[hi].Add(-w)) {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}

func doGet(ctx context.Context, rt http.RoundTripper, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// runReplicas sends perWorker requests from each of workers goroutines of
// each replica and returns the statuses.
func runReplicas(t *testing.T, replicas []*httplimit.Transport, workers, perWorker int, url string) []int {
	t.Helper()
	statuses, _ := runReplicasTimed(t, replicas, workers, perWorker, url)
	return statuses
}

// runReplicasTimed is runReplicas that also returns when each request
// started: its admission lies between its start and its arrival.
func runReplicasTimed(t *testing.T, replicas []*httplimit.Transport, workers, perWorker int, url string) ([]int, []time.Time) {
	t.Helper()
	var mu sync.Mutex
	var statuses []int
	var starts []time.Time
	var wg sync.WaitGroup
	for _, rt := range replicas {
		for range workers {
			wg.Go(func() {
				for range perWorker {
					start := time.Now()
					st, err := doGet(context.Background(), rt, url)
					if err != nil {
						t.Errorf("RoundTrip: %v", err)
						return
					}
					mu.Lock()
					statuses = append(statuses, st)
					starts = append(starts, start)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	return statuses, starts
}

// maxCertainInWindow returns the largest number of requests certainly
// admitted within one interval (t-w, t]: those that started after t-w and
// arrived at or before t (each was admitted between its start and its
// arrival), in whole microseconds as the stores count. A busy machine
// widens the brackets and can only lower the count.
func maxCertainInWindow(starts, arrivals []time.Time, w time.Duration) int {
	us := func(ts []time.Time) []int64 {
		out := make([]int64, len(ts))
		for i, x := range ts {
			out[i] = x.UnixMicro()
		}
		slices.Sort(out)
		return out
	}
	s, a := us(starts), us(arrivals)
	most := 0
	for _, end := range a {
		// Requests that arrived by end, less those that started at
		// or before end-w (a request arrives after it starts).
		arrived, _ := slices.BinarySearch(a, end+1)
		early, _ := slices.BinarySearch(s, end-w.Microseconds()+1)
		most = max(most, arrived-early)
	}
	return most
}

// TestTransportReplicasShareQuota: three replicas of twelve workers each,
// one shared store, a sliding log of 10 per second. No interval of one
// second ever sees more than 10 requests at the upstream.
func TestTransportReplicasShareQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &upstream{}
		store := newMemStore(t) // time.Now is the bubble's clock
		lim := sluice.New(store)
		quota := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: time.Second}
		var replicas []*httplimit.Transport
		for range 3 {
			replicas = append(replicas, &httplimit.Transport{Base: handlerTransport(up), Limiter: lim, Limit: quota})
		}
		start := time.Now()
		statuses := runReplicas(t, replicas, 12, 3, "http://api.example/v1")
		ts := up.times()
		if len(ts) != 108 || len(statuses) != 108 {
			t.Fatalf("%d arrivals, %d statuses; want 108", len(ts), len(statuses))
		}
		if got := maxInWindow(ts, time.Second); got != 10 {
			t.Errorf("busiest second holds %d requests, want 10", got)
		}
		// 108 requests at 10 per second: the last is admitted after 10 s.
		if got := time.Since(start); got < 10*time.Second || got > 11*time.Second {
			t.Errorf("took %v, want 10s to 11s", got)
		}
	})
}

// sharedStores runs f on a memstore and, when redis-server is available,
// on a real Redis through redisstore.
func sharedStores(t *testing.T, f func(t *testing.T, s sluice.Store)) {
	t.Run("memstore", func(t *testing.T) { f(t, newMemStore(t)) })
	t.Run("redis", func(t *testing.T) { f(t, newRedisStore(t)) })
}

// TestTransportReplicasOverHTTP: the same over real sockets, with real
// time and a real Redis: three replicas, 60 requests, a sliding log of 20
// per 300 ms.
func TestTransportReplicasOverHTTP(t *testing.T) {
	sharedStores(t, func(t *testing.T, store sluice.Store) {
		up := &upstream{}
		srv := httptest.NewServer(up)
		defer srv.Close()
		lim := sluice.New(store)
		quota := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 20, Period: 300 * time.Millisecond}
		var replicas []*httplimit.Transport
		for range 3 {
			replicas = append(replicas, &httplimit.Transport{Base: srv.Client().Transport, Limiter: lim, Limit: quota, Key: httplimit.Constant("upstream-" + t.Name())})
		}
		statuses, starts := runReplicasTimed(t, replicas, 4, 5, srv.URL)
		ts := up.times()
		if len(ts) != 60 || slices.ContainsFunc(statuses, func(s int) bool { return s != 200 }) {
			t.Fatalf("%d arrivals, statuses %v", len(ts), statuses)
		}
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
		// Admissions 41..60 come at least 600 ms after the first: the
		// 41st arrival is after the 41st admission, and the first start
		// before the first admission.
		if span := ts[40].Sub(starts[0]); span < 600*time.Millisecond {
			t.Errorf("41 requests started and arrived within %v, want at least 600ms (Rate 20 per 300ms)", span)
		}
		if got := maxCertainInWindow(starts, ts, quota.Period); got > 20 {
			t.Errorf("%d requests admitted within %v, want at most 20", got, quota.Period)
		}
	})
}

// TestTransportBackoffPausesFleet: one replica hears a 429 with
// Retry-After: 2; the others, sharing the store, do not send at all until
// then, and fail fast when the back-off does not fit their wait.
func TestTransportBackoffPausesFleet(t *testing.T) {
	sharedStores(t, func(t *testing.T, store sluice.Store) {
		up := &upstream{plan: func(i int) (int, string) {
			if i == 0 {
				return http.StatusTooManyRequests, "2"
			}
			return http.StatusOK, ""
		}}
		srv := httptest.NewServer(up)
		defer srv.Close()
		lim := sluice.New(store)
		quota := sluice.Limit{Algorithm: sluice.GCRA, Rate: 100, Period: time.Second}
		key := httplimit.Constant("paused-" + t.Name())
		a := &httplimit.Transport{Base: srv.Client().Transport, Limiter: lim, Limit: quota, Key: key}
		if st, err := doGet(context.Background(), a, srv.URL); st != 429 || err != nil {
			t.Fatalf("first request: %d, %v; want the upstream's 429", st, err)
		}
		for i := range 3 {
			b := &httplimit.Transport{Base: srv.Client().Transport, Limiter: lim, Limit: quota, Key: key, MaxWait: 200 * time.Millisecond}
			body := &trackedBody{Reader: strings.NewReader("payload")}
			req, _ := http.NewRequest(http.MethodPut, srv.URL, body)
			resp, err := b.RoundTrip(req)
			var le *httplimit.LimitedError
			if !errors.As(err, &le) || resp != nil {
				t.Fatalf("replica %d: RoundTrip = %v, %v; want *LimitedError", i, resp, err)
			}
			if !le.Backoff || le.Decision.RetryAfter <= time.Second || le.Decision.RetryAfter > 2*time.Second || !errors.Is(err, sluice.ErrWouldExceedDeadline) {
				t.Errorf("replica %d: %+v, want a back-off of (1s, 2s] that would exceed the deadline", i, le)
			}
			if body.closed.Load() != 1 {
				t.Errorf("replica %d: request body closed %d times, want 1", i, body.closed.Load())
			}
		}
		// A caller whose own deadline is too short fails fast too.
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		c := &httplimit.Transport{Base: srv.Client().Transport, Limiter: lim, Key: key}
		if _, err := doGet(ctx, c, srv.URL); !errors.As(err, new(*httplimit.LimitedError)) {
			t.Errorf("short deadline: %v, want *LimitedError", err)
		}
		left, err := c.Backoff(context.Background(), "paused-"+t.Name())
		if err != nil || left <= time.Second || left > 2*time.Second {
			t.Errorf("Backoff = %v, %v; want (1s, 2s]", left, err)
		}
		if n := len(up.times()); n != 1 {
			t.Errorf("upstream saw %d requests during the back-off, want 1", n)
		}
	})
}

// TestTransportBackoffFailsAtOnce: a replica whose MaxWait the fleet's
// back-off does not fit fails without waiting at all, on a fake clock
// (TestTransportBackoffPausesFleet shows the same over real sockets and
// Redis, where a busy machine's time cannot tell "at once").
func TestTransportBackoffFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &upstream{plan: func(i int) (int, string) {
			if i == 0 {
				return http.StatusTooManyRequests, "2"
			}
			return http.StatusOK, ""
		}}
		lim := sluice.New(newMemStore(t))
		quota := sluice.Limit{Algorithm: sluice.GCRA, Rate: 100, Period: time.Second}
		a := &httplimit.Transport{Base: handlerTransport(up), Limiter: lim, Limit: quota}
		if st, err := doGet(context.Background(), a, "http://api.example/"); st != 429 || err != nil {
			t.Fatalf("first request: %d, %v; want the upstream's 429", st, err)
		}
		b := &httplimit.Transport{Base: handlerTransport(up), Limiter: lim, Limit: quota, MaxWait: 200 * time.Millisecond}
		start := time.Now()
		_, err := doGet(context.Background(), b, "http://api.example/")
		if elapsed := time.Since(start); !errors.As(err, new(*httplimit.LimitedError)) || elapsed != 0 {
			t.Errorf("RoundTrip during a 2s back-off with MaxWait 200ms = %v after %v, want *LimitedError at once", err, elapsed)
		}
	})
}

// TestTransportBackoffResume: the upstream answers its 5th request with
// 429 and Retry-After: 5. No replica sends anything for the next 5 s, then
// all resume, and the refused request is retried.
func TestTransportBackoffResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &upstream{plan: func(i int) (int, string) {
			if i == 4 {
				return http.StatusTooManyRequests, "5"
			}
			return http.StatusOK, ""
		}}
		lim := sluice.New(newMemStore(t))
		quota := sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Second}
		var replicas []*httplimit.Transport
		for range 3 {
			replicas = append(replicas, &httplimit.Transport{Base: handlerTransport(up), Limiter: lim, Limit: quota, Retries: 1})
		}
		statuses := runReplicas(t, replicas, 2, 5, "http://api.example/")
		if slices.ContainsFunc(statuses, func(s int) bool { return s != 200 }) || len(statuses) != 30 {
			t.Errorf("statuses %v, want 30 × 200 (the 429 retried)", statuses)
		}
		ts := up.times()
		t429 := ts[4]
		var during, after int
		for _, at := range ts {
			switch {
			case at.After(t429) && at.Before(t429.Add(5*time.Second)):
				during++
			case !at.Before(t429.Add(5 * time.Second)):
				after++
			}
		}
		// Requests already past their checks in the instant of the 429 may
		// land in that instant (at most the burst of 10 in all); none may
		// land later until the back-off ends.
		if during != 0 || len(ts)-after > 10 || len(ts) != 31 {
			t.Errorf("arrivals: %d during the back-off, %d up to the 429, %d in all; want 0, <= 10, 31", during, len(ts)-after, len(ts))
		}
		// Once resumed, the quota still holds: GCRA 10 per second with a
		// burst of 10 admits at most 10 + 10 in any second.
		if got := maxInWindow(ts, time.Second); got > 20 {
			t.Errorf("%d requests in one second after the back-off", got)
		}
	})
}

func TestTransportRetryAfterValues(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		status     int
		retryAfter string
		max, def   time.Duration
		want       time.Duration
	}{
		{"429 seconds", 429, "2", 0, 0, 2 * time.Second},
		{"503 seconds", 503, "3", 0, 0, 3 * time.Second},
		{"whitespace", 429, " 4 ", 0, 0, 4 * time.Second},
		{"HTTP-date", 429, now.Add(10 * time.Second).Format(http.TimeFormat), 0, 0, 10 * time.Second},
		{"RFC 850 date", 503, now.Add(90 * time.Second).Format("Monday, 02-Jan-06 15:04:05 GMT"), 0, 0, 90 * time.Second},
		{"date in the past", 429, now.Add(-time.Hour).Format(http.TimeFormat), 0, 0, 0},
		{"zero", 429, "0", 0, 0, 0},
		{"negative", 429, "-5", 0, 0, 0},
		{"fraction", 429, "1.5", 0, 0, 0},
		{"garbage", 429, "soon", 0, 0, 0},
		{"missing 429, default", 429, "", 0, time.Second, time.Second},
		{"garbage 429, default", 429, "soon", 0, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"garbage 503, default unused", 503, "soon", 0, time.Second, 0},
		{"absurd, default max", 429, "99999999999999999999", 0, 0, httplimit.DefaultMaxBackoff},
		{"over max", 429, "7200", 30 * time.Minute, 0, 30 * time.Minute},
		{"absurd date", 429, "Fri, 31 Dec 9999 23:59:59 GMT", 0, 0, httplimit.DefaultMaxBackoff},
		{"200 ignored", 200, "5", 0, 0, 0},
		{"500 ignored", 500, "5", 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := sluice.New(newMemStore(t, memstoreClock(newClock(now))))
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				rec := httptest.NewRecorder()
				if tt.retryAfter != "" {
					rec.Header().Set("Retry-After", tt.retryAfter)
				}
				rec.WriteHeader(tt.status)
				return rec.Result(), nil
			})
			rt := &httplimit.Transport{Base: base, Limiter: lim, MaxBackoff: tt.max, DefaultBackoff: tt.def, Now: func() time.Time { return now }}
			if st, err := doGet(context.Background(), rt, "http://up.example/"); st != tt.status || err != nil {
				t.Fatalf("RoundTrip = %d, %v", st, err)
			}
			got, err := rt.Backoff(context.Background(), "up.example")
			if err != nil || got != tt.want {
				t.Errorf("Retry-After %q: Backoff = %v, %v; want %v", tt.retryAfter, got, err, tt.want)
			}
		})
	}
}

// TestRecordBackoffNeverStacks holds the back-off encoding to its promise:
// concurrent recorders of the same back-off do not add up, a shorter one
// keeps a longer, a longer one extends, and the state expires by itself.
func TestRecordBackoffNeverStacks(t *testing.T) {
	t.Run("memstore", func(t *testing.T) {
		clock := newClock(t0)
		store := newMemStore(t, memstoreClock(clock))
		testRecordBackoff(t, store, clock)
		store.Sweep()
		if n := store.Len(); n != 0 {
			t.Errorf("store holds %d states after the back-off, want 0", n)
		}
	})
	t.Run("redis", func(t *testing.T) {
		clock := newClock(t0)
		testRecordBackoff(t, newRedisStore(t, redisclock.Option[redisstore.Option](clock.Now)), clock)
	})
}

func testRecordBackoff(t *testing.T, store sluice.Store, clock *sluicetest.Clock) {
	rt := &httplimit.Transport{Limiter: sluice.New(store)}
	ctx := context.Background()
	check := func(step string, want time.Duration) {
		t.Helper()
		got, err := rt.Backoff(ctx, "up")
		if err != nil || got != want {
			t.Errorf("%s: Backoff = %v, %v; want %v", step, got, err, want)
		}
	}
	check("fresh", 0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := rt.RecordBackoff(ctx, "up", 2*time.Second); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	check("8 concurrent records of 2s", 2*time.Second)
	rt.RecordBackoff(ctx, "up", time.Second)
	check("shorter record", 2*time.Second)
	clock.Advance(500 * time.Millisecond)
	check("500ms later", 1500*time.Millisecond)
	rt.RecordBackoff(ctx, "up", 3*time.Second)
	check("longer record", 3*time.Second)
	rt.RecordBackoff(ctx, "up", 2500*time.Microsecond)
	check("sub-ms is rounded up, and shorter", 3*time.Second)
	rt.RecordBackoff(ctx, "up", 2*time.Hour)
	check("clamped to MaxBackoff", httplimit.DefaultMaxBackoff)
	clock.Advance(httplimit.DefaultMaxBackoff)
	check("expired", 0)
	rt.RecordBackoff(ctx, "up", 1999*time.Microsecond)
	check("rounded up to whole ms", 2*time.Millisecond)
	clock.Advance(2 * time.Millisecond)
	check("expired again", 0)
}

// TestTransportClosesBody: every path closes the request body exactly as
// the RoundTripper contract requires.
func TestTransportClosesBody(t *testing.T) {
	srv := httptest.NewServer(&upstream{})
	defer srv.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	clock := newClock(t0)
	lim := sluice.New(newMemStore(t, memstoreClock(clock)))
	oneAMinute := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Minute}
	if err := (&httplimit.Transport{Limiter: lim}).RecordBackoff(context.Background(), "paused", time.Minute); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		rt      *httplimit.Transport
		url     string
		ctx     context.Context
		wantErr string // substring; "" for success
	}{
		{"success", &httplimit.Transport{Limiter: lim, Limit: oneAMinute, Key: httplimit.Constant("ok")}, srv.URL, context.Background(), ""},
		{"nil limiter", &httplimit.Transport{}, srv.URL, context.Background(), "Limiter is nil"},
		{"key error", &httplimit.Transport{Limiter: lim, Key: httplimit.Header("X-Nope")}, srv.URL, context.Background(), "no rate-limit key"},
		{"quota cannot fit", &httplimit.Transport{Limiter: lim, Limit: oneAMinute, Key: httplimit.Constant("ok"), MaxWait: time.Second}, srv.URL, context.Background(), "limited by quota"},
		{"back-off cannot fit", &httplimit.Transport{Limiter: lim, Key: httplimit.Constant("paused"), MaxWait: time.Second}, srv.URL, context.Background(), "limited by upstream back-off"},
		{"cancelled", &httplimit.Transport{Limiter: lim, Key: httplimit.Constant("c")}, srv.URL, cancelled, "context canceled"},
		{"base error", &httplimit.Transport{Base: &http.Transport{}, Limiter: lim, Key: httplimit.Constant("d")}, deadURL, context.Background(), "connect"},
		{"store error", &httplimit.Transport{Limiter: sluice.New(errStore{}), Limit: oneAMinute}, srv.URL, context.Background(), "store is down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := &trackedBody{Reader: strings.NewReader("payload")}
			req, err := http.NewRequestWithContext(tt.ctx, http.MethodPost, tt.url, body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := tt.rt.RoundTrip(req)
			if resp != nil {
				resp.Body.Close()
			}
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if (tt.wantErr == "") != (err == nil) || !strings.Contains(gotErr, tt.wantErr) {
				t.Errorf("RoundTrip error = %q, want one containing %q", gotErr, tt.wantErr)
			}
			if body.closed.Load() == 0 {
				t.Errorf("request body not closed")
			}
		})
	}
}

// TestTransportInvalidFields: a field with an invalid value is an error
// naming it on every method, and nothing is sent or recorded.
func TestTransportInvalidFields(t *testing.T) {
	lim := sluice.New(newMemStore(t))
	var sent atomic.Int64
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent.Add(1)
		return httptest.NewRecorder().Result(), nil
	})
	tests := []struct {
		name string
		give httplimit.Transport
		want string
	}{
		{"nil limiter", httplimit.Transport{}, "httplimit: Transport.Limiter is nil"},
		{"negative MaxWait", httplimit.Transport{Limiter: lim, MaxWait: -time.Second}, "httplimit: Transport.MaxWait -1s is negative"},
		{"negative MaxBackoff", httplimit.Transport{Limiter: lim, MaxBackoff: -time.Second}, "httplimit: Transport.MaxBackoff -1s is not within [0, 720h0m0s]"},
		{"MaxBackoff over 30 days", httplimit.Transport{Limiter: lim, MaxBackoff: 31 * 24 * time.Hour}, "httplimit: Transport.MaxBackoff 744h0m0s is not within [0, 720h0m0s]"},
		{"negative DefaultBackoff", httplimit.Transport{Limiter: lim, DefaultBackoff: -time.Second}, "httplimit: Transport.DefaultBackoff -1s is negative"},
		{"negative Retries", httplimit.Transport{Limiter: lim, Retries: -1}, "httplimit: Transport.Retries -1 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := tt.give
			rt.Base = base
			body := &trackedBody{Reader: strings.NewReader("payload")}
			req := httptest.NewRequest(http.MethodPost, "http://up.example/", body)
			if resp, err := rt.RoundTrip(req); resp != nil || err == nil || err.Error() != tt.want {
				t.Errorf("RoundTrip = %v, %v; want error %s", resp, err, tt.want)
			}
			if body.closed.Load() == 0 {
				t.Errorf("request body not closed")
			}
			if err := rt.RecordBackoff(context.Background(), "up.example", time.Minute); err == nil || err.Error() != tt.want {
				t.Errorf("RecordBackoff error = %v, want %s", err, tt.want)
			}
			if d, err := rt.Backoff(context.Background(), "up.example"); err == nil || err.Error() != tt.want {
				t.Errorf("Backoff = %v, %v; want error %s", d, err, tt.want)
			}
		})
	}
	if n := sent.Load(); n != 0 {
		t.Errorf("%d requests sent, want none", n)
	}
	ok := httplimit.Transport{Limiter: lim}
	if d, err := ok.Backoff(context.Background(), "up.example"); d != 0 || err != nil {
		t.Errorf("Backoff after the invalid Transports = %v, %v; want 0 (nothing recorded)", d, err)
	}
}

// TestTransportRetry: which requests are sent again after a back-off, and
// that the caller's request is never modified.
func TestTransportRetry(t *testing.T) {
	tests := []struct {
		name      string
		method    string
		body      string
		getBody   bool
		idemKey   bool
		maxWait   time.Duration
		wantCalls int
		want      int
	}{
		{"GET", http.MethodGet, "", false, false, 0, 2, 200},
		{"HEAD", http.MethodHead, "", false, false, 0, 2, 200},
		{"PUT replayable", http.MethodPut, "data", true, false, 0, 2, 200},
		{"PUT not replayable", http.MethodPut, "data", false, false, 0, 1, 429},
		{"POST", http.MethodPost, "data", true, false, 0, 1, 429},
		{"POST with Idempotency-Key", http.MethodPost, "data", true, true, 0, 2, 200},
		{"back-off beyond MaxWait", http.MethodGet, "", false, false, 500 * time.Millisecond, 1, 429},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				up := &upstream{plan: func(i int) (int, string) {
					if i == 0 {
						return 429, "1"
					}
					return 200, ""
				}}
				rt := &httplimit.Transport{Base: handlerTransport(up), Limiter: sluice.New(newMemStore(t)), Retries: 3, MaxWait: tt.maxWait}
				var bodies []*trackedBody
				newBody := func() io.ReadCloser {
					b := &trackedBody{Reader: strings.NewReader(tt.body)}
					bodies = append(bodies, b)
					return b
				}
				req, _ := http.NewRequest(tt.method, "http://api.example/x", nil)
				if tt.body != "" {
					req.Body = newBody()
					if tt.getBody {
						req.GetBody = func() (io.ReadCloser, error) { return newBody(), nil }
					}
				}
				if tt.idemKey {
					req.Header.Set("Idempotency-Key", "k1")
				}
				orig := req.Body
				hdr := req.Header.Clone()
				start := time.Now()
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				ts := up.times()
				if resp.StatusCode != tt.want || len(ts) != tt.wantCalls {
					t.Errorf("status %d after %d calls, want %d after %d", resp.StatusCode, len(ts), tt.want, tt.wantCalls)
				}
				if len(ts) == 2 && ts[1].Sub(start) != time.Second {
					t.Errorf("retried after %v, want the 1s back-off", ts[1].Sub(start))
				}
				for i, b := range up.bodies {
					if b != tt.body && !(tt.method == http.MethodHead) {
						t.Errorf("call %d sent body %q, want %q", i, b, tt.body)
					}
				}
				for i, b := range bodies {
					if b.closed.Load() == 0 {
						t.Errorf("body %d not closed", i)
					}
				}
				if req.Body != orig || !cmp.Equal(hdr, req.Header) {
					t.Errorf("the caller's request was modified")
				}
			})
		})
	}
}

// TestTransportContextCancel: a caller that gives up while waiting gets
// its context's error at once, not a LimitedError, and its body closed.
func TestTransportContextCancel(t *testing.T) {
	for _, blocked := range []string{"back-off", "quota"} {
		t.Run(blocked, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				up := &upstream{}
				lim := sluice.New(newMemStore(t))
				rt := &httplimit.Transport{Base: handlerTransport(up), Limiter: lim,
					Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Hour}}
				if blocked == "back-off" {
					rt.RecordBackoff(context.Background(), "api.example", 10*time.Second)
				} else if st, err := doGet(context.Background(), rt, "http://api.example/"); st != 200 || err != nil {
					t.Fatal(st, err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(time.Second, cancel)
				body := &trackedBody{Reader: strings.NewReader("x")}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://api.example/", body)
				start := time.Now()
				_, err := rt.RoundTrip(req)
				if !errors.Is(err, context.Canceled) || errors.As(err, new(*httplimit.LimitedError)) {
					t.Errorf("RoundTrip error = %v, want context.Canceled", err)
				}
				if got := time.Since(start); got != time.Second {
					t.Errorf("returned after %v, want 1s", got)
				}
				if body.closed.Load() != 1 {
					t.Errorf("body closed %d times, want 1", body.closed.Load())
				}
			})
		})
	}
}

// TestTransportWaitsWithinMaxWait: a back-off shorter than MaxWait is
// waited out, then the request goes.
func TestTransportWaitsWithinMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &upstream{}
		rt := &httplimit.Transport{Base: handlerTransport(up), Limiter: sluice.New(newMemStore(t)), MaxWait: 3 * time.Second}
		rt.RecordBackoff(context.Background(), "api.example", 2*time.Second)
		start := time.Now()
		if st, err := doGet(context.Background(), rt, "http://api.example/"); st != 200 || err != nil {
			t.Fatal(st, err)
		}
		if got := up.times()[0].Sub(start); got != 2*time.Second {
			t.Errorf("sent after %v, want 2s", got)
		}
	})
}

func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for _, s := range []string{"0", "120", " 7 ", "-1", "1.5", "", "soon", "99999999999999999999999",
		"Sun, 29 Nov 2026 10:00:30 GMT", "Sunday, 29-Nov-26 10:00:30 GMT", "Sun Nov 29 10:00:30 2026", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := httplimit.ParseRetryAfter(s, now)
		if err != nil {
			if d != 0 {
				t.Fatalf("ParseRetryAfter(%q) = %v with error %v", s, d, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v < 0", s, d)
		}
		if v := strings.TrimSpace(s); v != "" && v[0] >= '0' && v[0] <= '9' {
			if d%time.Second != 0 || d > (1<<31)*time.Second {
				t.Fatalf("ParseRetryAfter(%q) = %v: delay-seconds must be whole and capped", s, d)
			}
		}
		// Through a Transport: a recorded back-off never exceeds MaxBackoff.
		lim := sluice.New(newMemStore(t, memstoreClock(newClock(now))))
		rt := &httplimit.Transport{Limiter: lim, MaxBackoff: time.Minute, Now: func() time.Time { return now },
			Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
				rec := httptest.NewRecorder()
				rec.Header().Set("Retry-After", s)
				rec.WriteHeader(http.StatusTooManyRequests)
				return rec.Result(), nil
			})}
		if _, err := doGet(context.Background(), rt, "http://u/"); err != nil {
			t.Fatal(err)
		}
		want := min((d+time.Millisecond-1)/time.Millisecond*time.Millisecond, time.Minute)
		if got, err := rt.Backoff(context.Background(), "u"); err != nil || got != want {
			t.Fatalf("Backoff after Retry-After %q = %v, %v; want %v", s, got, err, want)
		}
	})
}

// TestTransportBackoffWhileWaitingForQuota: a request waiting for quota
// when another replica records a back-off does not go before the back-off
// ends.
func TestTransportBackoffWhileWaitingForQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &upstream{}
		lim := sluice.New(newMemStore(t))
		rt := &httplimit.Transport{Base: handlerTransport(up), Limiter: lim,
			Limit: sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Second}}
		start := time.Now()
		if st, err := doGet(context.Background(), rt, "http://api.example/"); st != 200 || err != nil {
			t.Fatal(st, err)
		}
		time.AfterFunc(500*time.Millisecond, func() {
			rt.RecordBackoff(context.Background(), "api.example", 3*time.Second)
		})
		if st, err := doGet(context.Background(), rt, "http://api.example/"); st != 200 || err != nil {
			t.Fatal(st, err)
		}
		ts := up.times()
		if got := ts[1].Sub(start); got < 3500*time.Millisecond {
			t.Errorf("second request sent after %v, inside the back-off that ends at 3.5s", got)
		}
	})
}
