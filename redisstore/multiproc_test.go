package redisstore_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// The multi-process exactness test: several OS processes (this test binary
// re-executed) share one Redis and hammer the same keys; every process
// records the Redis time of each admission as the script used it (Lease
// reports it), and the parent checks the merged stamps against each
// algorithm's invariant.
//
// Defaults keep it near 3 s. Longer runs:
//
//	SLUICE_MULTIPROC_PROCS=8 SLUICE_MULTIPROC_GOROUTINES=16 SLUICE_MULTIPROC_DURATION=30s \
//	  go test -run TestMultiProcessExactness -v ./redisstore
const (
	envChild = "SLUICE_MULTIPROC_CHILD" // set in children: the JSON config
	envProcs = "SLUICE_MULTIPROC_PROCS"
	envGor   = "SLUICE_MULTIPROC_GOROUTINES"
	envDur   = "SLUICE_MULTIPROC_DURATION"
)

// mpPeriod is short so that a short run spans many periods.
const mpPeriod = 200 * time.Millisecond

// mpCase is one key hammered by every process with one pattern.
type mpCase struct {
	Name    string
	Limit   sluice.Limit
	Pattern string // "hammer" or "boundary"
}

func mpCases() []mpCase {
	lims := []sluice.Limit{
		{Algorithm: sluice.SlidingLog, Rate: 50, Period: mpPeriod},
		{Algorithm: sluice.FixedWindow, Rate: 50, Period: mpPeriod},
		{Algorithm: sluice.SlidingWindow, Rate: 50, Period: mpPeriod},
		{Algorithm: sluice.TokenBucket, Rate: 50, Period: mpPeriod, Burst: 20},
		{Algorithm: sluice.GCRA, Rate: 50, Period: mpPeriod, Burst: 20},
	}
	var cs []mpCase
	for _, p := range []string{"hammer", "boundary"} {
		for _, l := range lims {
			cs = append(cs, mpCase{Name: l.Algorithm.String() + "/" + p, Limit: l, Pattern: p})
		}
	}
	return cs
}

// mpCostCases are sliding logs of 100,000 (a log of up to 100,000
// entries), hammered with costs of 1 to 2,000 units, so that a short run
// fills them: one of an hour (its window never slides during the run) and
// one of 200ms (it slides many times).
func mpCostCases() []mpCase {
	return []mpCase{
		{Name: "sliding_log/100000 per hour/costs", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 100_000, Period: time.Hour}, Pattern: "costs"},
		{Name: "sliding_log/100000 per 200ms/costs", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 100_000, Period: mpPeriod}, Pattern: "costs"},
	}
}

// mpUnits is an admission of several units: its Redis time (µs) and cost.
type mpUnits struct{ At, N int64 }

// mpConfig is what the parent tells a child, as JSON in envChild.
type mpConfig struct {
	Addr       string
	Client     string // "rueidis" or "go-redis"
	Prefix     string // of every key, unique per run
	Start      time.Time
	Duration   time.Duration
	Goroutines int
	Out        string // file for the child's mpResult
}

// mpResult is what a child reports: per case, the Redis-time stamps (µs)
// of its admissions.
type mpResult struct {
	Stamps   map[string][]int64
	Units    map[string][]mpUnits // of mpCostCases
	Errors   int
	FirstErr string
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}

// TestMultiProcessHelper is the child's body; it skips unless started by
// TestMultiProcessExactness.
func TestMultiProcessHelper(t *testing.T) {
	raw := os.Getenv(envChild)
	if raw == "" {
		t.Skip("helper process of TestMultiProcessExactness")
	}
	var cfg mpConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("%s: %v", envChild, err)
	}
	var store *redisstore.Store
	switch cfg.Client {
	case "rueidis":
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{cfg.Addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		store = redisstore.NewRueidis(c)
	case "go-redis":
		c := redis.NewClient(&redis.Options{Addr: cfg.Addr, MaxRetries: -1})
		defer c.Close()
		store = redisstore.NewGoRedis(c)
	default:
		t.Fatalf("unknown client %q", cfg.Client)
	}
	defer store.Close()

	res := mpResult{Stamps: map[string][]int64{}, Units: map[string][]mpUnits{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	end := cfg.Start.Add(cfg.Duration)
	for _, c := range mpCostCases() {
		key := cfg.Prefix + c.Name
		for range cfg.Goroutines {
			wg.Go(func() {
				var units []mpUnits
				var errs int
				var firstErr error
				time.Sleep(time.Until(cfg.Start))
				for time.Now().Before(end) {
					n := 1 + rand.IntN(2000)
					d, at, err := store.Lease(context.Background(), key, c.Limit, n)
					switch {
					case err != nil:
						errs++
						if firstErr == nil {
							firstErr = err
						}
					case d.Allowed:
						units = append(units, mpUnits{at.UnixMicro(), int64(n)})
					default:
						time.Sleep(rand.N(min(d.RetryAfter, 2*time.Millisecond) + 1))
					}
				}
				mu.Lock()
				defer mu.Unlock()
				res.Units[c.Name] = append(res.Units[c.Name], units...)
				res.Errors += errs
				if firstErr != nil && res.FirstErr == "" {
					res.FirstErr = firstErr.Error()
				}
			})
		}
	}
	for _, c := range mpCases() {
		key := cfg.Prefix + c.Name
		for range cfg.Goroutines {
			wg.Go(func() {
				var stamps []int64
				var errs int
				var firstErr error
				lease := func() bool {
					d, at, err := store.Lease(context.Background(), key, c.Limit, 1)
					if err != nil {
						errs++
						if firstErr == nil {
							firstErr = err
						}
						return false
					}
					if d.Allowed {
						stamps = append(stamps, at.UnixMicro())
					}
					if !d.Allowed && d.RetryAfter <= 0 {
						errs++
						if firstErr == nil {
							firstErr = fmt.Errorf("%s: denied with RetryAfter %v", c.Name, d.RetryAfter)
						}
					}
					if d.Allowed {
						return true
					}
					// Come back soon, but not later than the quota frees.
					time.Sleep(rand.N(min(d.RetryAfter, 2*time.Millisecond) + 1))
					return false
				}
				time.Sleep(time.Until(cfg.Start))
				switch c.Pattern {
				case "hammer":
					for time.Now().Before(end) {
						lease()
					}
				case "boundary":
					// A burst just before an epoch-aligned window
					// boundary and one just after it, at every
					// second boundary (multiples of 2P, the same
					// in every goroutine and process), so that the
					// window before each pair is fresh: a fixed
					// window admits 2*Rate within a few
					// milliseconds there, a sliding log Rate.
					p := c.Limit.Period
					for b := time.Now().Truncate(2 * p).Add(2 * p); b.Before(end); b = b.Add(2 * p) {
						for _, at := range []time.Time{
							b.Add(-5*time.Millisecond - rand.N(5*time.Millisecond)),
							b.Add(rand.N(2 * time.Millisecond)),
						} {
							time.Sleep(time.Until(at))
							for range 10 {
								d, at, err := store.Lease(context.Background(), key, c.Limit, 1)
								switch {
								case err != nil:
									errs++
									if firstErr == nil {
										firstErr = err
									}
								case d.Allowed:
									stamps = append(stamps, at.UnixMicro())
								}
							}
						}
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
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.Out, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestMultiProcessExactness(t *testing.T) {
	if os.Getenv(envChild) != "" {
		t.Skip("in a helper process")
	}
	procs := envInt(t, envProcs, 4)
	gor := envInt(t, envGor, 4)
	dur := envDuration(t, envDur, 1500*time.Millisecond)
	srv := redistest.Server(t)
	dir := t.TempDir()
	start := time.Now().Add(time.Second) // time for every child to start
	prefix := fmt.Sprintf("mp%d:", rand.Uint32())

	type child struct {
		cmd *exec.Cmd
		out string
		log *os.File
	}
	var children []child
	for p := range procs {
		cfg := mpConfig{
			Addr: srv.Addr, Client: []string{"rueidis", "go-redis"}[p%2], Prefix: prefix,
			Start: start, Duration: dur, Goroutines: gor,
			Out: filepath.Join(dir, fmt.Sprintf("child%d.json", p)),
		}
		raw, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("child%d.log", p)))
		if err != nil {
			t.Fatal(err)
		}
		defer logf.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Until(start)+dur+time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMultiProcessHelper$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), envChild+"="+string(raw))
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatalf("start child %d: %v", p, err)
		}
		children = append(children, child{cmd: cmd, out: cfg.Out, log: logf})
	}
	merged := map[string][]int64{}
	mergedUnits := map[string][]mpUnits{}
	for p, c := range children {
		err := c.cmd.Wait()
		logText, _ := os.ReadFile(c.log.Name())
		if err != nil {
			t.Fatalf("child %d: %v\n%s", p, err, logText)
		}
		raw, err := os.ReadFile(c.out)
		if err != nil {
			t.Fatalf("child %d wrote no result: %v\n%s", p, err, logText)
		}
		var res mpResult
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatalf("child %d: %v", p, err)
		}
		if res.Errors > 0 {
			t.Errorf("child %d: %d failed decisions, first: %s", p, res.Errors, res.FirstErr)
		}
		total := 0
		for name, s := range res.Stamps {
			merged[name] = append(merged[name], s...)
			total += len(s)
		}
		for name, u := range res.Units {
			mergedUnits[name] = append(mergedUnits[name], u...)
		}
		if total == 0 {
			t.Errorf("child %d (%s) was never admitted: it did not take part", p, []string{"rueidis", "go-redis"}[p%2])
		}
	}

	for _, c := range mpCostCases() {
		t.Run(c.Name, func(t *testing.T) {
			u := mergedUnits[c.Name]
			if len(u) == 0 {
				t.Fatal("no admissions")
			}
			slices.SortFunc(u, func(a, b mpUnits) int { return cmp.Compare(a.At, b.At) })
			got, at := maxUnitsInWindow(u, c.Limit.Period.Microseconds())
			t.Logf("%d admissions; at most %d units in any %v (at %d)", len(u), got, c.Limit.Period, at)
			if got > int64(c.Limit.Rate) {
				t.Errorf("%d units admitted in (%d-%d, %d], want <= Rate %d", got, at, c.Limit.Period.Microseconds(), at, c.Limit.Rate)
			}
		})
	}
	durUs := dur.Microseconds()
	for _, c := range mpCases() {
		t.Run(c.Name, func(t *testing.T) {
			s := merged[c.Name]
			slices.Sort(s)
			if len(s) == 0 {
				t.Fatal("no admissions")
			}
			lim := c.Limit
			pUs := lim.Period.Microseconds()
			rate, burst := int64(lim.Rate), int64(lim.Capacity())
			switch lim.Algorithm {
			case sluice.SlidingLog:
				got, at := maxInWindow(s, pUs)
				t.Logf("%d admissions; at most %d in any %v (at %d)", len(s), got, lim.Period, at)
				if got > lim.Rate {
					t.Errorf("%d admissions in (%d-%d, %d], want <= Rate %d", got, at, pUs, at, lim.Rate)
				}
				if c.Pattern == "hammer" && got != lim.Rate {
					t.Errorf("at most %d admissions in any period under saturation, want exactly Rate %d", got, lim.Rate)
				}
			case sluice.FixedWindow, sluice.SlidingWindow:
				got, w := maxInAlignedWindow(s, pUs)
				t.Logf("%d admissions; at most %d in an aligned window (%d)", len(s), got, w)
				if got > lim.Rate {
					t.Errorf("%d admissions in window [%d, +%d), want <= Rate %d", got, w*pUs, pUs, lim.Rate)
				}
				if lim.Algorithm == sluice.FixedWindow && c.Pattern == "hammer" && got != lim.Rate {
					t.Errorf("at most %d admissions in a window under saturation, want exactly Rate %d", got, lim.Rate)
				}
				if lim.Algorithm == sluice.FixedWindow && c.Pattern == "boundary" {
					// The pattern must straddle boundaries, or the
					// sliding log's boundary case proves nothing.
					sliding, at := maxInWindow(s, pUs)
					t.Logf("fixed window: %d admissions in (%d-%d, %d]", sliding, at, pUs, at)
					if sliding <= lim.Rate {
						t.Errorf("fixed window admitted at most %d in any %v, want > Rate %d: the bursts missed the boundaries", sliding, lim.Period, lim.Rate)
					}
				}
			case sluice.TokenBucket, sluice.GCRA:
				// Admissions i..j lie in an interval of length
				// s[j]-s[i]: at most Burst + Rate*(s[j]-s[i])/P.
				for i := range s {
					for j := i; j < len(s); j++ {
						if int64(j-i+1)*pUs > burst*pUs+rate*(s[j]-s[i]) {
							t.Fatalf("%d admissions in [%d, %d] (%d µs), want <= Burst %d + Rate %d * %d/%d",
								j-i+1, s[i], s[j], s[j]-s[i], burst, rate, s[j]-s[i], pUs)
						}
					}
				}
				span := s[len(s)-1] - s[0]
				t.Logf("%d admissions over %d µs; bound %d", len(s), span, burst+rate*span/pUs)
				if max := burst + rate*durUs/pUs; c.Pattern == "hammer" && int64(len(s)) < max/2 {
					t.Errorf("%d admissions under saturation, want at least half of %d", len(s), max)
				}
			}
		})
	}
}

// maxInWindow returns the largest number of stamps in any interval
// (t-p, t], and such a t. s is sorted.
func maxInWindow(s []int64, p int64) (int, int64) {
	best, at, lo := 0, int64(0), 0
	for j := range s {
		for s[lo] <= s[j]-p {
			lo++
		}
		if n := j - lo + 1; n > best {
			best, at = n, s[j]
		}
	}
	return best, at
}

// maxUnitsInWindow returns the largest number of units admitted in any
// interval (t-p, t], and such a t. u is sorted by time.
func maxUnitsInWindow(u []mpUnits, p int64) (int64, int64) {
	var best, at, sum int64
	lo := 0
	for j := range u {
		sum += u[j].N
		for u[lo].At <= u[j].At-p {
			sum -= u[lo].N
			lo++
		}
		if sum > best {
			best, at = sum, u[j].At
		}
	}
	return best, at
}

// maxInAlignedWindow returns the largest number of stamps in one window
// [k*p, (k+1)*p), and that k.
func maxInAlignedWindow(s []int64, p int64) (int, int64) {
	counts := map[int64]int{}
	best, win := 0, int64(0)
	for _, v := range s {
		k := v / p // stamps are after the epoch
		counts[k]++
		if counts[k] > best {
			best, win = counts[k], k
		}
	}
	return best, win
}

func TestMaxInWindow(t *testing.T) {
	cases := []struct {
		give   []int64
		p      int64
		want   int
		wantAt int64
	}{
		{[]int64{1}, 10, 1, 1},
		{[]int64{0, 10, 20}, 10, 1, 0},          // (t-10, t] excludes t-10
		{[]int64{0, 9, 10, 19}, 10, 2, 9},       // {0,9}, then {10,19}
		{[]int64{0, 5, 5, 5, 14, 15}, 10, 4, 5}, // equal stamps all count
	}
	for _, tt := range cases {
		got, at := maxInWindow(tt.give, tt.p)
		if got != tt.want || at != tt.wantAt {
			t.Errorf("maxInWindow(%v, %d) = %d at %d, want %d at %d", tt.give, tt.p, got, at, tt.want, tt.wantAt)
		}
	}
	if got, k := maxInAlignedWindow([]int64{0, 9, 10, 11, 12, 25}, 10); got != 3 || k != 1 {
		t.Errorf("maxInAlignedWindow = %d in window %d, want 3 in window 1", got, k)
	}
}
