package algo

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFairShares(t *testing.T) {
	tests := []struct {
		name    string
		pool    int64
		demands []int64
		want    []int64
	}{
		{"none", 100, nil, []int64{}},
		{"one, quiet", 100, []int64{10}, []int64{100}},
		{"one, busy", 100, []int64{500}, []int64{100}},
		{"fit: demand plus an equal part of the spare", 100, []int64{10, 20, 30}, []int64{24, 33, 43}},
		{"fit exactly", 90, []int64{10, 20, 60}, []int64{10, 20, 60}},
		{"saturated, equal", 1000, []int64{1000, 1000, 1000}, []int64{334, 333, 333}},
		{"saturated: the quiet keep their demand", 1000, []int64{100, 1500, 900}, []int64{100, 450, 450}},
		{"saturated: level between demands", 1000, []int64{200, 300, 2000}, []int64{200, 300, 500}},
		{"saturated: leftover units to the smallest capped first", 10, []int64{7, 5, 9}, []int64{3, 4, 3}},
		{"saturated: leftover, ties by arrival", 10, []int64{9, 9, 9}, []int64{4, 3, 3}},
		{"zero demands share the pool", 10, []int64{0, 0, 0}, []int64{4, 3, 3}},
		{"a zero demand among busy ones", 100, []int64{0, 200, 200}, []int64{0, 50, 50}},
		{"pool smaller than holders", 2, []int64{5, 5, 5}, []int64{1, 1, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FairShares(tt.pool, tt.demands)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("FairShares(%d, %v) (-want +got):\n%s", tt.pool, tt.demands, diff)
			}
		})
	}
}

// FairShares' invariants on random demands: the shares add up to the pool,
// none is negative, a holder whose demand is at most an equal part gets
// it, and when the demands exceed the pool no share exceeds its demand
// and the shares are max-min fair (a share below another's is its demand).
func TestFairSharesProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		n := 1 + rng.IntN(MaxHolders)
		pool := 1 + rng.Int64N(5000)
		d := make([]int64, n)
		var sum int64
		for i := range d {
			d[i] = rng.Int64N(6*pool/int64(n+1) + 1)
			sum += d[i]
		}
		s := FairShares(pool, d)
		var total int64
		for i := range s {
			total += s[i]
			if s[i] < 0 {
				t.Fatalf("FairShares(%d, %v) = %v: negative", pool, d, s)
			}
			if d[i] <= pool/int64(n) && s[i] < d[i] {
				t.Fatalf("FairShares(%d, %v) = %v: holder %d gets less than its demand, which is within an equal part", pool, d, s, i)
			}
			if sum > pool {
				if s[i] > d[i] {
					t.Fatalf("FairShares(%d, %v) = %v: holder %d gets more than it asks while the demands exceed the pool", pool, d, s, i)
				}
				for j := range s {
					if s[i] < s[j]-1 && s[i] != d[i] {
						t.Fatalf("FairShares(%d, %v) = %v: holder %d is capped below holder %d", pool, d, s, i, j)
					}
				}
			}
		}
		if total != pool {
			t.Fatalf("FairShares(%d, %v) = %v: adds up to %d", pool, d, s, total)
		}
	}
}

// grantCase is one request of a table test: at time at, with the
// algorithm's free units.
type grantCase struct {
	at   int64
	in   GrantIn
	free int64
	want GrantOut
}

func runGrants(t *testing.T, pool, period int64, cases []grantCase) []Holder {
	t.Helper()
	var hs []Holder
	for i, c := range cases {
		var out GrantOut
		var err error
		hs, out, err = GrantStep(hs, c.at, pool, period, c.in, c.free)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if diff := cmp.Diff(c.want, out); diff != "" {
			t.Fatalf("step %d: GrantStep(%+v) at %d (-want +got):\n%s", i, c.in, c.at, diff)
		}
	}
	return hs
}

func TestGrantStepShares(t *testing.T) {
	// Pool 1000 per second. Three holders report saturating demands: each
	// gets at most its third of a window, whatever it asks.
	ttl := int64(10 * sec)
	in := func(h string, n, d int64) GrantIn { return GrantIn{Holder: h, N: n, Demand: d, TTL: ttl} }
	runGrants(t, 1000, sec, []grantCase{
		{at: 0, in: in("eu", 500, 3000), free: 1000, want: GrantOut{Units: 500, Share: 1000, Taken: 500, Holders: 1}},
		{at: 1, in: in("us", 500, 3000), free: 500, want: GrantOut{Units: 500, Share: 500, Taken: 500, Holders: 2}},
		// ap arrives: shares are a third each now; eu and us already took more.
		{at: 2, in: in("ap", 500, 3000), free: 0, want: GrantOut{Units: 0, Share: 333, Taken: 0, Holders: 3}},
		{at: 3, in: in("eu", 10, 3000), free: 0, want: GrantOut{Units: 0, Share: 334, Taken: 500, Holders: 3}},
		// The next window: a third each, as they ask.
		{at: sec, in: in("eu", 500, 3000), free: 1000, want: GrantOut{Units: 334, Share: 334, Taken: 334, Window: sec, Holders: 3}},
		{at: sec + 1, in: in("us", 100, 3000), free: 666, want: GrantOut{Units: 100, Share: 333, Taken: 100, Window: sec, Holders: 3}},
		{at: sec + 2, in: in("us", 500, 3000), free: 566, want: GrantOut{Units: 233, Share: 333, Taken: 333, Window: sec, Holders: 3}},
		// ap goes quiet (reports 100): the busy ones get its part.
		{at: sec + 3, in: in("ap", 50, 100), free: 333, want: GrantOut{Units: 50, Share: 100, Taken: 50, Window: sec, Holders: 3}},
		{at: sec + 4, in: in("eu", 500, 3000), free: 283, want: GrantOut{Units: 116, Share: 450, Taken: 450, Window: sec, Holders: 3}},
		// The algorithm's free units bound the grant.
		{at: sec + 5, in: in("us", 500, 3000), free: 17, want: GrantOut{Units: 17, Share: 450, Taken: 350, Window: sec, Holders: 3}},
	})
}

func TestGrantStepAllowance(t *testing.T) {
	ttl := int64(10 * sec)
	in := func(h string, n, d, a int64) GrantIn {
		return GrantIn{Holder: h, N: n, Demand: d, Allowance: a, TTL: ttl}
	}
	hs := runGrants(t, 100, sec, []grantCase{
		// eu reserves 40: us can take no more than 60 in a window.
		{at: 0, in: in("eu", 0, 40, 40), free: 100, want: GrantOut{Allowance: 40, Share: 100, Holders: 1}},
		{at: 1, in: in("us", 100, 500, 0), free: 100, want: GrantOut{Units: 60, Share: 60, Taken: 60, Holders: 2}},
		// us asks for a reserve of 80: only 60 is free of eu's reserve, and
		// it holds 60 taken already.
		{at: 2, in: in("us", 0, 500, 80), free: 40, want: GrantOut{Allowance: 60, Share: 60, Taken: 60, Holders: 2}},
		// eu takes its reserve, not more: its share is 40.
		{at: 3, in: in("eu", 50, 40, 40), free: 40, want: GrantOut{Units: 40, Share: 40, Allowance: 40, Taken: 40, Holders: 2}},
		// eu lowers its reserve at once (to 10): it holds 40 taken, so the
		// room stays taken in this window.
		{at: 4, in: in("eu", 0, 10, 10), free: 0, want: GrantOut{Share: 10, Allowance: 10, Taken: 40, Holders: 2}},
		// The next window: us grows its reserve into what eu gave up.
		{at: sec, in: in("us", 0, 500, 95), free: 100, want: GrantOut{Allowance: 90, Share: 90, Window: sec, Holders: 2}},
		// eu reported 3 units spent on its own in this window: counted.
		{at: sec + 1, in: GrantIn{Holder: "eu", N: 20, Demand: 10, Allowance: 10, TTL: ttl, SpentWin: sec, Spent: 3}, free: 100,
			want: GrantOut{Units: 7, Share: 10, Allowance: 10, Taken: 10, Window: sec, Holders: 2}},
		// Units reported spent in another window are not.
		{at: sec + 2, in: GrantIn{Holder: "eu", N: 0, Demand: 10, Allowance: 10, TTL: ttl, SpentWin: 0, Spent: 3}, free: 93,
			want: GrantOut{Share: 10, Allowance: 10, Taken: 10, Window: sec, Holders: 2}},
	})
	if len(hs) != 2 || hs[0].Name != "eu" || hs[1].Name != "us" {
		t.Fatalf("table %+v, want eu then us", hs)
	}
	// The rows expire with their TTL: us alone at 11 s, eu's reserve gone.
	hs, out, err := GrantStep(hs, 11*sec+2, 100, sec, in("us", 100, 500, 100), 100)
	if err != nil || out != (GrantOut{Units: 100, Share: 100, Allowance: 100, Taken: 100, Window: 11 * sec, Holders: 1}) || len(hs) != 1 {
		t.Fatalf("after eu's TTL: %+v %v, table %+v", out, err, hs)
	}
}

func TestGrantStepTooManyHolders(t *testing.T) {
	var hs []Holder
	for i := range MaxHolders {
		var err error
		hs, _, err = GrantStep(hs, 0, 1000, sec, GrantIn{Holder: fmt.Sprint(i), TTL: sec}, 1000)
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := GrantStep(hs, 1, 1000, sec, GrantIn{Holder: "late", TTL: sec}, 1000); !errors.Is(err, ErrTooManyHolders) {
		t.Fatalf("holder %d: %v, want ErrTooManyHolders", MaxHolders+1, err)
	}
	// A known holder still reports; once the others expire, room is made.
	if _, _, err := GrantStep(hs, 1, 1000, sec, GrantIn{Holder: "3", TTL: sec}, 1000); err != nil {
		t.Fatal(err)
	}
	if _, _, err := GrantStep(hs, sec, 1000, sec, GrantIn{Holder: "late", TTL: sec}, 1000); err != nil {
		t.Fatalf("after the others' TTL: %v", err)
	}
}

// The reserve invariant under any interleaving: Σ max(Taken, Allowance)
// stays within the pool, so that what the holders admit in a window, the
// units granted plus what each may admit on its own while cut off (its
// allowance less what it took), never exceeds the pool; no holder takes
// more than max(Share, Allowance) in a window; an allowance never drops
// below min(what was held, what was asked).
func TestGrantStepReserveProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	names := []string{"eu", "us", "ap", "sa", "af"}
	for run := range 300 {
		pool := 1 + rng.Int64N(2000)
		period := int64(1+rng.IntN(5)) * 100_000
		var hs []Holder
		now := int64(rng.IntN(1 << 20))
		// count is what the algorithm (a fixed window of pool) counted.
		win, count := int64(-1), int64(0)
		for step := range 400 {
			now += rng.Int64N(period / 4)
			ws := floorWindow(now, period)
			if ws != win {
				win, count = ws, 0
			}
			h := names[rng.IntN(len(names))]
			var held int64
			for _, x := range hs {
				if x.Name == h && x.Until > now {
					held = x.Allowance
				}
			}
			in := GrantIn{Holder: h, N: rng.Int64N(pool + 1), Demand: rng.Int64N(3 * pool), Allowance: rng.Int64N(pool/2 + 1), TTL: period * int64(1+rng.IntN(8))}
			var out GrantOut
			var err error
			hs, out, err = GrantStep(hs, now, pool, period, in, pool-count)
			if err != nil {
				t.Fatal(err)
			}
			count += out.Units
			var sum int64
			for _, x := range hs {
				sum += max(x.taken(ws), x.Allowance)
			}
			switch {
			case sum > pool:
				t.Fatalf("run %d step %d: Σ max(Taken, Allowance) = %d > pool %d: %+v", run, step, sum, pool, hs)
			case count > pool:
				t.Fatalf("run %d step %d: %d granted in a window of %d", run, step, count, pool)
			case out.Units > 0 && out.Taken > max(out.Share, out.Allowance):
				t.Fatalf("run %d step %d: %+v takes more than its share", run, step, out)
			case out.Units > in.N || out.Units < 0:
				t.Fatalf("run %d step %d: %+v for %+v", run, step, out, in)
			case out.Allowance < min(held, in.Allowance):
				t.Fatalf("run %d step %d: allowance %d < min(held %d, asked %d)", run, step, out.Allowance, held, in.Allowance)
			}
		}
	}
}

// Under saturation, holders that keep asking use the whole pool in every
// window, in equal parts.
func TestGrantStepSaturationUsesThePool(t *testing.T) {
	const pool, period = 1000, sec
	var hs []Holder
	names := []string{"eu", "us", "ap"}
	for w := int64(1); w <= 5; w++ {
		count := int64(0)
		got := map[string]int64{}
		for i := range 60 {
			h := names[i%3]
			var out GrantOut
			hs, out, _ = GrantStep(hs, w*period+int64(i), pool, period, GrantIn{Holder: h, N: 50, Demand: 1000, TTL: 10 * sec}, pool-count)
			count += out.Units
			got[h] += out.Units
		}
		if count != pool || got["eu"] < 333 || got["us"] < 333 || got["ap"] < 333 {
			t.Fatalf("window %d: granted %d %v, want the pool in thirds", w, count, got)
		}
	}
}

// A holder silent for longer than ShareTTL has no share: the others
// share the pool, while its allowance stays reserved until its row
// expires.
func TestGrantStepSilentHolder(t *testing.T) {
	ttl := int64(10 * sec)
	runGrants(t, 900, sec, []grantCase{
		{at: 0, in: GrantIn{Holder: "ap", Demand: 900, Allowance: 100, TTL: ttl}, free: 900, want: GrantOut{Share: 900, Allowance: 100, Holders: 1}},
		{at: 1, in: GrantIn{Holder: "eu", N: 900, Demand: 900, TTL: ttl}, free: 900, want: GrantOut{Units: 450, Share: 450, Taken: 450, Holders: 2}},
		// ap has been silent for over a second: eu takes the pool, less
		// ap's allowance.
		{at: 2*sec + 2, in: GrantIn{Holder: "eu", N: 900, Demand: 900, TTL: ttl}, free: 900, want: GrantOut{Units: 800, Share: 900, Taken: 800, Window: 2 * sec, Holders: 2}},
	})
}
