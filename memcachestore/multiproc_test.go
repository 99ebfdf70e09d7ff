package memcachestore_test

import (
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

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/memcachedtest"
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
// The children start together once all have their store open. Defaults
// keep it near 3 s. Longer runs:
//
//	SLUICE_MC_PROCS=8 SLUICE_MC_GOROUTINES=16 SLUICE_MC_DURATION=30s \
//	  go test -run TestMultiProcessExactness -v ./memcachestore
const (
	envChild = "SLUICE_MC_CHILD" // set in children: the JSON config
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
	Out        string
	Ready      string // the child creates it once its store is open
	Go         string // the parent writes the start time there once all are ready
}

// waitFile returns the contents of path once it exists, or fails t after a
// minute (only a broken machine takes that long).
func waitFile(t *testing.T, path string) []byte {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil {
			return b
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s did not appear within a minute", path)
	return nil
}

type mpResult struct {
	Stamps   map[string][]int64
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

// TestMultiProcessHelper is a child's body; it skips unless started by
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
	store, err := memcachestore.Open(context.Background(), memcachestore.Options{
		Servers: []string{cfg.Addr}, Prefix: cfg.Prefix, MaxIdleConns: cfg.Goroutines * len(mpCases()),
		Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := os.WriteFile(cfg.Ready, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var start time.Time
	if err := start.UnmarshalText(waitFile(t, cfg.Go)); err != nil {
		t.Fatal(err)
	}
	res := mpResult{Stamps: map[string][]int64{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	end := start.Add(cfg.Duration)
	for _, c := range mpCases() {
		for range cfg.Goroutines {
			wg.Go(func() {
				var stamps []int64
				var errs int
				var firstErr error
				time.Sleep(time.Until(start))
				for time.Now().Before(end) {
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
	m := memcachedtest.Server(t)
	dir := t.TempDir()
	goFile := filepath.Join(dir, "go")
	prefix := fmt.Sprintf("mp%d:", rand.Uint32())

	type child struct {
		cmd *exec.Cmd
		out string
		log string
	}
	var children []child
	for p := range procs {
		cfg := mpConfig{Addr: m.Addr, Prefix: prefix, Duration: dur, Goroutines: gor,
			Out: filepath.Join(dir, fmt.Sprintf("child%d.json", p)), Ready: filepath.Join(dir, fmt.Sprintf("child%d.ready", p)), Go: goFile}
		raw, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		logName := filepath.Join(dir, fmt.Sprintf("child%d.log", p))
		logf, err := os.Create(logName)
		if err != nil {
			t.Fatal(err)
		}
		defer logf.Close()
		ctx, cancel := context.WithTimeout(context.Background(), dur+3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMultiProcessHelper$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), envChild+"="+string(raw))
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatalf("start child %d: %v", p, err)
		}
		children = append(children, child{cmd: cmd, out: cfg.Out, log: logName})
		defer func() { _ = cmd.Process.Kill() }() // a child left waiting when the parent fails
	}
	// Start together, once every child has its store open.
	for p := range procs {
		waitFile(t, filepath.Join(dir, fmt.Sprintf("child%d.ready", p)))
	}
	start := time.Now().Add(100 * time.Millisecond)
	startText, _ := start.MarshalText()
	if err := os.WriteFile(goFile+".tmp", startText, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(goFile+".tmp", goFile); err != nil { // appears whole
		t.Fatal(err)
	}
	merged := map[string][]int64{}
	took := 0
	for p, c := range children {
		err := c.cmd.Wait()
		logText, _ := os.ReadFile(c.log)
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
		if total > 0 {
			took++
		}
	}
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
