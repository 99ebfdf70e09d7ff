package remotestore_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/region"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestGrantExact: a Grant through the store API is the served store's
// Grant, field for field: random sequences of requests from a few holders
// (windows rolling over, stale requests, reported spends, every grantable
// algorithm, decisions of the key between them) get, over the wire, the
// answer a memory store on the same clock gives when called directly.
func TestGrantExact(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	opts := []memstore.Option{memstore.WithClock(clock.Now), memstore.WithSweepInterval(0)}
	direct := newMem(t, opts...)
	rs := dial(t, serve(t, newMem(t, opts...)))
	if caps, err := rs.Capabilities(ctx); err != nil || !caps.Grant {
		t.Fatalf("Capabilities = %+v, %v; want Grant", caps, err)
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 27))
	algs := []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow, sluice.TokenBucket, sluice.GCRA}
	for seq := range 40 {
		lim := sluice.Limit{Algorithm: algs[rng.IntN(len(algs))], Rate: 1 + rng.IntN(200), Period: time.Duration(1+rng.IntN(5)) * time.Second}
		key := fmt.Sprint("grant/", seq)
		holders := []string{"eu", "us", "ap", "eu-1\x00"}[:2+rng.IntN(3)]
		for step := range 30 {
			clock.Advance(time.Duration(rng.Int64N(int64(lim.Period) / 3)))
			if rng.IntN(5) == 0 {
				n := rng.IntN(lim.Capacity() + 1)
				want, werr := direct.AllowN(ctx, key, lim, n)
				got, err := rs.AllowN(ctx, key, lim, n)
				if werr != nil || err != nil || want != got {
					t.Fatalf("seq %d step %d: AllowN = %+v, %v; direct %+v, %v", seq, step, got, err, want, werr)
				}
				continue
			}
			now := clock.Now()
			r := sluice.GrantRequest{
				Holder:    holders[rng.IntN(len(holders))],
				N:         rng.IntN(lim.Capacity() + 1),
				Demand:    rng.IntN(3*lim.Rate + 1),
				Allowance: rng.IntN(lim.Rate/2 + 1),
				TTL:       time.Duration(1+rng.IntN(3000)) * time.Millisecond,
			}
			if rng.IntN(5) == 0 {
				r.NotAfter = now.Add(time.Duration(rng.Int64N(int64(lim.Period))) - lim.Period/2)
			}
			if rng.IntN(4) == 0 {
				ws := now.Truncate(lim.Period)
				r.SpentWindow = []time.Time{ws, ws.Add(-lim.Period)}[rng.IntN(2)]
				r.Spent = rng.IntN(lim.Rate/3 + 1)
			}
			want, werr := direct.Grant(ctx, key, lim, r)
			got, err := rs.Grant(ctx, key, lim, r)
			if werr != nil || err != nil {
				t.Fatalf("seq %d step %d: Grant(%v, %+v) = %v; direct %v", seq, step, lim, r, err, werr)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("seq %d step %d: Grant(%v, %+v) (-direct +remote):\n%s", seq, step, lim, r, diff)
			}
		}
	}
}

// TestGrantErrors: an invalid grant request gets, through the wire, the
// error the store gives directly, naming the field; a key's 65th holder
// is sluice.ErrTooManyHolders; a server whose store cannot grant says so
// (sluice.ErrGrantUnsupported), and package region refuses nothing until
// it asks.
func TestGrantErrors(t *testing.T) {
	direct := newMem(t)
	rs := dial(t, serve(t, newMem(t)))
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Second}
	ok := sluice.GrantRequest{Holder: "eu", N: 1, TTL: time.Second}
	for _, tt := range []struct {
		name string
		key  string
		lim  sluice.Limit
		req  func(*sluice.GrantRequest)
	}{
		{"key", "", lim, nil},
		{"rate", "k", sluice.Limit{Algorithm: sluice.FixedWindow, Period: time.Second}, nil},
		{"sliding log", "k", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: time.Second}, nil},
		{"counting all", "k", lim.WithCounting(sluice.CountAll), nil},
		{"no holder", "k", lim, func(r *sluice.GrantRequest) { r.Holder = "" }},
		{"n", "k", lim, func(r *sluice.GrantRequest) { r.N = 11 }},
		{"negative n", "k", lim, func(r *sluice.GrantRequest) { r.N = -1 }},
		{"demand", "k", lim, func(r *sluice.GrantRequest) { r.Demand = -1 }},
		{"allowance", "k", lim, func(r *sluice.GrantRequest) { r.Allowance = 11 }},
		{"ttl", "k", lim, func(r *sluice.GrantRequest) { r.TTL = 0 }},
		{"spent", "k", lim, func(r *sluice.GrantRequest) { r.Spent = 11 }},
	} {
		r := ok
		if tt.req != nil {
			tt.req(&r)
		}
		_, want := direct.Grant(ctx, tt.key, tt.lim, r)
		_, got := rs.Grant(ctx, tt.key, tt.lim, r)
		checkSameError(t, "Grant "+tt.name, got, want)
	}
	for i := range sluice.MaxGrantHolders {
		if _, err := rs.Grant(ctx, "full", lim, sluice.GrantRequest{Holder: fmt.Sprint(i), TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := rs.Grant(ctx, "full", lim, sluice.GrantRequest{Holder: "late", TTL: time.Minute})
	var le *sluice.LimitError
	if !errors.Is(err, sluice.ErrTooManyHolders) || !errors.Is(err, sluice.ErrExceedsCapacity) || !errors.As(err, &le) || le.Field != "Holder" {
		t.Errorf("Grant for a 65th holder = %v, want ErrTooManyHolders", err)
	}

	plainRS := dial(t, serve(t, plain{newMem(t)}))
	if _, err := plainRS.Grant(ctx, "k", lim, ok); !errors.Is(err, sluice.ErrGrantUnsupported) {
		t.Errorf("Grant of a store that cannot grant = %v, want ErrGrantUnsupported", err)
	}
	// A region over it: accepted (the remote store is a Granter), and its
	// decisions report the home's refusal as an error, never a decision.
	reg, err := region.New(plainRS, "eu")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	if _, err := reg.AllowN(ctx, "k", lim, 1); !errors.Is(err, sluice.ErrGrantUnsupported) {
		t.Errorf("a region over a home that cannot grant: AllowN = %v, want ErrGrantUnsupported", err)
	}
}

// TestRegionOverRemote: package region holds units granted through the
// store API: two regions over one home store never admit more than the
// limit in a window of the home store's clock.
func TestRegionOverRemote(t *testing.T) {
	home := newMem(t)
	addr := serve(t, home)
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 50, Period: time.Hour}
	admitted := 0
	for _, name := range []string{"eu", "us"} {
		reg, err := region.New(dial(t, addr), name)
		if err != nil {
			t.Fatal(err)
		}
		for range 60 {
			d, err := reg.AllowN(ctx, "k", lim, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
		reg.Close()
	}
	if admitted > lim.Rate {
		t.Errorf("two regions admitted %d in one window of %d", admitted, lim.Rate)
	}
	if admitted == 0 {
		t.Errorf("two regions admitted nothing")
	}
}
