package tiered_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/reexec"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/tiered"
)

// The multi-process exactness test through tiered with leases: several OS
// processes (this test binary re-executed) share one redis-server and
// hammer the same keys through tiered. Each child records every lease the
// store granted (its Redis time and units) and every return, and counts
// what it admitted. The parent checks:
//   - over the net grants (units leased less units returned, at the
//     lease's Redis time: the stamps the store counts), each algorithm's
//     invariant: at most Rate in any interval of length Period (sliding
//     log), in any epoch-aligned window (fixed and sliding window), and at
//     most Burst + Rate·t/Period in any interval t (buckets);
//   - that each process admitted no more than it was granted net.
//
// The run goes by counts, not by the clock: the children
// (internal/testserver/reexec) start together once all are ready, and the
// parent stops them once each has admitted mpMinAdmitted on every
// algorithm and the run has spanned mpMinPeriods periods of Redis time (or
// after mpMaxAttempts attempts). Longer runs, with at least this much wall
// time:
//
//	SLUICE_TIERED_MP_PROCS=8 SLUICE_TIERED_MP_DURATION=20s go test -run TestMultiProcessLeases -v ./tiered
const (
	mpEnvProcs    = "SLUICE_TIERED_MP_PROCS"
	mpEnvDur      = "SLUICE_TIERED_MP_DURATION"
	mpPeriod      = 200 * time.Millisecond
	mpWorkers     = 6
	mpMinAdmitted = 50
	mpMinPeriods  = 5
	mpMaxAttempts = 1_000_000
)

func mpLimits() []sluice.Limit {
	return []sluice.Limit{
		{Algorithm: sluice.FixedWindow, Rate: 100, Period: mpPeriod},
		{Algorithm: sluice.SlidingWindow, Rate: 100, Period: mpPeriod},
		{Algorithm: sluice.SlidingLog, Rate: 100, Period: mpPeriod},
		{Algorithm: sluice.TokenBucket, Rate: 100, Period: mpPeriod, Burst: 40},
		{Algorithm: sluice.GCRA, Rate: 100, Period: mpPeriod, Burst: 40},
	}
}

type mpChildConfig struct {
	Addr    string
	Prefix  string
	Refresh float64 // WithRefreshAhead's low water; 0: off
}

// mpGrant is one lease (Units > 0) or return (Units < 0) at a Redis time.
type mpGrant struct {
	At    int64 // µs
	Units int
}

// A child sends its admissions and attempts as it goes (Final false), and
// at the end, after closing its store, everything (Final true).
type mpChildResult struct {
	Final    bool
	Attempts int
	Grants   map[string][]mpGrant // by algorithm
	Admitted map[string]int
	// Fixed are the fixed-window admissions, as the wall-clock µs before
	// and after their call (the same clock as Redis TIME on this host).
	Fixed    [][2]int64
	Errors   int
	FirstErr string
}

// recorder is a sluice.Reserver that records what the store grants and takes
// back.
type recorder struct {
	*redisstore.Store
	mu     sync.Mutex
	grants map[sluice.Algorithm][]mpGrant
}

func (r *recorder) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	d, at, err := r.Store.Reserve(ctx, key, lim, n)
	if err == nil && d.Allowed {
		r.mu.Lock()
		r.grants[lim.Algorithm] = append(r.grants[lim.Algorithm], mpGrant{at.UnixMicro(), n})
		r.mu.Unlock()
	}
	return d, at, err
}

func (r *recorder) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	err := r.Store.Return(ctx, key, lim, n, at)
	if err == nil {
		r.mu.Lock()
		r.grants[lim.Algorithm] = append(r.grants[lim.Algorithm], mpGrant{at.UnixMicro(), -n})
		r.mu.Unlock()
	}
	return err
}

func TestMultiProcessLeasesHelper(t *testing.T) {
	var cfg mpChildConfig
	child := reexec.Helper(t, &cfg)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{cfg.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rec := &recorder{Store: redisstore.NewRueidis(c), grants: map[sluice.Algorithm][]mpGrant{}}
	opts := []tiered.Option{tiered.WithLeases(16, 0.25, 50*time.Millisecond), tiered.WithStampedLeases()}
	if cfg.Refresh > 0 {
		opts = append(opts, tiered.WithRefreshAhead(cfg.Refresh))
	}
	s := newTiered(t, rec, opts...)
	lims := mpLimits()
	var mu sync.Mutex
	res := mpChildResult{Grants: map[string][]mpGrant{}, Admitted: map[string]int{}}
	var wg sync.WaitGroup
	if !child.Ready() {
		return
	}
	for range mpWorkers {
		wg.Go(func() {
			for i := 0; !child.Stopped(); i++ {
				lim := lims[rand.IntN(len(lims))]
				before := time.Now().UnixMicro()
				d, err := s.AllowN(context.Background(), cfg.Prefix+lim.Algorithm.String(), lim, 1)
				after := time.Now().UnixMicro()
				mu.Lock()
				res.Attempts++
				switch {
				case err != nil:
					res.Errors++
					if res.FirstErr == "" {
						res.FirstErr = err.Error()
					}
				case d.Allowed:
					res.Admitted[lim.Algorithm.String()]++
					if lim.Algorithm == sluice.FixedWindow {
						res.Fixed = append(res.Fixed, [2]int64{before, after})
					}
				}
				mu.Unlock()
				if i%4 == 0 {
					time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				}
			}
		})
	}
	progress := func() mpChildResult {
		mu.Lock()
		defer mu.Unlock()
		return mpChildResult{Attempts: res.Attempts, Admitted: maps.Clone(res.Admitted), Errors: res.Errors, FirstErr: res.FirstErr}
	}
	child.SendUntil(&wg, 20*time.Millisecond, func() any { return progress() })
	if err := s.Close(); err != nil { // returns the unspent units
		res.Errors++
		res.FirstErr = err.Error()
	}
	for a, g := range rec.grants {
		res.Grants[a.String()] = g
	}
	res.Final = true
	child.Send(res)
}

func TestMultiProcessLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several processes and a redis-server; skipped with -short")
	}
	procs := reexec.EnvInt(t, mpEnvProcs, 4)
	atLeast := reexec.EnvDuration(t, mpEnvDur, 0)
	srv := redistest.Server(t)
	prefix := fmt.Sprintf("tiered-mp/%016x/", rand.Uint64())
	var cfgs []any
	for i := range procs {
		cfgs = append(cfgs, mpChildConfig{Addr: srv.Addr, Prefix: prefix,
			Refresh: []float64{0, 0.5}[i%2]}) // half the processes take leases ahead
	}
	g := reexec.Start(t, "TestMultiProcessLeasesHelper", cfgs)
	progress := make([]mpChildResult, procs)
	finals := make([]*mpChildResult, procs)
	// goal returns what the run has not reached yet, or "".
	goal := func() string {
		for i, p := range progress {
			for _, lim := range mpLimits() {
				if n := p.Admitted[lim.Algorithm.String()]; n < mpMinAdmitted {
					return fmt.Sprintf("child %d admitted %d on %s (want %d)", i, n, lim.Algorithm, mpMinAdmitted)
				}
			}
		}
		return ""
	}
	g.Go()
	began := time.Now()
	attempts := 0
	for m := range g.Messages() {
		var r mpChildResult
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatalf("child %d: %v", m.Child, err)
		}
		if r.Final {
			finals[m.Child] = &r
			continue
		}
		attempts += r.Attempts - progress[m.Child].Attempts
		progress[m.Child] = r
		if r.Errors > 0 || goal() == "" && time.Since(began) >= atLeast && time.Since(began) >= mpMinPeriods*mpPeriod || attempts >= mpMaxAttempts {
			g.Stop()
		}
	}
	g.Wait()
	if miss := goal(); miss != "" {
		t.Errorf("after %d attempts: %s", attempts, miss)
	}
	merged := map[string][]mpGrant{}
	fixedWin := map[int64]int{} // admissions certainly within one window
	for i := range procs {
		res := finals[i]
		if res == nil {
			t.Fatalf("child %d sent no result:\n%s", i, g.Log(i))
		}
		if res.Errors > 0 {
			t.Errorf("child %d: %d errors, first: %s", i, res.Errors, res.FirstErr)
		}
		p := mpPeriod.Microseconds()
		for _, a := range res.Fixed {
			if w := a[0] / p; w == a[1]/p {
				fixedWin[w]++
			}
		}
		for _, lim := range mpLimits() {
			a := lim.Algorithm.String()
			leased, returned := 0, 0
			for _, g := range res.Grants[a] {
				if g.Units > 0 {
					leased += g.Units
				} else {
					returned -= g.Units
				}
			}
			if res.Admitted[a] > leased-returned {
				t.Errorf("child %d, %s: admitted %d, but was granted only %d net (%d leased, %d returned)", i, a, res.Admitted[a], leased-returned, leased, returned)
			}
			t.Logf("child %d, %s: admitted %d; leased %d in %d leases, returned %d", i, a, res.Admitted[a], leased, countPositive(res.Grants[a]), returned)
			merged[a] = append(merged[a], res.Grants[a]...)
		}
	}
	// Fixed-window leases are spent within their window: in real time too,
	// no window holds more than Rate admissions.
	fixedRate, most := mpLimits()[0].Rate, 0
	for w, n := range fixedWin {
		most = max(most, n)
		if n > fixedRate {
			t.Errorf("fixed_window: %d admissions in real time within the window starting at %dµs, want at most %d", n, w*mpPeriod.Microseconds(), fixedRate)
		}
	}
	t.Logf("fixed_window: at most %d admissions in one window in real time (limit %d)", most, fixedRate)
	for _, lim := range mpLimits() {
		a := lim.Algorithm.String()
		net := netStamps(merged[a])
		total := 0
		for _, s := range net {
			total += s.Units
		}
		if total == 0 {
			t.Errorf("%s: nothing was admitted", a)
			continue
		}
		if msg := checkInvariant(lim, net); msg != "" {
			t.Errorf("%s: %s", a, msg)
		}
		t.Logf("%s: %d units admitted net over %v across %d processes", a, total, time.Since(began).Round(time.Millisecond), procs)
	}
}

func countPositive(gs []mpGrant) int {
	n := 0
	for _, g := range gs {
		if g.Units > 0 {
			n++
		}
	}
	return n
}

// netStamps merges grants and returns by time: units still counted at each
// stamp, in time order, zeros dropped.
func netStamps(gs []mpGrant) []mpGrant {
	by := map[int64]int{}
	for _, g := range gs {
		by[g.At] += g.Units
	}
	var out []mpGrant
	for at, u := range by {
		if u < 0 {
			u = 0 // cannot happen: a return gives back units of its own lease
		}
		if u > 0 {
			out = append(out, mpGrant{at, u})
		}
	}
	slices.SortFunc(out, func(a, b mpGrant) int { return int(a.At - b.At) })
	return out
}

// checkInvariant returns a description of the first violation, or "".
func checkInvariant(lim sluice.Limit, s []mpGrant) string {
	p := lim.Period.Microseconds()
	switch lim.Algorithm {
	case sluice.SlidingLog:
		sum, j := 0, 0
		for i := range s {
			sum += s[i].Units
			for s[i].At-s[j].At >= p { // keep (s[i].At-P, s[i].At]
				sum -= s[j].Units
				j++
			}
			if sum > lim.Rate {
				return fmt.Sprintf("%d units stamped within %dµs ending at %d, want at most %d in any Period", sum, s[i].At-s[j].At, s[i].At, lim.Rate)
			}
		}
	case sluice.FixedWindow, sluice.SlidingWindow:
		count := map[int64]int{}
		for _, g := range s {
			w := g.At - g.At%p
			count[w] += g.Units
			if count[w] > lim.Rate {
				return fmt.Sprintf("%d units in the window starting at %d, want at most %d", count[w], w, lim.Rate)
			}
		}
	case sluice.TokenBucket, sluice.GCRA:
		burst := lim.Capacity()
		for i := range s {
			sum := 0
			for j := i; j < len(s); j++ {
				sum += s[j].Units
				// Admissions in [s[i].At, s[j].At] at most Burst + Rate·t/P.
				if float64(sum) > float64(burst)+float64(lim.Rate)*float64(s[j].At-s[i].At)/float64(p)+1e-9 {
					return fmt.Sprintf("%d units within %dµs from %d, want at most %d + %d·t/P", sum, s[j].At-s[i].At, s[i].At, burst, lim.Rate)
				}
			}
		}
	}
	return ""
}
