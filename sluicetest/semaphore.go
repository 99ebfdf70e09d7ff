package sluicetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// SemaphoreCases are the conformance cases of concurrency limits, in the
// order Run runs them (as subtests of "Semaphore") on every store that
// supports concurrency limits; RunSemaphore runs them alone. Each takes a
// fresh store: on the fake Clock every TTL's end and RetryAfter is checked
// to the microsecond, on real time to within the tolerance, with TTLs of
// 20 × the tolerance (a second of the cases).
//
//   - MaxHeld: at most Max permits held, from one goroutine and from many.
//   - ReleaseFrees: a release frees its slot at once; releasing again, or a
//     holder or key never seen, is nil and frees nothing else.
//   - ExpiresAtTTL: a permit is held until its TTL ends, not a
//     microsecond less, and is free at that instant.
//   - Renew: Acquire by a holder that holds renews its TTL and counts once.
//   - Extend: Extend renews the TTL from the store's now.
//   - ExtendLost: Extend of an expired (or never held, or released) permit
//     is a denial and an error wrapping sluice.ErrPermitLost.
//   - Invalid: an invalid Max, TTL, holder or key is a *sluice.LimitError
//     naming the field, before any state is touched.
//   - RetryAfter: a denial's RetryAfter is the time to the earliest TTL
//     end of the permits held.
var SemaphoreCases = []SemaphoreCase{
	{"MaxHeld", (*env).semMaxHeld},
	{"ReleaseFrees", (*env).semReleaseFrees},
	{"ExpiresAtTTL", (*env).semExpiresAtTTL},
	{"Renew", (*env).semRenew},
	{"Extend", (*env).semExtend},
	{"ExtendLost", (*env).semExtendLost},
	{"Invalid", (*env).semInvalid},
	{"RetryAfter", (*env).semRetryAfter},
}

// SemaphoreCase is one conformance case of concurrency limits.
type SemaphoreCase struct {
	Name string
	run  func(e *env, sem sluice.Semaphore, key string)
}

// RunSemaphore runs only the SemaphoreCases, with Run's options, against
// the stores newStore returns; a store that is not a sluice.Semaphore
// fails the test.
func RunSemaphore(t *testing.T, newStore func(t *testing.T) sluice.Store, opts ...Option) {
	t.Helper()
	cfg := &config{tol: DefaultTolerance}
	for _, o := range opts {
		o(cfg)
	}
	switch {
	case cfg.err != nil:
		t.Fatal(cfg.err)
	case newStore == nil && cfg.clocked == nil:
		t.Fatal("sluicetest: RunSemaphore: no store: newStore is nil and WithClock is not given")
	}
	s := &suite{cfg: cfg, newStore: newStore}
	if !s.supports(t, capSemaphore) {
		t.Fatal("sluicetest: RunSemaphore: the store does not support concurrency limits (sluice.ErrSemaphoreUnsupported)")
	}
	s.testSemaphore(t)
}

// testSemaphore runs the SemaphoreCases when the store supports
// concurrency limits.
func (s *suite) testSemaphore(t *testing.T) {
	s.need(t, capSemaphore)
	g := s.group(t)
	for _, c := range SemaphoreCases {
		g.run(c.Name, func(t *testing.T) {
			e := s.env(t, 0)
			c.run(e, e.f, newKey(t))
		})
	}
	g.wait()
}

// climit is a ConcurrencyLimit with the lease scaled to the store's time.
func (e *env) climit(max int, lease time.Duration) sluice.ConcurrencyLimit {
	return sluice.ConcurrencyLimit{Max: max, TTL: e.scale(lease).Round(time.Millisecond)}
}

// acquire calls Acquire and checks the invariants of every PermitDecision;
// the lease end of an acquired permit is the store's now plus the lease.
func (e *env) acquire(sem sluice.Semaphore, key string, lim sluice.ConcurrencyLimit, holder string) sluice.PermitDecision {
	e.t.Helper()
	before := e.clockNow()
	d, err := sem.Acquire(context.Background(), key, lim, holder)
	after := e.clockNow()
	if err != nil {
		e.t.Fatalf("Acquire(%q, %v, %q) at %v: %v", key, lim, holder, e.now(), err)
	}
	e.checkPermit("Acquire", d, lim, before, after)
	return d
}

// extend calls Extend and checks the PermitDecision as acquire does;
// an error is returned, not reported.
func (e *env) extend(sem sluice.Semaphore, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	e.t.Helper()
	before := e.clockNow()
	d, err := sem.Extend(context.Background(), key, lim, holder)
	after := e.clockNow()
	if err == nil || errors.Is(err, sluice.ErrPermitLost) {
		e.checkPermit("Extend", d, lim, before, after)
	}
	if d.Acquired && err != nil {
		e.t.Errorf("Extend(%q, %q) = %+v with error %v, want no error when acquired", key, holder, d, err)
	}
	if !d.Acquired && !errors.Is(err, sluice.ErrPermitLost) {
		e.t.Errorf("Extend(%q, %q) = %+v, %v, want an error wrapping ErrPermitLost when not acquired", key, holder, d, err)
	}
	return d, err
}

func (e *env) release(sem sluice.Semaphore, key, holder string) {
	e.t.Helper()
	if err := sem.Release(context.Background(), key, holder); err != nil {
		e.t.Fatalf("Release(%q, %q) at %v: %v", key, holder, e.now(), err)
	}
}

func (e *env) checkPermit(op string, d sluice.PermitDecision, lim sluice.ConcurrencyLimit, before, after time.Time) {
	e.t.Helper()
	sl := e.slack()
	switch {
	case d.Limit != lim:
		e.t.Errorf("%s(%v).Limit = %v, want the request's limit", op, lim, d.Limit)
	case d.Degraded:
		e.t.Errorf("%s(%v) = %+v: Degraded from a store that answered", op, lim, d)
	case d.Held < 0 || d.Acquired && d.Held > lim.Max:
		e.t.Errorf("%s(%v) = %+v: Held not within [0, %d]", op, lim, d, lim.Max)
	case d.Acquired && d.Held < 1:
		e.t.Errorf("%s(%v) = %+v: acquired with Held < 1", op, lim, d)
	case d.Acquired && d.RetryAfter != 0:
		e.t.Errorf("%s(%v) = %+v: acquired with a RetryAfter", op, lim, d)
	case d.Acquired && (d.Expires.Before(before.Add(lim.TTL-sl)) || d.Expires.After(after.Add(lim.TTL+sl))):
		e.t.Errorf("%s(%v).Expires = %v, want the store's now plus the TTL, within [%v, %v]", op, lim, d.Expires, before.Add(lim.TTL), after.Add(lim.TTL))
	case !d.Acquired && !d.Expires.IsZero():
		e.t.Errorf("%s(%v) = %+v: not acquired with an Expires", op, lim, d)
	case d.RetryAfter < 0 || d.RetryAfter > lim.TTL+sl:
		e.t.Errorf("%s(%v).RetryAfter = %v, want within [0, the lease]", op, lim, d.RetryAfter)
	case op == "Acquire" && !d.Acquired && (d.Held < lim.Max || d.RetryAfter <= 0):
		e.t.Errorf("Acquire(%v) = %+v: a denial needs Max held and a RetryAfter", lim, d)
	}
}

// heldAt checks that exactly want permits of key are held, by acquiring
// the rest with fresh holders (and releasing them).
func (e *env) heldAt(sem sluice.Semaphore, key string, lim sluice.ConcurrencyLimit, want int) {
	e.t.Helper()
	var got []string
	for i := range lim.Max + 1 {
		h := fmt.Sprintf("probe-%d", i)
		if d := e.acquire(sem, key, lim, h); !d.Acquired {
			if d.Held != lim.Max {
				e.t.Errorf("a denial reports Held %d, want %d", d.Held, lim.Max)
			}
			break
		}
		got = append(got, h)
	}
	for _, h := range got {
		e.release(sem, key, h)
	}
	if held := lim.Max - len(got); held != want {
		e.t.Errorf("%d permits of %q held at %v, want %d", held, key, e.now(), want)
	}
}

func (e *env) semMaxHeld(sem sluice.Semaphore, key string) {
	t := e.t
	lim := e.climit(3, time.Minute)
	for i, h := range []string{"a", "b", "c"} {
		if d := e.acquire(sem, key, lim, h); !d.Acquired || d.Held != i+1 {
			t.Fatalf("Acquire %q = %+v, want acquired, Held %d", h, d, i+1)
		}
	}
	if d := e.acquire(sem, key, lim, "d"); d.Acquired || d.Held != 3 {
		t.Fatalf("Acquire past Max = %+v, want denied, Held 3", d)
	}
	// A smaller Max admits nobody until fewer are held.
	if d := e.acquire(sem, key, e.climit(2, time.Minute), "d"); d.Acquired {
		t.Fatalf("Acquire under Max 2 with 3 held = %+v, want denied", d)
	}

	// Many goroutines: a holder counts itself in after Acquire and out
	// before Release, so the count never exceeds what the store holds.
	key2 := key + "/concurrent"
	var in, peak atomic.Int64
	var wg sync.WaitGroup
	const workers, rounds = 8, 40
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				h := fmt.Sprintf("w%d-%d", w, r)
				d, err := sem.Acquire(context.Background(), key2, lim, h)
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Acquired {
					continue
				}
				n := in.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				if n > int64(lim.Max) {
					t.Errorf("%d permits held at once, Max %d", n, lim.Max)
				}
				in.Add(-1)
				if err := sem.Release(context.Background(), key2, h); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if peak.Load() < 1 {
		t.Errorf("no goroutine acquired")
	}
	e.heldAt(sem, key2, lim, 0)
}

func (e *env) semReleaseFrees(sem sluice.Semaphore, key string) {
	t := e.t
	lim := e.climit(2, time.Minute)
	e.acquire(sem, key, lim, "a")
	e.acquire(sem, key, lim, "b")
	e.release(sem, key, "a")
	if d := e.acquire(sem, key, lim, "c"); !d.Acquired || d.Held != 2 {
		t.Fatalf("Acquire after a release = %+v, want acquired, Held 2", d)
	}
	e.release(sem, key, "a")     // released already
	e.release(sem, key, "never") // never held
	e.release(sem, key+"/none", "a")
	if d := e.acquire(sem, key, lim, "d"); d.Acquired || d.Held != 2 {
		t.Fatalf("Acquire after idempotent releases = %+v, want denied, Held 2 (b and c)", d)
	}
	e.release(sem, key, "b")
	e.release(sem, key, "c")
	e.heldAt(sem, key, lim, 0)
}

func (e *env) semExpiresAtTTL(sem sluice.Semaphore, key string) {
	t := e.t
	lim := e.climit(1, time.Second)
	d := e.acquire(sem, key, lim, "a")
	if !d.Acquired {
		t.Fatalf("Acquire = %+v", d)
	}
	start := d.Expires.Add(-lim.TTL)
	if e.exact() {
		e.c.Set(d.Expires.Add(-time.Microsecond))
		if d := e.acquire(sem, key, lim, "b"); d.Acquired || d.RetryAfter != time.Microsecond {
			t.Fatalf("Acquire 1µs before the lease ends = %+v, want denied, RetryAfter 1µs", d)
		}
		e.c.Set(d.Expires)
	} else {
		time.Sleep(time.Until(d.Expires.Add(-3 * e.cfg.tol)))
		if d := e.acquire(sem, key, lim, "b"); d.Acquired {
			t.Fatalf("Acquire %v before the lease ends = %+v, want denied", 3*e.cfg.tol, d)
		}
		time.Sleep(time.Until(d.Expires.Add(e.cfg.tol)))
	}
	if d := e.acquire(sem, key, lim, "b"); !d.Acquired || d.Held != 1 {
		t.Fatalf("Acquire at the lease's end (%v after the acquire) = %+v, want acquired, Held 1", e.clockNow().Sub(start), d)
	}
}

func (e *env) semRenew(sem sluice.Semaphore, key string) {
	t := e.t
	lim := e.climit(2, time.Second)
	e.acquire(sem, key, lim, "a")
	e.sleep(e.scale(600 * time.Millisecond))
	d := e.acquire(sem, key, lim, "a")
	if !d.Acquired || d.Held != 1 {
		t.Fatalf("Acquire again by the holder = %+v, want acquired, Held 1", d)
	}
	if d := e.acquire(sem, key, lim, "b"); !d.Acquired || d.Held != 2 {
		t.Fatalf("Acquire by another holder = %+v, want acquired, Held 2: the renewal counts once", d)
	}
	e.release(sem, key, "b")
	// Past the first lease, the renewed permit is still held.
	e.sleep(e.scale(600 * time.Millisecond))
	if d := e.acquire(sem, key, e.climit(1, time.Second), "c"); d.Acquired {
		t.Fatalf("Acquire under Max 1 after the first lease ended = %+v, want denied: the renewal holds", d)
	}
}

func (e *env) semExtend(sem sluice.Semaphore, key string) {
	t := e.t
	lim := e.climit(1, time.Second)
	e.acquire(sem, key, lim, "a")
	e.sleep(e.scale(800 * time.Millisecond))
	d, err := e.extend(sem, key, lim, "a")
	if err != nil || !d.Acquired || d.Held != 1 {
		t.Fatalf("Extend = %+v, %v, want acquired, Held 1", d, err)
	}
	e.sleep(e.scale(700 * time.Millisecond)) // 1.5s after the acquire
	den := e.acquire(sem, key, lim, "b")
	if den.Acquired {
		t.Fatalf("Acquire past the first lease of an extended permit = %+v, want denied", den)
	}
	if want := e.scale(300 * time.Millisecond); !near(den.RetryAfter, want, 2*e.slack()) {
		t.Errorf("RetryAfter = %v, want %v: the extended lease's end", den.RetryAfter, want)
	}
}

func (e *env) semExtendLost(sem sluice.Semaphore, key string) {
	t := e.t
	lim := e.climit(1, time.Second)
	if _, err := e.extend(sem, key, lim, "never"); !errors.Is(err, sluice.ErrPermitLost) {
		t.Fatalf("Extend of a permit never held: %v, want ErrPermitLost", err)
	}
	e.acquire(sem, key, lim, "a")
	e.sleep(e.scale(time.Second) + e.slack())
	if _, err := e.extend(sem, key, lim, "a"); !errors.Is(err, sluice.ErrPermitLost) {
		t.Fatalf("Extend of an expired permit: %v, want ErrPermitLost", err)
	}
	// The lost Extend took nothing: the slot is another's.
	if d := e.acquire(sem, key, lim, "b"); !d.Acquired {
		t.Fatalf("Acquire after a lost Extend = %+v, want acquired", d)
	}
	e.release(sem, key, "b")
	if _, err := e.extend(sem, key, lim, "b"); !errors.Is(err, sluice.ErrPermitLost) {
		t.Fatalf("Extend of a released permit: %v, want ErrPermitLost", err)
	}
	e.heldAt(sem, key, lim, 0)
}

func (e *env) semInvalid(sem sluice.Semaphore, key string) {
	t := e.t
	ctx := context.Background()
	ok := e.climit(1, time.Second)
	long := strings.Repeat("k", sluice.MaxKeyLen+1)
	holder := strings.Repeat("h", sluice.MaxHolderLen+1)
	cases := []struct {
		key, holder string
		lim         sluice.ConcurrencyLimit
		field       string
	}{
		{key, "h", sluice.ConcurrencyLimit{Max: 0, TTL: time.Second}, "Max"},
		{key, "h", sluice.ConcurrencyLimit{Max: -1, TTL: time.Second}, "Max"},
		{key, "h", sluice.ConcurrencyLimit{Max: sluice.MaxPermits + 1, TTL: time.Second}, "Max"},
		{key, "h", sluice.ConcurrencyLimit{Max: 1, TTL: sluice.MinTTL - time.Millisecond}, "TTL"},
		{key, "h", sluice.ConcurrencyLimit{Max: 1, TTL: sluice.MaxTTL + time.Millisecond}, "TTL"},
		{key, "h", sluice.ConcurrencyLimit{Max: 1, TTL: 10*time.Millisecond + time.Microsecond}, "TTL"},
		{key, "", ok, "Holder"},
		{key, holder, ok, "Holder"},
		{"", "h", ok, "Key"},
		{long, "h", ok, "Key"},
	}
	for _, c := range cases {
		calls := map[string]func() error{
			"Acquire": func() error { _, err := sem.Acquire(ctx, c.key, c.lim, c.holder); return err },
			"Extend":  func() error { _, err := sem.Extend(ctx, c.key, c.lim, c.holder); return err },
		}
		if c.lim == ok {
			calls["Release"] = func() error { return sem.Release(ctx, c.key, c.holder) }
		}
		for op, call := range calls {
			var le *sluice.LimitError
			if err := call(); !errors.As(err, &le) || le.Field != c.field {
				t.Errorf("%s(key of %d bytes, holder of %d bytes, %+v) = %v, want a *sluice.LimitError on %s", op, len(c.key), len(c.holder), c.lim, err, c.field)
			}
		}
	}
	// None of them took a slot.
	e.heldAt(sem, key, ok, 0)
}

func (e *env) semRetryAfter(sem sluice.Semaphore, key string) {
	t := e.t
	lim := e.climit(2, time.Second)
	e.acquire(sem, key, lim, "a")
	e.sleep(e.scale(300 * time.Millisecond))
	e.acquire(sem, key, lim, "b")
	e.sleep(e.scale(200 * time.Millisecond))
	d := e.acquire(sem, key, lim, "c")
	if want := e.scale(500 * time.Millisecond); d.Acquired || !near(d.RetryAfter, want, 2*e.slack()) {
		t.Fatalf("Acquire of a full key = %+v, want denied, RetryAfter %v (a's lease end)", d, want)
	}
	e.release(sem, key, "a")
	e.acquire(sem, key, lim, "a") // now a ends last
	d = e.acquire(sem, key, lim, "c")
	if want := e.scale(800 * time.Millisecond); d.Acquired || !near(d.RetryAfter, want, 2*e.slack()) {
		t.Fatalf("Acquire of a full key = %+v, want denied, RetryAfter %v (b's lease end)", d, want)
	}
}
