package redisstore

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/memstore"
)

// grantModel is internal/algo's state of one key and its holder table: the
// reference of lua/grant.lua (and of memstore's Grant, which runs it).
type grantModel struct {
	m    model
	rows []algo.Holder
}

// grant is the reference's answer to one request at now.
func (gm *grantModel) grant(now int64, lim sluice.Limit, r sluice.GrantRequest) (sluice.Grant, error) {
	if !r.NotAfter.IsZero() && now > r.NotAfter.UnixMicro() {
		return sluice.Grant{At: time.UnixMicro(now), Stale: true}, nil
	}
	p := fuzzParams(lim)
	peek := gm.m.step(now, p, 0)
	in := algo.GrantIn{Holder: r.Holder, N: int64(r.N), Demand: int64(r.Demand), Allowance: int64(r.Allowance),
		TTL: r.TTL.Microseconds()}
	if !r.SpentWindow.IsZero() {
		in.SpentWin, in.Spent = r.SpentWindow.UnixMicro(), int64(r.Spent)
	}
	rows, out, err := algo.GrantStep(gm.rows, now, p.Rate, p.Period, in, peek.Remaining)
	if err != nil {
		return sluice.Grant{}, sluice.ErrTooManyHolders
	}
	gm.rows = rows
	res, at := peek, now
	switch {
	case out.Units > 0:
		res = gm.m.step(now, p, out.Units)
		switch p.Kind {
		case algo.FixedWindow:
			at = max(now, gm.m.w.Start)
		case algo.SlidingWindow:
			at = max(now, gm.m.c.Start)
		}
	case peek.Remaining == 0 && r.N > 0:
		res = gm.m.step(now, p, 1)
	}
	g := sluice.Grant{
		Units: int(out.Units), At: time.UnixMicro(at), Share: int(out.Share), Allowance: int(out.Allowance),
		Taken: int(out.Taken), Holders: int(out.Holders), Window: time.UnixMicro(out.Window),
	}
	g.Allowed = out.Units > 0 || r.N == 0
	g.Remaining = int(res.Remaining)
	g.ResetAfter = time.Duration(res.ResetAfter) * time.Microsecond
	if !g.Allowed {
		if peek.Remaining == 0 {
			g.RetryAfter = time.Duration(res.RetryAfter) * time.Microsecond
		} else {
			g.RetryAfter = time.Duration(algo.WindowLeft(now, p.Period)) * time.Microsecond
		}
	}
	return g, nil
}

// randGrantLimit is a random limit that grants can be made of.
func randGrantLimit(rng *rand.Rand) sluice.Limit {
	for {
		lim := randLimit(rng)
		lim.Counting = sluice.CountAdmitted
		if lim.Algorithm != sluice.SlidingLog && lim.Rate <= 100_000 {
			return lim
		}
	}
}

// grantSequence runs one random sequence of grants from a few holders,
// with decisions of the key between them, through redisstore, memstore and
// the reference; every answer must be equal.
func grantSequence(t *testing.T, srv *redistest.Instance, rs *Store, ms *memstore.Store, clock *atomic.Int64, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x51))
	lim := randGrantLimit(rng)
	per := lim.Period.Microseconds()
	now := int64(1_700_000_000_000_000) + rng.Int64N(100_000_000_000_000)
	key := fmt.Sprintf("grant/%d/%d", seed, sequences.Add(1))
	holders := []string{"eu", "us", "ap", "a:b", "x"}[:2+rng.IntN(4)]
	var gm grantModel
	ctx := context.Background()
	// memstore forgets a state once its time has passed (a full bucket, a
	// past window), which is the same state until the clock runs back to
	// before that time: once it has run back, memstore is left out.
	back := false
	for i := range 40 + rng.IntN(60) {
		switch rng.IntN(8) {
		case 0:
		case 1:
			now += per
		case 2:
			now -= rng.Int64N(per/4 + 1) // backwards
			back = true
		case 3:
			now += rng.Int64N(2 * per)
		default:
			now += rng.Int64N(per/int64(max(lim.Rate/10, 1)) + 2)
		}
		if rng.IntN(20) == 0 { // another Rate for the same state
			l2 := randGrantLimit(rng)
			if l2.Algorithm == lim.Algorithm {
				l2.Period = lim.Period
				if l2.Validate() == nil {
					lim = l2
				}
			}
		}
		clock.Store(now)
		if rng.IntN(4) == 0 { // a decision of the key itself, not a grant
			n := rng.IntN(lim.Capacity() + 1)
			r := gm.m.step(now, fuzzParams(lim), int64(n))
			for _, s := range []sluice.Store{rs, ms} {
				if back && s == ms {
					continue
				}
				d, err := s.AllowN(ctx, key, lim, n)
				if err != nil || d.Allowed != r.Allowed || d.Remaining != int(r.Remaining) {
					t.Fatalf("seed %d step %d: %T AllowN(%v, %d) = %+v, %v; internal/algo says %+v", seed, i, s, lim, n, d, err, r)
				}
			}
			continue
		}
		req := sluice.GrantRequest{
			Holder:    holders[rng.IntN(len(holders))],
			N:         rng.IntN(lim.Capacity() + 1),
			Demand:    rng.IntN(3*lim.Rate + 1),
			Allowance: rng.IntN(lim.Rate/2 + 1),
			TTL:       min(time.Millisecond+time.Duration(rng.Int64N(4*per))*time.Microsecond, sluice.MaxGrantTTL),
		}
		if rng.IntN(5) == 0 {
			req.Allowance = 0
		}
		if rng.IntN(6) == 0 {
			req.NotAfter = time.UnixMicro(now + rng.Int64N(2*per) - per)
		}
		if rng.IntN(5) == 0 {
			ws := now - now%per
			req.SpentWindow = time.UnixMicro([]int64{ws, ws - per, ws + per}[rng.IntN(3)])
			req.Spent = rng.IntN(lim.Rate/3 + 1)
		}
		want, werr := gm.grant(now, lim, req)
		for _, s := range []sluice.Granter{rs, ms} {
			if back && s == ms {
				continue
			}
			got, err := s.Grant(ctx, key, lim, req)
			if werr != nil || err != nil {
				if !errors.Is(err, werr) {
					t.Fatalf("seed %d step %d: %T Grant(%v, %+v) at %d: %v, want %v", seed, i, s, lim, req, now, err, werr)
				}
				continue
			}
			got.Limit = sluice.Limit{}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("seed %d step %d: %T Grant(%v, %+v) at %d (-reference +got):\n%s\nreference table %+v\nRedis table %v", seed, i, s, lim, req, now, diff, gm.rows, hgetall(srv, rs.redisKey(key, lim)+":h"))
			}
		}
	}
}

var grantSeed = flag.Uint64("redisstore.grantseed", 0, "run TestGrantDifferential's sequence of this seed only")

// TestGrantDifferential holds lua/grant.lua and memstore's Grant to the
// reference (internal/algo.GrantStep over the algorithms' steps) on
// random sequences: several holders, windows rolling over, a clock that
// runs back, stale requests, reported spends, other Rates, and decisions
// of the key between the grants.
func TestGrantDifferential(t *testing.T) {
	srv := redistest.Server(t)
	clock := new(atomic.Int64)
	now := func() time.Time { return time.UnixMicro(clock.Load()) }
	rs := NewRueidis(newRueidis(t, srv.Addr), WithTestClock(now), WithPrefix("grant:"))
	ms := memstore.New(memstore.WithClock(now), memstore.WithSweepInterval(0))
	t.Cleanup(func() { ms.Close() })
	n := 200
	if *long {
		n = 20000
	}
	base := rand.Uint64()
	if *grantSeed != 0 {
		base, n = *grantSeed, 1
	}
	t.Logf("seeds %d..%d", base, base+uint64(n)-1)
	for i := range uint64(n) {
		grantSequence(t, srv, rs, ms, clock, base+i)
	}
}

// hgetall is a hash's fields and values, for a failure's message.
func hgetall(srv *redistest.Instance, key string) string {
	out, err := srv.Do("HGETALL", key)
	if err != nil {
		return err.Error()
	}
	return out
}

// A key holds at most MaxGrantHolders, and its holder table expires with
// its longest-lived row; invalid requests name their field before any
// script runs.
func TestGrantBounds(t *testing.T) {
	srv := redistest.Server(t)
	rs := NewRueidis(newRueidis(t, srv.Addr))
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 100, Period: time.Second}
	for i := range sluice.MaxGrantHolders {
		if _, err := rs.Grant(ctx, "k", lim, sluice.GrantRequest{Holder: fmt.Sprint(i), TTL: time.Duration(1+i) * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rs.Grant(ctx, "k", lim, sluice.GrantRequest{Holder: "late", TTL: time.Second}); !errors.Is(err, sluice.ErrTooManyHolders) {
		t.Fatalf("holder %d: %v, want ErrTooManyHolders", sluice.MaxGrantHolders+1, err)
	}
	out, err := srv.Do("PTTL", rs.redisKey("k", lim)+":h")
	pttl, _ := strconv.Atoi(out)
	if err != nil || pttl < 63_000 || pttl > 64_000 {
		t.Fatalf("PTTL of the holder table = %d, %v; want the longest row's TTL, 64 s", pttl, err)
	}
	var le *sluice.LimitError
	if _, err := rs.Grant(ctx, "k", lim, sluice.GrantRequest{Holder: "eu", TTL: time.Second, Allowance: 101}); !errors.As(err, &le) || le.Field != "Allowance" {
		t.Fatalf("Allowance above the Rate: %v", err)
	}
}
