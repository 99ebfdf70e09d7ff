package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/memstore"
)

// TestMultiDifferential holds the AllowMulti script (multi.lua) to
// memstore's AllowMulti, a separate implementation of the same contract, on
// random sequences of calls of one to four requests over two keys with up to
// three limits each: requests that share a state (the same key, algorithm
// and period, perhaps twice in one call), several algorithms on one key,
// all-or-nothing denials, and calls over capacity, which both must refuse.
// Single AllowN calls (flat and batched) are mixed in, so that each script
// reads state that the others wrote. The clock only moves forward: with a
// clock that runs back, the Redis log keeps expired entries that memstore
// drops (see model.step), which changes a decision by design.
func TestMultiDifferential(t *testing.T) {
	srv := redistest.Server(t)
	var clock atomic.Int64
	now := func() time.Time { return time.UnixMicro(clock.Load()) }
	c := newRueidis(t, srv.Addr)
	flat := NewRueidis(c, WithTestClock(now), WithBatching(false), WithPrefix("md:"))
	batched := NewRueidis(c, WithTestClock(now), WithPrefix("md:"))
	batched.batch.alwaysScript = true
	ctx := context.Background()
	seqs := 150
	if *long {
		seqs = 5000
	}
	base := rand.Uint64()
	t.Logf("seeds %d..%d", base, base+uint64(seqs)-1)
	for s := range seqs {
		seed := base + uint64(s)
		rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
		mem := memstore.New(memstore.WithClock(now))
		clock.Store(1_700_000_000_000_000 + rng.Int64N(100_000_000_000_000))
		type pick struct {
			key string
			lim sluice.Limit
		}
		var pool []pick
		for k := range 2 {
			key := fmt.Sprintf("%d/%c", seed, 'a'+k)
			for range 1 + rng.IntN(3) {
				lim := randLimit(rng)
				if len(pool) > 0 && rng.IntN(3) == 0 {
					// The same algorithm and period as an earlier limit:
					// the same state, read under another rate.
					prev := pool[rng.IntN(len(pool))].lim
					lim.Algorithm, lim.Period, lim.Counting = prev.Algorithm, prev.Period, prev.Counting
					if lim.Algorithm != sluice.TokenBucket && lim.Algorithm != sluice.GCRA {
						lim.Burst = 0
					}
					if lim.Validate() != nil || (lim.Algorithm == sluice.SlidingLog && lim.Rate > 300) {
						lim = prev
					}
				}
				pool = append(pool, pick{key, lim})
			}
		}
		for step := range 40 {
			per := pool[rng.IntN(len(pool))].lim.Period.Microseconds()
			switch rng.IntN(4) {
			case 0: // same instant
			case 1:
				clock.Add(rng.Int64N(per + 1))
			default:
				clock.Add(rng.Int64N(per/4 + 2))
			}
			reqs := make([]sluice.Request, 1+rng.IntN(4))
			for i := range reqs {
				pk := pool[rng.IntN(len(pool))]
				n := 1
				switch rng.IntN(5) {
				case 0:
					n = 0
				case 1:
					n = 1 + rng.IntN(pk.lim.Rate)
				case 2:
					if pk.lim.Counting == sluice.CountAll {
						n = 1 + rng.IntN(3*pk.lim.Capacity())
					}
				}
				reqs[i] = sluice.Request{Key: pk.key, Limit: pk.lim, N: n}
			}
			want, werr := mem.AllowMulti(ctx, reqs)
			var got []sluice.Decision
			var err error
			if len(reqs) == 1 && rng.IntN(2) == 0 {
				st := flat
				if rng.IntN(2) == 0 {
					st = batched
				}
				var d sluice.Decision
				d, err = st.AllowN(ctx, reqs[0].Key, reqs[0].Limit, reqs[0].N)
				got = []sluice.Decision{d}
			} else {
				got, err = flat.AllowMulti(ctx, reqs)
			}
			if (werr != nil) != (err != nil) {
				t.Fatalf("seed %d step %d: %v: redisstore error %v, memstore error %v", seed, step, reqs, err, werr)
			}
			if werr != nil {
				var le, wle *sluice.LimitError
				mixed := errors.As(err, &le) && errors.As(werr, &wle) && le.Field == "Counting" && wle.Field == "Counting"
				if !mixed && (!errors.Is(err, sluice.ErrExceedsCapacity) || !errors.Is(werr, sluice.ErrExceedsCapacity)) {
					t.Fatalf("seed %d step %d: %v: errors %v and %v, want both ErrExceedsCapacity or both on Counting", seed, step, reqs, err, werr)
				}
				continue
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("seed %d step %d: %v: request %d: redisstore %+v, memstore %+v", seed, step, reqs, i, got[i], want[i])
				}
			}
		}
		mem.Close()
	}
}
