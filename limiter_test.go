package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// newLimiter returns a Limiter on a fresh memstore without a sweeper, so
// that it leaves no goroutine behind in a synctest bubble.
func newLimiter(t *testing.T, opts ...sluice.Option) *sluice.Limiter {
	t.Helper()
	l := sluice.New(memstore.New(memstore.WithSweepInterval(0)), opts...)
	t.Cleanup(func() { l.Close() })
	return l
}

// fill spends n units of key, failing the test unless they are admitted.
func fill(t *testing.T, l *sluice.Limiter, key string, lim sluice.Limit, n int) {
	t.Helper()
	d, err := l.AllowN(t.Context(), key, lim, n)
	if err != nil || !d.Allowed {
		t.Fatalf("AllowN(%q, %v, %d) = %+v, %v, want allowed", key, lim, n, d, err)
	}
}

// TestWaitSleepsExactlyRetryAfter: with no jitter, Wait is admitted after
// exactly the RetryAfter of the denial, to the µs of the fake clock.
func TestWaitSleepsExactlyRetryAfter(t *testing.T) {
	tests := []struct {
		name      string
		lim       sluice.Limit
		offset    time.Duration // after midnight, before filling
		fill      int
		wantRetry time.Duration
	}{
		{"gcra 3/s", sluice.PerSecond(3), 0, 3, 333_334 * time.Microsecond},
		{"gcra 10/s", sluice.PerSecond(10), 0, 10, 100 * time.Millisecond},
		{"token bucket 7/s burst 2", sluice.PerSecond(7).With(sluice.TokenBucket).WithBurst(2), 0, 2, 142_858 * time.Microsecond},
		{"fixed window to its end", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Second}, 250 * time.Millisecond, 2, 750 * time.Millisecond},
		{"sliding log until the oldest leaves", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: 500 * time.Millisecond}, 0, 5, 500 * time.Millisecond},
		{"sliding window, closed form", sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 10, Period: time.Second}, 0, 10, time.Second + time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLimiter(t, sluice.WithMaxJitter(0))
				time.Sleep(tt.offset)
				fill(t, l, "k", tt.lim, tt.fill)
				denied, err := l.Allow(t.Context(), "k", tt.lim)
				if err != nil || denied.Allowed || denied.RetryAfter != tt.wantRetry {
					t.Fatalf("Allow after filling = %+v, %v, want denied with RetryAfter %v", denied, err, tt.wantRetry)
				}
				start := time.Now()
				d, err := l.Wait(t.Context(), "k", tt.lim, 1)
				if err != nil || !d.Allowed || d.Limit != tt.lim {
					t.Fatalf("Wait = %+v, %v, want allowed under %v", d, err, tt.lim)
				}
				if got := time.Since(start); got != tt.wantRetry {
					t.Errorf("Wait slept %v, want exactly RetryAfter %v", got, tt.wantRetry)
				}
			})
		})
	}
}

// TestWaitNoSleepWhenAllowed: an admissible request, or a peek, returns at
// once.
func TestWaitNoSleepWhenAllowed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t)
		lim := sluice.PerSecond(1)
		start := time.Now()
		for _, n := range []int{1, 0, 0} {
			d, err := l.Wait(t.Context(), "k", lim, n)
			if err != nil || !d.Allowed {
				t.Fatalf("Wait(n=%d) = %+v, %v, want allowed", n, d, err)
			}
		}
		if got := time.Since(start); got != 0 {
			t.Errorf("Wait slept %v, want 0", got)
		}
	})
}

// TestWaitJitter: the jitter added to RetryAfter stays within
// min(max jitter, RetryAfter/10), and is not always 0.
func TestWaitJitter(t *testing.T) {
	tests := []struct {
		name      string
		opts      []sluice.Option
		lim       sluice.Limit
		wantRetry time.Duration
		wantMax   time.Duration // largest jitter
	}{
		{"default", nil, sluice.PerSecond(3), 333_334 * time.Microsecond, sluice.DefaultMaxJitter},
		{"a tenth of a short wait", nil, sluice.Every(10*time.Millisecond, 0), 10 * time.Millisecond, time.Millisecond},
		{"a tenth of a long wait", []sluice.Option{sluice.WithMaxJitter(time.Hour)}, sluice.PerSecond(3), 333_334 * time.Microsecond, 33_333_400 * time.Nanosecond},
		{"a set maximum", []sluice.Option{sluice.WithMaxJitter(2 * time.Millisecond)}, sluice.PerSecond(3), 333_334 * time.Microsecond, 2 * time.Millisecond},
		{"a negative maximum is none", []sluice.Option{sluice.WithMaxJitter(-time.Second)}, sluice.PerSecond(3), 333_334 * time.Microsecond, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLimiter(t, tt.opts...)
				seen := map[time.Duration]bool{}
				for i := range 30 {
					key := fmt.Sprint("k", i)
					fill(t, l, key, tt.lim, tt.lim.Capacity())
					start := time.Now()
					if d, err := l.Wait(t.Context(), key, tt.lim, 1); err != nil || !d.Allowed {
						t.Fatalf("Wait = %+v, %v, want allowed", d, err)
					}
					jitter := time.Since(start) - tt.wantRetry
					if jitter < 0 || jitter > tt.wantMax {
						t.Fatalf("Wait slept RetryAfter %v + %v, want a jitter within [0, %v]", tt.wantRetry, jitter, tt.wantMax)
					}
					seen[jitter] = true
				}
				if want := tt.wantMax > 0; (len(seen) > 1) != want {
					t.Errorf("30 waits saw jitters %v; want them to vary: %v", seen, want)
				}
			})
		})
	}
}

// TestWaitDeadline: when the deadline is nearer than the wait, Wait fails
// at once with ErrWouldExceedDeadline and the denying Decision, without
// sleeping and without counting anything.
func TestWaitDeadline(t *testing.T) {
	tests := []struct {
		name     string
		deadline time.Duration
		wantErr  string
	}{
		{"well before", 100 * time.Millisecond, `sluice: wait would exceed context deadline: "k" needs 333.334ms, deadline in 100ms`},
		{"exactly at the admission", 333_334 * time.Microsecond, `sluice: wait would exceed context deadline: "k" needs 333.334ms, deadline in 333.334ms`},
		{"1µs before", 333_333 * time.Microsecond, `sluice: wait would exceed context deadline: "k" needs 333.334ms, deadline in 333.333ms`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLimiter(t, sluice.WithMaxJitter(0))
				lim := sluice.PerSecond(3)
				fill(t, l, "k", lim, 3)
				ctx, cancel := context.WithTimeout(t.Context(), tt.deadline)
				defer cancel()
				start := time.Now()
				d, err := l.Wait(ctx, "k", lim, 1)
				if got := time.Since(start); got != 0 {
					t.Errorf("Wait slept %v before failing, want 0", got)
				}
				if !errors.Is(err, sluice.ErrWouldExceedDeadline) || err.Error() != tt.wantErr {
					t.Errorf("Wait error = %v, want %q", err, tt.wantErr)
				}
				want := sluice.Decision{Limit: lim, RetryAfter: 333_334 * time.Microsecond, ResetAfter: time.Second}
				if diff := cmp.Diff(want, d); diff != "" {
					t.Errorf("Wait decision (-want +got):\n%s", diff)
				}
				// Nothing was counted: the key is admitted exactly on time.
				time.Sleep(333_334 * time.Microsecond)
				fill(t, l, "k", lim, 1)
			})
		})
	}
}

// TestWaitDeadlineAfterRetry: a deadline after the admission time, but
// within the jitter, must not fail the Wait: the jitter is no reason to
// miss a deadline the request itself meets.
func TestWaitDeadlineAfterRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, sluice.WithMaxJitter(time.Hour))
		lim := sluice.PerSecond(3)
		for i := range 20 {
			key := fmt.Sprint("k", i)
			fill(t, l, key, lim, 3)
			ctx, cancel := context.WithTimeout(t.Context(), 333_334*time.Microsecond+time.Microsecond)
			d, err := l.Wait(ctx, key, lim, 1)
			cancel()
			if err != nil || !d.Allowed {
				t.Fatalf("Wait with a deadline 1µs after RetryAfter = %+v, %v, want allowed", d, err)
			}
		}
	})
}

// TestWaitCancel: cancelling the context while Wait sleeps returns the
// context's error and the denying Decision at once.
func TestWaitCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, sluice.WithMaxJitter(0))
		lim := sluice.PerSecond(3)
		fill(t, l, "k", lim, 3)
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			time.Sleep(100 * time.Millisecond)
			cancel()
		}()
		start := time.Now()
		d, err := l.Wait(ctx, "k", lim, 1)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Wait error = %v, want context.Canceled", err)
		}
		if got := time.Since(start); got != 100*time.Millisecond {
			t.Errorf("Wait returned after %v, want 100ms (at the cancel)", got)
		}
		if d.Allowed || d.RetryAfter != 333_334*time.Microsecond {
			t.Errorf("Wait decision = %+v, want the denial with RetryAfter 333.334ms", d)
		}
	})
}

// TestWaitDoneContext: a context already done fails before deciding.
func TestWaitDoneContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		d, err := l.Wait(ctx, "k", sluice.PerSecond(3), 1)
		if !errors.Is(err, context.Canceled) || d.Allowed {
			t.Fatalf("Wait on a cancelled context = %+v, %v, want context.Canceled", d, err)
		}
		// Nothing was counted.
		fill(t, l, "k", sluice.PerSecond(3), 3)
	})
}

// TestWaitErrors: invalid requests fail at once, without sleeping.
func TestWaitErrors(t *testing.T) {
	tests := []struct {
		name   string
		key    string
		lim    sluice.Limit
		n      int
		wantIs error
	}{
		{"n above capacity", "k", sluice.PerSecond(10), 11, sluice.ErrExceedsCapacity},
		{"n above burst", "k", sluice.PerSecond(10).WithBurst(2), 3, sluice.ErrExceedsCapacity},
		{"negative n", "k", sluice.PerSecond(10), -1, sluice.ErrInvalidCost},
		{"empty key", "", sluice.PerSecond(10), 1, sluice.ErrInvalidKey},
		{"invalid limit", "k", sluice.Limit{Rate: 1, Period: time.Second}, 1, sluice.ErrInvalidLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLimiter(t)
				start := time.Now()
				d, err := l.Wait(t.Context(), tt.key, tt.lim, tt.n)
				if !errors.Is(err, tt.wantIs) || d.Allowed {
					t.Errorf("Wait(%q, %v, %d) = %+v, %v, want %v", tt.key, tt.lim, tt.n, d, err, tt.wantIs)
				}
				if got := time.Since(start); got != 0 {
					t.Errorf("Wait slept %v before failing, want 0", got)
				}
			})
		})
	}
}

// TestWaitGroups: twelve concurrent callers on a sliding log of five per
// half second are admitted in groups of 5, 5 and 2, one window apart, and
// no half second ever holds more than five.
func TestWaitGroups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t) // default jitter
		lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: 500 * time.Millisecond}
		start := time.Now()
		var (
			mu       sync.Mutex
			admitted []time.Duration
			wg       sync.WaitGroup
		)
		for range 12 {
			wg.Go(func() {
				d, err := l.Wait(t.Context(), "upstream", lim, 1)
				if err != nil || !d.Allowed {
					t.Errorf("Wait = %+v, %v, want allowed", d, err)
					return
				}
				mu.Lock()
				admitted = append(admitted, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
		groups := make([]int, 3)
		for _, at := range admitted {
			groups[min(int(at/lim.Period), 2)]++
		}
		if diff := cmp.Diff([]int{5, 5, 2}, groups); diff != "" {
			t.Errorf("admissions per half second (-want +got):\n%s\nat %v", diff, admitted)
		}
		for _, a := range admitted {
			in := 0
			for _, b := range admitted {
				if b >= a && b < a+lim.Period {
					in++
				}
			}
			if in > 5 {
				t.Errorf("%d admissions in [%v, %v), more than 5: %v", in, a, a+lim.Period, admitted)
			}
		}
	})
}

func TestAllow(t *testing.T) {
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Hour}
	tests := []struct {
		at   time.Duration // after midnight
		n    int
		want sluice.Decision
	}{
		{15 * time.Minute, 1, sluice.Decision{Allowed: true, Limit: lim, Remaining: 2, ResetAfter: 45 * time.Minute}},
		{15 * time.Minute, 0, sluice.Decision{Allowed: true, Limit: lim, Remaining: 2, ResetAfter: 45 * time.Minute}},
		{30 * time.Minute, 3, sluice.Decision{Allowed: false, Limit: lim, Remaining: 2, RetryAfter: 30 * time.Minute, ResetAfter: 30 * time.Minute}},
		{30 * time.Minute, 2, sluice.Decision{Allowed: true, Limit: lim, Remaining: 0, ResetAfter: 30 * time.Minute}},
		{59 * time.Minute, 1, sluice.Decision{Allowed: false, Limit: lim, Remaining: 0, RetryAfter: time.Minute, ResetAfter: time.Minute}},
		{60 * time.Minute, 3, sluice.Decision{Allowed: true, Limit: lim, Remaining: 0, ResetAfter: time.Hour}},
	}
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t)
		midnight := time.Now()
		for i, tt := range tests {
			time.Sleep(time.Until(midnight.Add(tt.at)))
			got, err := l.AllowN(t.Context(), "k", lim, tt.n)
			if diff := cmp.Diff(tt.want, got); err != nil || diff != "" {
				t.Errorf("step %d: AllowN(%q, %d) at +%v = %+v, %v (-want +got):\n%s", i, "k", tt.n, tt.at, got, err, diff)
			}
		}
		// Allow is AllowN(…, 1).
		d, err := l.Allow(t.Context(), "other", lim)
		want := sluice.Decision{Allowed: true, Limit: lim, Remaining: 2, ResetAfter: time.Hour}
		if diff := cmp.Diff(want, d); err != nil || diff != "" {
			t.Errorf("Allow(%q) = %v (-want +got):\n%s", "other", err, diff)
		}
	})
}

// plainStore is a Store with no AllowMulti and no Close.
type plainStore struct{ s sluice.Store }

func (p plainStore) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	return p.s.AllowN(ctx, key, lim, n)
}

func TestAllowMulti(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t)
		ctx := t.Context()
		perSec := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Second}
		perMin := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Minute}
		reqs := []sluice.Request{{Key: "tenant", Limit: perSec, N: 1}, {Key: "tenant", Limit: perMin, N: 1}}

		got, err := l.AllowMulti(ctx, reqs)
		want := []sluice.Decision{
			{Allowed: true, Limit: perSec, Remaining: 1, ResetAfter: time.Second},
			{Allowed: true, Limit: perMin, Remaining: 2, ResetAfter: time.Minute},
		}
		if diff := cmp.Diff(want, got); err != nil || diff != "" {
			t.Fatalf("AllowMulti #1 = %v (-want +got):\n%s", err, diff)
		}

		// Asking for 2 per request: the per-second limit blocks, so nothing
		// is counted, not even under the per-minute limit that had room.
		reqs[0].N, reqs[1].N = 2, 2
		got, err = l.AllowMulti(ctx, reqs)
		want = []sluice.Decision{
			{Allowed: false, Limit: perSec, Remaining: 1, RetryAfter: time.Second, ResetAfter: time.Second},
			{Allowed: false, Limit: perMin, Remaining: 2, ResetAfter: time.Minute},
		}
		if diff := cmp.Diff(want, got); err != nil || diff != "" {
			t.Fatalf("AllowMulti #2 = %v (-want +got):\n%s", err, diff)
		}
		if r := sluice.CombineRetry(got); r != time.Second {
			t.Errorf("CombineRetry = %v, want 1s", r)
		}

		time.Sleep(time.Second)
		got, err = l.AllowMulti(ctx, reqs)
		want = []sluice.Decision{
			{Allowed: true, Limit: perSec, Remaining: 0, ResetAfter: time.Second},
			{Allowed: true, Limit: perMin, Remaining: 0, ResetAfter: time.Minute - time.Second},
		}
		if diff := cmp.Diff(want, got); err != nil || diff != "" {
			t.Fatalf("AllowMulti #3 after 1s = %v (-want +got):\n%s", err, diff)
		}
	})
}

func TestAllowMultiUnsupported(t *testing.T) {
	st := memstore.New(memstore.WithSweepInterval(0))
	defer st.Close()
	l := sluice.New(plainStore{st})
	ds, err := l.AllowMulti(t.Context(), []sluice.Request{{Key: "k", Limit: sluice.PerSecond(1), N: 1}})
	if !errors.Is(err, sluice.ErrMultiUnsupported) || ds != nil {
		t.Fatalf("AllowMulti through a plain Store = %v, %v, want ErrMultiUnsupported", ds, err)
	}
	if !strings.Contains(err.Error(), "sluice_test.plainStore") {
		t.Errorf("AllowMulti error %q does not name the store's type", err)
	}
	// The plain store still decides single requests.
	if d, err := l.Allow(t.Context(), "k", sluice.PerSecond(1)); err != nil || !d.Allowed {
		t.Errorf("Allow through a plain Store = %+v, %v, want allowed", d, err)
	}
}

// TestNilStore: a Limiter on a nil Store is an error on every call, never
// a panic.
func TestNilStore(t *testing.T) {
	l := sluice.New(nil)
	const want = "sluice: New: Store is nil"
	if d, err := l.Allow(t.Context(), "k", sluice.PerSecond(1)); err == nil || err.Error() != want {
		t.Errorf("Allow = %+v, %v; want error %s", d, err, want)
	}
	if d, err := l.Wait(t.Context(), "k", sluice.PerSecond(1), 1); err == nil || err.Error() != want {
		t.Errorf("Wait = %+v, %v; want error %s", d, err, want)
	}
	if ds, err := l.AllowMulti(t.Context(), []sluice.Request{{Key: "k", Limit: sluice.PerSecond(1), N: 1}}); err == nil || err.Error() != want {
		t.Errorf("AllowMulti = %v, %v; want error %s", ds, err, want)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close() = %v, want nil", err)
	}
}

// closer is a Store whose Close reports how often it was called.
type closer struct {
	plainStore
	closed int
	err    error
}

func (c *closer) Close() error { c.closed++; return c.err }

func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.WithSweepInterval(0))
		l := sluice.New(st)
		ctx := t.Context()
		lim := sluice.PerSecond(5)
		fill(t, l, "k", lim, 1)
		if l.Store() != sluice.Store(st) {
			t.Errorf("Store() = %v, want the memstore given to New", l.Store())
		}
		if err := l.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
		if err := l.Close(); err != nil {
			t.Errorf("second Close = %v, want nil", err)
		}
		if _, err := l.Allow(ctx, "k", lim); !errors.Is(err, sluice.ErrClosed) {
			t.Errorf("Allow after Close = %v, want ErrClosed", err)
		}
		if _, err := l.AllowN(ctx, "k", lim, 0); !errors.Is(err, sluice.ErrClosed) {
			t.Errorf("AllowN after Close = %v, want ErrClosed", err)
		}
		if _, err := l.Wait(ctx, "k", lim, 1); !errors.Is(err, sluice.ErrClosed) {
			t.Errorf("Wait after Close = %v, want ErrClosed", err)
		}
		if _, err := l.AllowMulti(ctx, []sluice.Request{{Key: "k", Limit: lim, N: 1}}); !errors.Is(err, sluice.ErrClosed) {
			t.Errorf("AllowMulti after Close = %v, want ErrClosed", err)
		}
		// Close closed the store too.
		if _, err := st.AllowN(ctx, "k", lim, 1); !errors.Is(err, sluice.ErrClosed) {
			t.Errorf("memstore AllowN after Limiter.Close = %v, want ErrClosed", err)
		}
	})
}

func TestCloseStoreError(t *testing.T) {
	st := memstore.New(memstore.WithSweepInterval(0))
	defer st.Close()
	boom := errors.New("boom")
	c := &closer{plainStore: plainStore{st}, err: boom}
	l := sluice.New(c)
	if err := l.Close(); !errors.Is(err, boom) {
		t.Errorf("Close = %v, want the store's error", err)
	}
	if err := l.Close(); err != nil || c.closed != 1 {
		t.Errorf("second Close = %v with the store closed %d times, want nil and once", err, c.closed)
	}
	// A store without Close is fine.
	if err := sluice.New(plainStore{st}).Close(); err != nil {
		t.Errorf("Close of a Limiter on a store without Close = %v", err)
	}
}

// TestWaitClosedWhileSleeping: a Limiter closed while Wait sleeps makes the
// retry fail with ErrClosed.
func TestWaitClosedWhileSleeping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, sluice.WithMaxJitter(0))
		lim := sluice.PerSecond(3)
		fill(t, l, "k", lim, 3)
		go func() {
			time.Sleep(10 * time.Millisecond)
			l.Close()
		}()
		start := time.Now()
		_, err := l.Wait(t.Context(), "k", lim, 1)
		if !errors.Is(err, sluice.ErrClosed) {
			t.Errorf("Wait across Close = %v, want ErrClosed", err)
		}
		if got := time.Since(start); got != 333_334*time.Microsecond {
			t.Errorf("Wait returned after %v, want at the retry (333.334ms)", got)
		}
	})
}
