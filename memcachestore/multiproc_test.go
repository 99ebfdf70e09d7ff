package memcachestore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/memcachedtest"
	"github.com/sluicehq/sluice/internal/testserver/reexec"
	"github.com/sluicehq/sluice/memcachestore"
)

// The multi-process exactness test: several OS processes (this test
// binary run again) share one memcached and hammer the same keys, each
// with several goroutines; every admission is stamped with the time its
// decision used (Reserve reports it: the process's clock, which all of them
// share on one machine), and the parent checks the merged stamps against
// each algorithm's invariant: never more than Rate in a fixed window's
// window (counting admitted hits or every hit) or in a sliding window's
// aligned window, and never more than Burst + Rate·t/Period in any
// interval t for the buckets.
//
// The children start together once all have their store open, and each
// runs for the run's duration. Defaults keep it near 3 s. Longer runs:
//
//	SLUICE_MC_PROCS=8 SLUICE_MC_GOROUTINES=16 SLUICE_MC_DURATION=30s \
//	  go test -run TestMultiProcessExactness -v ./memcachestore
const (
	envProcs = "SLUICE_MC_PROCS"
	envGor   = "SLUICE_MC_GOROUTINES"
	envDur   = "SLUICE_MC_DURATION"
)

const mpPeriod = 200 * time.Millisecond

type mpCase struct {
	Name  string
	Limit sluice.Limit
}

func mpCases() []mpCase {
	return []mpCase{
		{"fixed_window", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 50, Period: mpPeriod}},
		{"fixed_window_all", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 50, Period: mpPeriod, Counting: sluice.CountAll}},
		{"sliding_window", sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 50, Period: mpPeriod}},
		{"token_bucket", sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 50, Period: mpPeriod, Burst: 20}},
		{"gcra", sluice.Limit{Algorithm: sluice.GCRA, Rate: 50, Period: mpPeriod, Burst: 20}},
	}
}

type mpConfig struct {
	Addr       string
	Prefix     string
	Duration   time.Duration
	Goroutines int
}

type mpResult struct {
	Stamps   map[string][]int64
	Errors   int
	FirstErr string
}

// TestMultiProcessHelper is a child's body; it skips unless started by
// TestMultiProcessExactness.
func TestMultiProcessHelper(t *testing.T) {
	var cfg mpConfig
	child := reexec.Helper(t, &cfg)
	store, err := memcachestore.Open(context.Background(), memcachestore.Options{
		Servers: []string{cfg.Addr}, Prefix: cfg.Prefix, MaxIdleConns: cfg.Goroutines * len(mpCases()),
		Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if !child.Ready() {
		return
	}
	end := time.Now().Add(cfg.Duration)
	res := mpResult{Stamps: map[string][]int64{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range mpCases() {
		for range cfg.Goroutines {
			wg.Go(func() {
				var stamps []int64
				var errs int
				var firstErr error
				for time.Now().Before(end) && !child.Stopped() {
					d, at, err := store.Reserve(context.Background(), c.Name, c.Limit, 1)
					switch {
					case err != nil:
						errs++
						if firstErr == nil {
							firstErr = fmt.Errorf("%s: %w", c.Name, err)
						}
					case d.Allowed:
						stamps = append(stamps, at.UnixMicro())
					case d.RetryAfter <= 0:
						errs++
						if firstErr == nil {
							firstErr = fmt.Errorf("%s: denied with RetryAfter %v", c.Name, d.RetryAfter)
						}
					default:
						// Come back soon, but not later than the quota frees.
						time.Sleep(rand.N(min(d.RetryAfter, 2*time.Millisecond) + 1))
					}
				}
				mu.Lock()
				defer mu.Unlock()
				res.Stamps[c.Name] = append(res.Stamps[c.Name], stamps...)
				res.Errors += errs
				if firstErr != nil && res.FirstErr == "" {
					res.FirstErr = firstErr.Error()
				}
			})
		}
	}
	wg.Wait()
	child.Send(res)
}

func TestMultiProcessExactness(t *testing.T) {
	procs := reexec.EnvInt(t, envProcs, 4)
	gor := reexec.EnvInt(t, envGor, 4)
	dur := reexec.EnvDuration(t, envDur, 1500*time.Millisecond)
	m := memcachedtest.Server(t)
	prefix := fmt.Sprintf("mp%d:", rand.Uint32())
	var cfgs []any
	for range procs {
		cfgs = append(cfgs, mpConfig{Addr: m.Addr, Prefix: prefix, Duration: dur, Goroutines: gor})
	}
	g := reexec.Start(t, "TestMultiProcessHelper", cfgs)
	g.Go() // together, once every child has its store open
	start := time.Now()
	merged := map[string][]int64{}
	took := 0
	for msg := range g.Messages() {
		var res mpResult
		if err := json.Unmarshal(msg.Data, &res); err != nil {
			t.Fatalf("child %d: %v", msg.Child, err)
		}
		if res.Errors > 0 {
			t.Errorf("child %d: %d failed decisions, first: %s", msg.Child, res.Errors, res.FirstErr)
		}
		total := 0
		for name, s := range res.Stamps {
			merged[name] = append(merged[name], s...)
			total += len(s)
		}
		if total > 0 {
			took++
		}
	}
	g.Wait()
	for _, c := range mpCases() {
		t.Run(c.Name, func(t *testing.T) {
			s := merged[c.Name]
			if len(s) == 0 {
				t.Skip("INCONCLUSIVE: no admissions")
			}
			slices.Sort(s)
			lim := c.Limit
			pUs := lim.Period.Microseconds()
			switch lim.Algorithm {
			case sluice.FixedWindow, sluice.SlidingWindow:
				counts := map[int64]int{}
				best := 0
				for _, v := range s {
					counts[v/pUs]++
					best = max(best, counts[v/pUs])
				}
				t.Logf("%d admissions; at most %d in a window", len(s), best)
				for w, n := range counts {
					if n > lim.Rate {
						t.Errorf("%d admissions in window [%d, +%d), want <= Rate %d", n, w*pUs, pUs, lim.Rate)
					}
				}
			case sluice.TokenBucket, sluice.GCRA:
				rate, burst := int64(lim.Rate), int64(lim.Capacity())
				for i := range s {
					for j := i; j < len(s); j++ {
						if int64(j-i+1)*pUs > burst*pUs+rate*(s[j]-s[i]) {
							t.Fatalf("%d admissions in [%d, %d] (%d µs), want <= Burst %d + Rate %d * %d/%d",
								j-i+1, s[i], s[j], s[j]-s[i], burst, rate, s[j]-s[i], pUs)
						}
					}
				}
				t.Logf("%d admissions over %d µs from %v", len(s), s[len(s)-1]-s[0], time.UnixMicro(s[0]).Sub(start))
			}
		})
	}
	if took < 2 {
		t.Skipf("INCONCLUSIVE: only %d of %d processes were admitted anything: the machine could not run them together", took, procs)
	}
}
