package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

var ctx = context.Background()

func allow(t *testing.T, s sluice.Store, key string, lim sluice.Limit, n int) sluice.Decision {
	t.Helper()
	d, err := s.AllowN(ctx, key, lim, n)
	if err != nil {
		t.Fatalf("AllowN(%q, %v, %d): %v", key, lim, n, err)
	}
	return d
}

var allAlgorithms = []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.TokenBucket, sluice.GCRA}

// TestNoAllocs holds a decision on an existing key, admitted, denied or a
// peek, to zero allocations for every algorithm.
func TestNoAllocs(t *testing.T) {
	for _, a := range allAlgorithms {
		t.Run(a.String(), func(t *testing.T) {
			c := sluicetest.NewClock(sluicetest.Epoch())
			s := newStore(t, memstore.WithClock(c.Now))
			lim := sluice.Limit{Algorithm: a, Rate: 100, Period: time.Second}
			key := "tenant:42"
			// Fill the key once, so that a sliding log has grown its ring.
			allow(t, s, key, lim, 100)
			c.Advance(time.Second)
			var admitted, denied int
			got := testing.AllocsPerRun(1000, func() {
				c.Advance(3 * time.Millisecond)
				d, err := s.AllowN(ctx, key, lim, 1)
				if err != nil {
					panic(err)
				}
				if d.Allowed {
					admitted++
				} else {
					denied++
				}
				if _, err := s.AllowN(ctx, key, lim, 0); err != nil {
					panic(err)
				}
			})
			if got != 0 {
				t.Errorf("AllocsPerRun(AllowN on an existing key) = %v, want 0", got)
			}
			if admitted == 0 || denied == 0 {
				t.Errorf("%d admitted and %d denied: want both paths measured", admitted, denied)
			}
		})
	}
	t.Run("LimitsInTurn", func(t *testing.T) {
		// A request checked against a per-second, a per-minute and a
		// per-day limit in turn: the validated limits stay cached.
		s := newStore(t)
		lims := []sluice.Limit{
			sluice.PerSecond(1000),
			{Algorithm: sluice.SlidingWindow, Rate: 1 << 20, Period: time.Minute},
			{Algorithm: sluice.FixedWindow, Rate: 1 << 30, Period: 24 * time.Hour},
		}
		for _, lim := range lims {
			allow(t, s, "k", lim, 1)
		}
		got := testing.AllocsPerRun(1000, func() {
			for _, lim := range lims {
				if _, err := s.AllowN(ctx, "k", lim, 1); err != nil {
					panic(err)
				}
			}
		})
		if got != 0 {
			t.Errorf("AllocsPerRun(three limits in turn) = %v, want 0", got)
		}
	})
	t.Run("Lease", func(t *testing.T) {
		s := newStore(t)
		lim := sluice.PerSecond(1000)
		allow(t, s, "k", lim, 1)
		got := testing.AllocsPerRun(1000, func() {
			d, at, err := s.Reserve(ctx, "k", lim, 1)
			if err != nil || !d.Allowed {
				panic(fmt.Sprint(d, err))
			}
			if err := s.Return(ctx, "k", lim, 1, at); err != nil {
				panic(err)
			}
		})
		if got != 0 {
			t.Errorf("AllocsPerRun(Lease+Return) = %v, want 0", got)
		}
	})
}

// TestSweeper: the sweeper removes expired state on its interval, and
// Close stops it and waits for it (synctest.Test fails if a goroutine of
// the bubble is left behind).
func TestSweeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.WithSweepInterval(time.Second))
		short := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 2, Period: 100 * time.Millisecond}
		long := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Hour}
		for _, a := range allAlgorithms {
			allow(t, s, "short", short.With(a), 1)
		}
		allow(t, s, "long", long, 1)
		if got := s.Len(); got != 6 {
			t.Fatalf("Len() = %d, want 6", got)
		}
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if got := s.Len(); got != 6 {
			t.Fatalf("Len() before the first sweep = %d, want 6", got)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got := s.Len(); got != 1 {
			t.Fatalf("Len() after the sweep = %d, want 1 (the hour-long state)", got)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := s.AllowN(ctx, "long", long, 1); !errors.Is(err, sluice.ErrClosed) {
			t.Errorf("AllowN after Close: %v, want ErrClosed", err)
		}
		if _, err := s.AllowMulti(ctx, []sluice.Request{{Key: "k", Limit: long, N: 1}}); !errors.Is(err, sluice.ErrClosed) {
			t.Errorf("AllowMulti after Close: %v, want ErrClosed", err)
		}
	})
}

// TestNoSweeper: WithSweepInterval(0) starts no goroutine, and Close of
// such a store returns at once.
func TestNoSweeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.WithSweepInterval(0))
		allow(t, s, "k", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Second}, 1)
		time.Sleep(time.Hour)
		if got := s.Len(); got != 1 {
			t.Errorf("Len() = %d, want 1 (nothing sweeps)", got)
		}
		s.Sweep()
		if got := s.Len(); got != 0 {
			t.Errorf("Len() after Sweep = %d, want 0", got)
		}
		s.Close()
	})
}

// TestMaxKeys: the store never holds more states than its bound, and a new
// state makes room by removing expired states before evicting live ones.
func TestMaxKeys(t *testing.T) {
	t.Run("Bound", func(t *testing.T) {
		for _, max := range []int{1, 10, 127, 1000, 5000} {
			c := sluicetest.NewClock(sluicetest.Epoch())
			s := newStore(t, memstore.WithClock(c.Now), memstore.WithMaxKeys(max))
			lim := sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 5, Period: time.Minute}
			for i := range 3 * max {
				allow(t, s, fmt.Sprint("k", i), lim, 1)
				if got := s.Len(); got > max {
					t.Fatalf("WithMaxKeys(%d): Len() = %d after %d keys", max, got, i+1)
				}
				c.Advance(time.Millisecond)
			}
			if got := s.Evictions(); got == 0 {
				t.Errorf("WithMaxKeys(%d): no eviction after %d keys", max, 3*max)
			}
		}
	})
	t.Run("ExpiredFirst", func(t *testing.T) {
		c := sluicetest.NewClock(sluicetest.Epoch())
		const max = 100 // one shard: the bound is exact
		s := newStore(t, memstore.WithClock(c.Now), memstore.WithMaxKeys(max))
		short := sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 1, Period: time.Second}
		long := sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 1, Period: time.Hour}
		for i := range max / 2 {
			allow(t, s, fmt.Sprint("short", i), short, 1)
			allow(t, s, fmt.Sprint("long", i), long, 1)
		}
		c.Advance(2 * time.Second) // the short states have expired
		for i := range max / 2 {
			allow(t, s, fmt.Sprint("new", i), long, 1)
		}
		if got := s.Evictions(); got != 0 {
			t.Errorf("Evictions() = %d while expired states could make room, want 0", got)
		}
		for i := range max / 2 {
			if d := allow(t, s, fmt.Sprint("long", i), long, 1); d.Allowed {
				t.Fatalf("long%d was forgotten: %+v, want denied", i, d)
			}
		}
		// Full of live states: the next new one evicts one.
		allow(t, s, "one more", long, 1)
		if got, n := s.Evictions(), s.Len(); got != 1 || n != max {
			t.Errorf("after one more key: Evictions() = %d, Len() = %d, want 1 and %d", got, n, max)
		}
	})
}

// TestStateRemoved: state is dropped once it can no longer matter: by the
// next call on its key, by a Return that empties it, by Sweep.
func TestStateRemoved(t *testing.T) {
	for _, a := range allAlgorithms {
		t.Run(a.String(), func(t *testing.T) {
			c := sluicetest.NewClock(sluicetest.Epoch())
			s := newStore(t, memstore.WithClock(c.Now), memstore.WithSweepInterval(0))
			lim := sluice.Limit{Algorithm: a, Rate: 3, Period: time.Second}
			d := allow(t, s, "k", lim, 2)
			if s.Len() != 1 {
				t.Fatalf("Len() = %d, want 1", s.Len())
			}
			allow(t, s, "peeked", lim, 0)
			if s.Len() != 1 {
				t.Errorf("a peek on a new key left state: Len() = %d, want 1", s.Len())
			}
			c.Advance(d.ResetAfter - time.Microsecond)
			s.Sweep()
			if s.Len() != 1 {
				t.Fatalf("Len() 1µs before ResetAfter %v = %d, want 1", d.ResetAfter, s.Len())
			}
			c.Advance(time.Microsecond)
			allow(t, s, "k", lim, 0)
			if s.Len() != 0 {
				t.Errorf("Len() after a peek at ResetAfter = %d, want 0", s.Len())
			}

			_, at, err := s.Reserve(ctx, "k", lim, 3)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Return(ctx, "k", lim, 3, at); err != nil {
				t.Fatal(err)
			}
			if s.Len() != 0 {
				t.Errorf("Len() after returning a whole lease = %d, want 0", s.Len())
			}
		})
	}
}

// TestMultiAtomic: concurrent AllowMulti calls over overlapping keys, in
// every order and with repeated keys, never deadlock, and every key counts
// exactly the admitted calls that named it.
func TestMultiAtomic(t *testing.T) {
	c := sluicetest.NewClock(sluicetest.Epoch()) // no window ends during the test
	s := newStore(t, memstore.WithClock(c.Now))
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 300, Period: time.Hour}
	keys := []string{"a", "b", "c", "d", "e", "f"}
	var mu sync.Mutex
	counted := map[string]int{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range 300 {
				var reqs []sluice.Request
				for range 1 + rng.IntN(4) {
					reqs = append(reqs, sluice.Request{Key: keys[rng.IntN(len(keys))], Limit: lim, N: 1 + rng.IntN(2)})
				}
				ds, err := s.AllowMulti(ctx, reqs)
				if err != nil {
					t.Errorf("AllowMulti(%v): %v", reqs, err)
					return
				}
				if !ds[0].Allowed {
					for _, d := range ds {
						if d.Allowed {
							t.Errorf("AllowMulti = %+v: mixed decisions", ds)
						}
					}
					continue
				}
				mu.Lock()
				for _, r := range reqs {
					counted[r.Key] += r.N
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, k := range keys {
		d := allow(t, s, k, lim, 0)
		if got, want := lim.Rate-d.Remaining, counted[k]; got != want {
			t.Errorf("key %q counts %d, want %d from the admitted calls", k, got, want)
		}
		if counted[k] > lim.Rate {
			t.Errorf("key %q admitted %d, over its Rate %d", k, counted[k], lim.Rate)
		}
	}
}

// TestClockBackwards: a clock that jumps back and forth never lets a key
// admit more than its limit (the x/time/rate issue golang/go#56287).
func TestClockBackwards(t *testing.T) {
	for _, a := range allAlgorithms {
		t.Run(a.String(), func(t *testing.T) {
			c := sluicetest.NewClock(sluicetest.Epoch())
			s := newStore(t, memstore.WithClock(c.Now))
			lim := sluice.Limit{Algorithm: a, Rate: 7, Period: time.Second}
			admitted := 0
			for i := range 2000 {
				// Alternate between two times 900ms apart.
				c.Set(sluicetest.Epoch().Add(time.Duration(i%2) * 900 * time.Millisecond))
				if allow(t, s, "k", lim, 1).Allowed {
					admitted++
				}
			}
			// At most two windows' worth can fall within [0, 900ms].
			if admitted > 2*lim.Rate {
				t.Errorf("admitted %d with the clock alternating, want at most %d", admitted, 2*lim.Rate)
			}
		})
	}
}

// TestLeaseClockBackwards: when the clock ran back for a key, Lease reports
// the time at which the units were really counted (the key's own time), so
// that Return finds them. (The buckets keep no time of last use, only the
// time they are full again: a clock behind it finds them emptier, so they
// are not part of this test.)
func TestLeaseClockBackwards(t *testing.T) {
	for _, a := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow} {
		t.Run(a.String(), func(t *testing.T) {
			c := sluicetest.NewClock(sluicetest.Epoch())
			s := newStore(t, memstore.WithClock(c.Now))
			lim := sluice.Limit{Algorithm: a, Rate: 3, Period: time.Hour}
			c.Set(sluicetest.Epoch().Add(500 * time.Millisecond))
			allow(t, s, "k", lim, 1)
			c.Set(sluicetest.Epoch().Add(400 * time.Millisecond))
			d, at, err := s.Reserve(ctx, "k", lim, 2)
			if err != nil || !d.Allowed {
				t.Fatalf("Lease = %+v, %v, want allowed", d, err)
			}
			if at.Before(sluicetest.Epoch()) || at.After(sluicetest.Epoch().Add(500*time.Millisecond)) {
				t.Errorf("Lease time = %v, want within the first 500ms", at)
			}
			if err := s.Return(ctx, "k", lim, 2, at); err != nil {
				t.Fatal(err)
			}
			if d := allow(t, s, "k", lim, 0); d.Remaining != 2 {
				t.Errorf("peek after returning the lease = %+v, want Remaining 2", d)
			}
		})
	}
}

// TestInvalidOption: a Store built with an invalid option answers every
// call with an error naming the option and keeps nothing.
func TestInvalidOption(t *testing.T) {
	tests := []struct {
		name string
		give memstore.Option
		want string
	}{
		{"nil clock", memstore.WithClock(nil), "memstore: WithClock(nil)"},
		{"negative max keys", memstore.WithMaxKeys(-1), "memstore: WithMaxKeys(-1): negative"},
		{"nil evict hook", memstore.WithOnEvict(nil), "memstore: WithOnEvict(nil)"},
		{"negative sweep interval", memstore.WithSweepInterval(-time.Second), "memstore: WithSweepInterval(-1s): negative"},
	}
	lim := sluice.PerSecond(10)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The first invalid option is the one reported.
			s := memstore.New(tt.give, memstore.WithMaxKeys(-2))
			if _, err := s.AllowN(ctx, "k", lim, 1); err == nil || err.Error() != tt.want {
				t.Errorf("AllowN error = %v, want %s", err, tt.want)
			}
			if _, err := s.AllowMulti(ctx, []sluice.Request{{Key: "k", Limit: lim, N: 1}}); err == nil || err.Error() != tt.want {
				t.Errorf("AllowMulti error = %v, want %s", err, tt.want)
			}
			if _, _, err := s.Reserve(ctx, "k", lim, 1); err == nil || err.Error() != tt.want {
				t.Errorf("Lease error = %v, want %s", err, tt.want)
			}
			if err := s.Return(ctx, "k", lim, 1, time.Now()); err == nil || err.Error() != "memstore: return: "+tt.want {
				t.Errorf("Return error = %v, want memstore: return: %s", err, tt.want)
			}
			if n := s.Len(); n != 0 {
				t.Errorf("Len() = %d, want 0", n)
			}
			if err := s.Close(); err != nil {
				t.Errorf("Close() = %v", err)
			}
		})
	}
}

// Untouched decides as AllowMulti would on keys with nothing counted, and
// neither reads nor changes the store's states.
func TestUntouched(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	defer s.Close()
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 4, Period: time.Second}
	if _, err := s.AllowN(ctx, "k", lim, 4); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		ds, err := s.Untouched(ctx, []sluice.Request{{Key: "k", Limit: lim, N: 3}})
		if err != nil || len(ds) != 1 || !ds[0].Allowed || ds[0].Remaining != 1 {
			t.Fatalf("Untouched(3 of 4) on a full key = %+v, %v; want admitted, Remaining 1", ds, err)
		}
	}
	if d, err := s.AllowN(ctx, "k", lim, 1); err != nil || d.Allowed {
		t.Errorf("AllowN on the full key after Untouched = %+v, %v; want still denied", d, err)
	}
	if s.Len() != 1 {
		t.Errorf("Len() = %d after Untouched, want 1", s.Len())
	}
	if _, err := s.Untouched(ctx, []sluice.Request{{Key: "x", Limit: lim, N: 5}}); !errors.Is(err, sluice.ErrExceedsCapacity) {
		t.Errorf("Untouched(5 of 4) = %v, want ErrExceedsCapacity", err)
	}
}
