package failover_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
)

var errBoom = errors.New("boom: connection refused")

// Fault modes of the faulty store.
const (
	healthy int32 = iota
	failing       // every call fails at once
	hanging       // every call blocks until its context ends
)

// faulty wraps a memstore and injects failures.
type faulty struct {
	*memstore.Store
	mode  atomic.Int32
	calls atomic.Int64
	delay atomic.Int64 // ns each call waits before it is answered
}

func newFaulty(t *testing.T, opts ...memstore.Option) *faulty {
	f := &faulty{Store: memstore.New(opts...)}
	t.Cleanup(func() { f.Store.Close() })
	return f
}

func (f *faulty) fault(ctx context.Context) error {
	f.calls.Add(1)
	if d := time.Duration(f.delay.Load()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	switch f.mode.Load() {
	case failing:
		return errBoom
	case hanging:
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (f *faulty) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	if err := f.fault(ctx); err != nil {
		return sluice.Decision{}, err
	}
	return f.Store.AllowN(ctx, key, lim, n)
}

func (f *faulty) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	if err := f.fault(ctx); err != nil {
		return sluice.Decision{}, time.Time{}, err
	}
	return f.Store.Reserve(ctx, key, lim, n)
}

func (f *faulty) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	if err := f.fault(ctx); err != nil {
		return err
	}
	return f.Store.Return(ctx, key, lim, n, at)
}

func (f *faulty) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	if err := f.fault(ctx); err != nil {
		return nil, err
	}
	return f.Store.AllowMulti(ctx, reqs)
}

// counting is an Observer that counts what it is told.
type counting struct {
	mu                   sync.Mutex
	degraded, allowed    int
	opened, closed       int
	latencies, latErrors int
	causes               []error
	lastCause            error
	lastMode             sluice.FailureMode
}

func (c *counting) Degraded(key string, lim sluice.Limit, m sluice.FailureMode, allowed bool, cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.degraded++
	c.lastCause, c.lastMode = cause, m
	if allowed {
		c.allowed++
	}
	if !errors.Is(cause, failover.ErrBreakerOpen) && len(c.causes) < 1000 {
		c.causes = append(c.causes, cause)
	}
}
func (c *counting) BreakerOpened(error) { c.mu.Lock(); c.opened++; c.mu.Unlock() }
func (c *counting) BreakerClosed(time.Duration) {
	c.mu.Lock()
	c.closed++
	c.mu.Unlock()
}
func (c *counting) SharedLatency(d time.Duration, err error) {
	c.mu.Lock()
	c.latencies++
	if err != nil {
		c.latErrors++
	}
	c.mu.Unlock()
}

// last returns the cause and mode of the last degraded decision.
func (c *counting) last() (error, sluice.FailureMode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastCause, c.lastMode
}

// mustNew returns failover.New's store, closed at the test's end.
func mustNew(t testing.TB, shared sluice.Store, opts ...failover.Option) *failover.Store {
	t.Helper()
	s, err := failover.New(shared, opts...)
	if err != nil {
		t.Fatalf("failover.New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var perSec = sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: time.Second}

func TestHealthyPassesThrough(t *testing.T) {
	ctx := context.Background()
	f := newFaulty(t)
	s := mustNew(t, f, failover.WithTimeout(time.Minute)) // no spurious deadline on a loaded machine
	defer s.Close()
	for i := range 12 {
		got, err := s.AllowN(ctx, "k", perSec, 1)
		if err != nil {
			t.Fatalf("AllowN #%d: %v", i, err)
		}
		if want := i < 10; got.Allowed != want {
			t.Fatalf("AllowN #%d = %+v, want Allowed %v", i, got, want)
		}
	}
	if st := s.Stats(); st.SharedCalls != 12 || st.Degraded != 0 || st.Open {
		t.Errorf("Stats() = %+v, want 12 shared calls, nothing degraded, closed", st)
	}
	if !s.Ready() {
		t.Error("Ready() = false with a healthy store")
	}
}

func TestInvalidInputIsAnErrorNotAFailure(t *testing.T) {
	ctx := context.Background()
	f := newFaulty(t)
	s := mustNew(t, f, failover.WithFailureThreshold(1))
	defer s.Close()
	tests := []struct {
		name string
		key  string
		lim  sluice.Limit
		n    int
		want error
	}{
		{"empty key", "", perSec, 1, sluice.ErrInvalidKey},
		{"bad limit", "k", sluice.Limit{Algorithm: sluice.GCRA}, 1, sluice.ErrInvalidLimit},
		{"negative n", "k", perSec, -1, sluice.ErrInvalidCost},
		{"over capacity", "k", perSec, 11, sluice.ErrExceedsCapacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.AllowN(ctx, tt.key, tt.lim, tt.n)
			if !errors.Is(err, tt.want) {
				t.Errorf("AllowN(%q, %v, %d) error = %v, want %v", tt.key, tt.lim, tt.n, err, tt.want)
			}
		})
	}
	// The shared store validated them: called, but no failure counted.
	if st := s.Stats(); st.Open || st.Degraded != 0 || st.SharedErrors != 0 {
		t.Errorf("Stats() = %+v, want no failure, nothing degraded", st)
	}
}

// With the breaker open, failover decides itself, and checks the request
// first: the same errors as the shared store's, and nothing degraded.
func TestInvalidInputWithTheBreakerOpen(t *testing.T) {
	f := newFaulty(t)
	f.mode.Store(failing)
	s := mustNew(t, f, failover.WithStartOpen(nil), failover.WithDefaultMode(sluice.FailOpenUnbounded))
	tests := []struct {
		name string
		key  string
		lim  sluice.Limit
		n    int
		want error
	}{
		{"Key", "", perSec, 1, sluice.ErrInvalidKey},
		{"Key", strings.Repeat("k", sluice.MaxKeyLen+1), perSec, 1, sluice.ErrInvalidKey},
		{"Algorithm", "k", sluice.Limit{Rate: 1, Period: time.Second}, 1, sluice.ErrInvalidLimit},
		{"Algorithm", "k", sluice.Limit{Algorithm: 99, Rate: 1, Period: time.Second}, 0, sluice.ErrInvalidLimit},
		{"Rate", "k", sluice.Limit{Algorithm: sluice.GCRA, Period: time.Second}, 1, sluice.ErrInvalidLimit},
		{"Rate", "k", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: -1, Period: time.Second}, 0, sluice.ErrInvalidLimit},
		{"Rate", "k", sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 1 << 40, Period: 24 * time.Hour}, 1, sluice.ErrInvalidLimit},
		{"Period", "k", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1}, 1, sluice.ErrInvalidLimit},
		{"Period", "k", sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 1, Period: -time.Second}, 1, sluice.ErrInvalidLimit},
		{"Period", "k", sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 1, Period: time.Second + 500}, 0, sluice.ErrInvalidLimit},
		{"Burst", "k", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Second, Burst: -1}, 1, sluice.ErrInvalidLimit},
		{"Burst", "k", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Second, Burst: 2}, 1, sluice.ErrInvalidLimit},
		{"FailureMode", "k", perSec.WithFailureMode(42), 1, sluice.ErrInvalidLimit},
		{"N", "k", perSec, -1, sluice.ErrInvalidCost},
		{"N", "k", perSec, 11, sluice.ErrExceedsCapacity},
		{"N", "k", perSec, 1 << 40, sluice.ErrExceedsCapacity},
	}
	for _, tt := range tests {
		d, err := s.AllowN(ctx0, tt.key, tt.lim, tt.n)
		var le *sluice.LimitError
		if !errors.Is(err, tt.want) || d.Allowed || !errors.As(err, &le) || le.Field != tt.name {
			t.Errorf("%s: AllowN(%q, %v, %d) with the breaker open = %+v, %v; want %v naming %s", tt.name, tt.key, tt.lim, tt.n, d, err, tt.want, tt.name)
		}
		ds, err := s.AllowMulti(ctx0, []sluice.Request{{Key: "ok", Limit: perSec, N: 1}, {Key: tt.key, Limit: tt.lim, N: tt.n}})
		if !errors.Is(err, tt.want) || ds != nil {
			t.Errorf("%s: AllowMulti with the breaker open = %+v, %v; want %v", tt.name, ds, err, tt.want)
		}
	}
	big := make([]sluice.Request, sluice.MaxMultiRequests+1)
	for i := range big {
		big[i] = sluice.Request{Key: "k", Limit: perSec, N: 1}
	}
	if _, err := s.AllowMulti(ctx0, big); !errors.Is(err, sluice.ErrExceedsCapacity) {
		t.Errorf("AllowMulti of %d requests with the breaker open: %v, want ErrExceedsCapacity", len(big), err)
	}
	if st := s.Stats(); st.Degraded != 0 || f.calls.Load() != 0 {
		t.Errorf("Stats() = %+v, %d store calls; want nothing degraded, no call", st, f.calls.Load())
	}
}

func TestBreakerOpensAndStopsCallingTheStore(t *testing.T) {
	ctx := context.Background()
	f := newFaulty(t)
	obs := &counting{}
	s := mustNew(t, f, failover.WithFailureThreshold(3), failover.WithObserver(obs), failover.WithProbeInterval(time.Hour))
	defer s.Close()
	f.mode.Store(failing)
	for i := range 10 {
		d, err := s.AllowN(ctx, "k", perSec, 1)
		if err != nil {
			t.Fatalf("AllowN #%d: %v", i, err)
		}
		if d.Allowed || d.RetryAfter != time.Hour || !d.Degraded {
			t.Errorf("AllowN #%d = %+v, want a degraded FailClosed denial with RetryAfter 1h", i, d)
		}
		wantCause := failover.ErrBreakerOpen
		if i < 3 {
			wantCause = errBoom
		}
		if cause, m := obs.last(); m != sluice.FailClosed || !errors.Is(cause, wantCause) || !errors.Is(cause, failover.ErrUnavailable) {
			t.Errorf("AllowN #%d reported %v, %v; want FailClosed caused by %v", i, m, cause, wantCause)
		}
	}
	if got := f.calls.Load(); got != 3 {
		t.Errorf("shared store called %d times, want 3 (the breaker opens at the third failure)", got)
	}
	st := s.Stats()
	want := failover.Stats{SharedCalls: 3, SharedErrors: 3, Degraded: 10, DegradedDenied: 10, BreakerOpens: 1, Open: true, Timeout: failover.DefaultTimeout}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("Stats() mismatch (-want +got):\n%s", diff)
	}
	if s.Ready() {
		t.Error("Ready() = true with the breaker open")
	}
	if obs.degraded != 10 || obs.opened != 1 || obs.latErrors != 3 {
		t.Errorf("observer saw %d degraded, %d opens, %d failed calls; want 10, 1, 3", obs.degraded, obs.opened, obs.latErrors)
	}
}

func TestProberClosesBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := newFaulty(t, memstore.WithSweepInterval(0))
		obs := &counting{}
		s := mustNew(t, f, failover.WithFailureThreshold(1), failover.WithProbeInterval(100*time.Millisecond), failover.WithObserver(obs))
		defer s.Close()
		f.mode.Store(failing)
		if d, _ := s.AllowN(ctx, "k", perSec, 1); d.Allowed {
			t.Fatalf("AllowN during failure = %+v, want denial", d)
		}
		if s.Ready() {
			t.Fatal("breaker not open after one failure with threshold 1")
		}
		time.Sleep(time.Second) // ten failed probes
		synctest.Wait()
		if s.Ready() {
			t.Fatal("breaker closed while the store still fails")
		}
		calls := f.calls.Load()
		if calls < 10 || calls > 12 {
			t.Errorf("store called %d times in 1s of 100ms probes, want about 11", calls)
		}
		f.mode.Store(healthy)
		back := time.Now()
		for !s.Ready() {
			time.Sleep(time.Millisecond)
		}
		if took := time.Since(back); took > 101*time.Millisecond { // one interval, plus the 1ms poll
			t.Errorf("breaker closed %v after the store answered again, want <= one probe interval (100ms)", took)
		}
		if d, err := s.AllowN(ctx, "k", perSec, 1); err != nil || !d.Allowed {
			t.Errorf("AllowN after recovery = %+v, %v; want admitted by the store", d, err)
		}
		if st := s.Stats(); st.BreakerCloses != 1 || st.Degraded != 1 || st.Open {
			t.Errorf("Stats() = %+v, want 1 close, 1 degraded, closed", st)
		}
		if obs.closed != 1 {
			t.Errorf("observer saw %d closes, want 1", obs.closed)
		}
	})
}

func TestTimeoutBoundsAHungStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := newFaulty(t, memstore.WithSweepInterval(0))
		s := mustNew(t, f, failover.WithTimeout(50*time.Millisecond), failover.WithFailureThreshold(2), failover.WithProbeInterval(time.Hour))
		defer s.Close()
		f.mode.Store(hanging)
		for i, want := range []time.Duration{50 * time.Millisecond, 50 * time.Millisecond, 0} {
			start := time.Now()
			d, err := s.AllowN(ctx, "k", perSec, 1)
			if took := time.Since(start); err != nil || d.Allowed || took != want {
				t.Errorf("AllowN #%d on a hung store = %+v, %v after %v; want a denial after %v", i, d, err, took, want)
			}
		}
	})
}

// A caller's deadline before the timeout ends a hung call at that deadline,
// with the caller's error.
func TestCallerDeadlineBeforeTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t, memstore.WithSweepInterval(0))
		s := mustNew(t, f, failover.WithTimeout(50*time.Millisecond), failover.WithProbeInterval(time.Hour))
		defer s.Close()
		f.mode.Store(hanging)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := s.AllowN(ctx, "k", perSec, 1)
		if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took != 20*time.Millisecond {
			t.Errorf("AllowN on a hung store under a 20ms deadline = %v after %v; want DeadlineExceeded after 20ms", err, took)
		}
	})
}

func TestCallerCancellationIsNotAFailure(t *testing.T) {
	f := newFaulty(t)
	// A timeout no busy machine reaches: only the caller's cancellation
	// may end the call (at load 15, the 50 ms default ended it before the
	// goroutine that cancels ran, a failure the test then saw counted).
	s := mustNew(t, f, failover.WithFailureThreshold(1), failover.WithTimeout(time.Minute))
	defer s.Close()
	f.mode.Store(hanging)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(5 * time.Millisecond); cancel() }()
	_, err := s.AllowN(ctx, "k", perSec, 1)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("AllowN with a cancelled context error = %v, want context.Canceled", err)
	}
	if st := s.Stats(); st.Open || st.Degraded != 0 || st.SharedErrors != 0 {
		t.Errorf("Stats() = %+v, want no failure counted", st)
	}
}

func TestErrorRateOpensBreaker(t *testing.T) {
	ctx := context.Background()
	f := newFaulty(t)
	s := mustNew(t, f, failover.WithFailureThreshold(1000), failover.WithErrorRate(0.5, time.Minute, 10), failover.WithProbeInterval(time.Hour))
	defer s.Close()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Minute}
	// Alternate: never two failures in a row, half of the calls fail.
	for i := range 9 {
		f.mode.Store(int32(i%2) * failing)
		s.AllowN(ctx, "k", lim, 1)
	}
	if !s.Ready() {
		t.Fatal("breaker opened before minCalls")
	}
	f.mode.Store(failing)
	s.AllowN(ctx, "k", lim, 1) // 10 calls, 5 failures
	if s.Ready() {
		t.Errorf("breaker closed after 5 failures in 10 calls, want open at ratio 0.5; stats %+v", s.Stats())
	}
}

func TestFailureModes(t *testing.T) {
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: time.Second}
	tests := []struct {
		name         string
		opts         []failover.Option
		limMode      sluice.FailureMode
		wantAdmitted int
		wantCause    error
	}{
		{"default is FailClosed", nil, 0, 0, failover.ErrBreakerOpen},
		{"FailOpen by default, 3 replicas", []failover.Option{failover.WithDefaultMode(sluice.FailOpen), failover.WithReplicas(3)}, 0, 3, failover.ErrBreakerOpen},
		{"FailOpen from the limit", []failover.Option{failover.WithReplicas(4)}, sluice.FailOpen, 2, failover.ErrBreakerOpen},
		{"FailOpen without replicas denies", nil, sluice.FailOpen, 0, failover.ErrNoReplicas},
		{"FailClosed from the limit", []failover.Option{failover.WithDefaultMode(sluice.FailOpenUnbounded)}, sluice.FailClosed, 0, failover.ErrBreakerOpen},
		{"FailOpenUnbounded admits all", nil, sluice.FailOpenUnbounded, 25, failover.ErrBreakerOpen},
		{"FailDefault keeps the default", []failover.Option{failover.WithDefaultMode(sluice.FailOpenUnbounded)}, sluice.FailDefault, 25, failover.ErrBreakerOpen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFaulty(t)
			f.mode.Store(failing)
			clock := time.Unix(1_700_000_000, 0)
			obs := &counting{}
			opts := append([]failover.Option{failover.WithFailureThreshold(1), failover.WithProbeInterval(time.Hour),
				failover.WithClock(func() time.Time { return clock }), failover.WithObserver(obs)}, tt.opts...)
			s := mustNew(t, f, opts...)
			s.AllowN(ctx, "open-it", lim, 1)
			before := s.Stats()
			admitted := 0
			for range 25 {
				d, err := s.AllowN(ctx, "k", lim.WithFailureMode(tt.limMode), 1)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Degraded {
					t.Fatalf("AllowN with the breaker open = %+v, want Degraded", d)
				}
				if d.Allowed {
					admitted++
				}
			}
			if admitted != tt.wantAdmitted {
				t.Errorf("admitted %d of 25 in one Period, want %d", admitted, tt.wantAdmitted)
			}
			if cause, _ := obs.last(); !errors.Is(cause, tt.wantCause) {
				t.Errorf("cause = %v, want %v", cause, tt.wantCause)
			}
			if st := s.Stats(); st.Degraded-before.Degraded != 25 || st.DegradedAllowed-before.DegradedAllowed != int64(admitted) {
				t.Errorf("Stats() = %+v after %+v, want 25 more degraded, %d of them admitted", st, before, admitted)
			}
		})
	}
}

func TestLocalLimit(t *testing.T) {
	tests := []struct {
		give     sluice.Limit
		replicas int
		want     sluice.Limit
		wantOK   bool
	}{
		{sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: time.Second}, 3, sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 3, Period: time.Second}, true},
		{sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: time.Second}, 1, sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: time.Second}, true},
		{sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Second}, 5, sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: 3 * time.Second}, true},
		{sluice.Limit{Algorithm: sluice.GCRA, Rate: 100, Period: time.Second, Burst: 20}, 8, sluice.Limit{Algorithm: sluice.GCRA, Rate: 12, Period: time.Second, Burst: 2}, true},
		{sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 100, Period: time.Second, Burst: 5}, 8, sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 12, Period: time.Second, Burst: 1}, true},
		{sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Second}, 0, sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Second}, false},
	}
	for _, tt := range tests {
		got, ok := failover.LocalLimit(tt.give, tt.replicas)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("LocalLimit(%v, %d) = %v, %v; want %v, %v", tt.give, tt.replicas, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestAllowMultiDegraded(t *testing.T) {
	ctx := context.Background()
	f := newFaulty(t)
	s := mustNew(t, f, failover.WithFailureThreshold(1), failover.WithProbeInterval(time.Hour), failover.WithReplicas(2), failover.WithTimeout(time.Minute))
	defer s.Close()
	reqs := []sluice.Request{
		{Key: "a", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 4, Period: time.Hour}, N: 1},
		{Key: "b", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Hour}, N: 1},
	}
	ds, err := s.AllowMulti(ctx, reqs)
	if err != nil || !ds[0].Allowed || !ds[1].Allowed {
		t.Fatalf("AllowMulti healthy = %+v, %v; want both admitted", ds, err)
	}
	f.mode.Store(failing)
	open := slices.Clone(reqs) // one request fails open, the other by default: FailOpen
	open[0].Limit = open[0].Limit.WithFailureMode(sluice.FailOpen)
	admitted := 0
	for range 5 {
		ds, err := s.AllowMulti(ctx, open)
		if err != nil {
			t.Fatal(err)
		}
		if ds[0].Allowed != ds[1].Allowed {
			t.Fatalf("AllowMulti = %+v, want all or nothing", ds)
		}
		if ds[0].Allowed {
			admitted++
		}
	}
	if admitted != 2 { // "a" at 4/2 per hour locally
		t.Errorf("FailOpen AllowMulti admitted %d, want 2 (Rate 4 / 2 replicas)", admitted)
	}
	if st := s.Stats(); st.Degraded != 10 || st.DegradedAllowed != 4 {
		t.Errorf("Stats() = %+v, want 10 degraded decisions (5 calls × 2 requests), 4 admitted", st)
	}
	ds, _ = s.AllowMulti(ctx, reqs) // FailClosed
	if ds[0].Allowed || ds[1].Allowed || ds[0].RetryAfter != time.Hour || !ds[0].Degraded || !ds[1].Degraded {
		t.Errorf("FailClosed AllowMulti = %+v, want all denied with RetryAfter 1h, degraded", ds)
	}
	// The strictest mode of the requests decides: closed before open.
	mixed := slices.Clone(open)
	mixed[1].Limit = mixed[1].Limit.WithFailureMode(sluice.FailClosed)
	mixed[0].Key = "fresh" // its local share is untouched
	if ds, _ = s.AllowMulti(ctx, mixed); ds[0].Allowed || ds[1].Allowed {
		t.Errorf("AllowMulti of an open and a closed request = %+v, want all denied (closed is stricter)", ds)
	}
}

func TestAllowMultiUnsupported(t *testing.T) {
	s := mustNew(t, onlyStore{memstore.New()})
	defer s.Close()
	_, err := s.AllowMulti(context.Background(), []sluice.Request{{Key: "a", Limit: perSec, N: 1}})
	if !errors.Is(err, sluice.ErrMultiUnsupported) {
		t.Errorf("AllowMulti on a plain Store error = %v, want ErrMultiUnsupported", err)
	}
}

type onlyStore struct{ s sluice.Store }

func (o onlyStore) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	return o.s.AllowN(ctx, key, lim, n)
}

func TestCloseStopsProberAndRejects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t, memstore.WithSweepInterval(0))
		f.mode.Store(failing)
		s := mustNew(t, f, failover.WithFailureThreshold(1))
		s.AllowN(context.Background(), "k", perSec, 1)
		if s.Ready() {
			t.Fatal("breaker not open")
		}
		s.Close()
		synctest.Wait() // every goroutine of the bubble has returned or blocks durably
		if _, err := s.AllowN(context.Background(), "k", perSec, 1); !errors.Is(err, sluice.ErrClosed) {
			t.Errorf("AllowN after Close error = %v, want ErrClosed", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("second Close = %v", err)
		}
	})
}

func TestDegradedPeekIsAllowed(t *testing.T) {
	f := newFaulty(t)
	f.mode.Store(failing)
	s := mustNew(t, f, failover.WithFailureThreshold(1))
	defer s.Close()
	for i := range 3 {
		d, err := s.AllowN(context.Background(), "k", perSec, 0)
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Errorf("peek #%d while failing = %+v, %v; want allowed (it admits nothing), Remaining 0", i, d, err)
		}
	}
	if st := s.Stats(); st.Degraded != 3 || st.DegradedAllowed != 3 {
		t.Errorf("Stats() = %+v, want 3 degraded peeks", st)
	}
}

var ctx0 = context.Background()

func TestLoggerReportsBreakerChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		f := newFaulty(t, memstore.WithSweepInterval(0))
		s := mustNew(t, f, failover.WithFailureThreshold(1), failover.WithLogger(log))
		defer s.Close()
		f.mode.Store(failing)
		s.AllowN(context.Background(), "k", perSec, 1)
		f.mode.Store(healthy)
		time.Sleep(150 * time.Millisecond)
		synctest.Wait()
		out := buf.String()
		for _, want := range []string{"level=WARN msg=\"failover: breaker opened", "cause=\"failover: shared store unavailable: boom", "level=DEBUG msg=\"failover: degraded decision\" key=k", "level=INFO msg=\"failover: breaker closed"} {
			if !strings.Contains(out, want) {
				t.Errorf("log lacks %q:\n%s", want, out)
			}
		}
	})
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
