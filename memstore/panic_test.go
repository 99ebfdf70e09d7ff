package memstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// mustPanic runs f and reports whether it panicked.
func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatalf("%s: no panic, want the hook's", what)
		}
	}()
	f()
}

// within fails t unless f returns within d: a call blocked on a lock that
// a panic left held never returns (synctest cannot see a goroutine blocked
// on a sync.Mutex, so these tests run on real time, with bounded waits).
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v: a shard's lock is still held", what, d)
	}
}

// TestPanicSafety: a step that panics under a shard's lock (a test hook
// stands for a bug) releases the lock; the key's state is as before the
// call, later decisions on the same shard go on, the sweeper still sweeps
// it, and Close returns. Without deferred unlocks the next call on the
// shard blocks for ever.
func TestPanicSafety(t *testing.T) {
	for _, a := range allAlgorithms {
		t.Run(a.String(), func(t *testing.T) {
			within(t, time.Minute, "the calls after a panic", func() {
				// A standing clock, so that no window passes between the
				// calls, moved past every state's lifetime for the sweep.
				var clock atomic.Int64
				clock.Store(time.Unix(1_000_000_000, 0).UnixNano())
				now := func() time.Time { return time.Unix(0, clock.Load()) }
				// One shard, so that every key shares the lock that panicked.
				s := memstore.New(memstore.WithMaxKeys(100), memstore.WithSweepInterval(time.Millisecond), memstore.WithClock(now))
				lim := sluice.Limit{Algorithm: a, Rate: 3, Period: 50 * time.Millisecond}
				allow(t, s, "k", lim, 1)

				var panics atomic.Int32
				restore := memstore.SetStepHook(func() {
					if panics.Add(1) == 1 {
						panic("step hook")
					}
				})
				defer restore()
				mustPanic(t, "AllowN", func() { s.AllowN(ctx, "k", lim, 1) })
				panics.Store(0)
				mustPanic(t, "AllowMulti", func() {
					s.AllowMulti(ctx, []sluice.Request{{Key: "k", Limit: lim, N: 1}, {Key: "other", Limit: lim, N: 1}})
				})
				restore()

				// Nothing of the two panicking calls was counted.
				if d := allow(t, s, "k", lim, 0); d.Remaining != 2 {
					t.Errorf("peek after the panics = %+v, want Remaining 2", d)
				}
				if d := allow(t, s, "other", lim, 2); !d.Allowed || d.Remaining != 1 {
					t.Errorf("AllowN(other, 2) after the panics = %+v, want allowed, Remaining 1", d)
				}
				ds, err := s.AllowMulti(ctx, []sluice.Request{{Key: "k", Limit: lim, N: 2}, {Key: "new", Limit: lim, N: 1}})
				if err != nil || !ds[0].Allowed || ds[0].Remaining != 0 {
					t.Errorf("AllowMulti after the panics = %+v, %v; want k allowed with Remaining 0", ds, err)
				}
				// The sweeper still runs on the shard that panicked: once
				// every state has expired, it removes them (the deadline
				// only ends a sweeper that never runs).
				clock.Add(int64(time.Hour))
				for deadline := time.Now().Add(30 * time.Second); s.Len() != 0; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Errorf("Len() = %d 30s after every state expired, want 0 (swept)", s.Len())
						break
					}
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestPanicSafetyManyShards: the same on a store of many shards, where
// AllowMulti holds several locks at once.
func TestPanicSafetyManyShards(t *testing.T) {
	within(t, time.Minute, "the calls after a panic", func() {
		s := memstore.New()
		lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 5, Period: time.Second}
		reqs := make([]sluice.Request, sluice.MaxMultiRequests)
		for i := range reqs {
			reqs[i] = sluice.Request{Key: fmt.Sprint("key", i), Limit: lim, N: 1}
		}
		restore := memstore.SetStepHook(func() { panic("step hook") })
		defer restore()
		mustPanic(t, "AllowMulti", func() { s.AllowMulti(ctx, reqs) })
		restore()
		ds, err := s.AllowMulti(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range ds {
			if !d.Allowed || d.Remaining != 4 {
				t.Fatalf("decision %d after the panic = %+v, want allowed with Remaining 4", i, d)
			}
		}
		s.Close()
	})
}

// TestOnEvict: WithOnEvict runs once per live state evicted, never for an
// expired state removed to make room; the store holds at most WithMaxKeys
// states.
func TestOnEvict(t *testing.T) {
	c := sluicetest.NewClock(sluicetest.Epoch())
	var evicted atomic.Int64
	const maxKeys = 100
	s := newStore(t, memstore.WithClock(c.Now), memstore.WithMaxKeys(maxKeys), memstore.WithOnEvict(func() { evicted.Add(1) }))
	short := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Second}
	long := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Hour}
	for i := range maxKeys {
		allow(t, s, fmt.Sprint("short", i), short, 1)
	}
	c.Advance(time.Second)
	for i := range maxKeys {
		allow(t, s, fmt.Sprint("long", i), long, 1)
	}
	if n, e := s.Len(), evicted.Load(); n != maxKeys || e != 0 {
		t.Fatalf("after replacing expired states: Len() = %d, evictions %d; want %d and 0", n, e, maxKeys)
	}
	for i := range 10 {
		allow(t, s, fmt.Sprint("more", i), long, 1)
	}
	if n, e := s.Len(), evicted.Load(); n != maxKeys || e != 10 || s.Evictions() != 10 {
		t.Errorf("after 10 more keys: Len() = %d, WithOnEvict %d, Evictions() %d; want %d, 10, 10", n, e, s.Evictions(), maxKeys)
	}
}
