package redisstore_test

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
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// The semaphore's multi-process tests: this test binary re-executed as
// children (envSemChild holds a child's JSON config) that share one Redis.
//
// Longer runs of the exactness test:
//
//	SLUICE_MULTIPROC_PROCS=8 SLUICE_MULTIPROC_GOROUTINES=16 SLUICE_MULTIPROC_DURATION=30s \
//	  go test -run TestSemaphoreMultiProcessExactness -v ./redisstore
const envSemChild = "SLUICE_SEM_CHILD"

type semConfig struct {
	Mode       string // "exact" or "crash"
	Addr       string
	Client     string // "rueidis" or "go-redis"
	Key        string
	Limit      sluice.ConcurrencyLimit
	Start      time.Time
	Duration   time.Duration
	Goroutines int
	Out        string
}

// semInterval is one holding, [Acq, Rel) in Redis µs.
type semInterval struct{ Acq, Rel int64 }

type semResult struct {
	Intervals []semInterval
	MaxHeld   int // the largest Held a reply reported
	Denials   int
	Errors    int
	FirstErr  string
	// Crash mode: the permits the child holds when it is killed.
	Holders []string
	Expires []int64
}

func semChildStore(t *testing.T, cfg semConfig) *redisstore.Store {
	switch cfg.Client {
	case "rueidis":
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{cfg.Addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return redisstore.NewRueidis(c)
	case "go-redis":
		c := redis.NewClient(&redis.Options{Addr: cfg.Addr, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		return redisstore.NewGoRedis(c)
	}
	t.Fatalf("unknown client %q", cfg.Client)
	return nil
}

func writeJSON(t *testing.T, path string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestSemaphoreHelper is a child's body; it skips unless started by the
// tests below.
func TestSemaphoreHelper(t *testing.T) {
	raw := os.Getenv(envSemChild)
	if raw == "" {
		t.Skip("helper process of the semaphore's multi-process tests")
	}
	var cfg semConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("%s: %v", envSemChild, err)
	}
	s := semChildStore(t, cfg)
	ctx := context.Background()
	lease := cfg.Limit.TTL.Microseconds()
	if cfg.Mode == "crash" {
		var res semResult
		for i := range cfg.Limit.Max {
			h := fmt.Sprintf("child-%d", i)
			d, err := s.Acquire(ctx, cfg.Key, cfg.Limit, h)
			if err != nil || !d.Acquired {
				t.Fatalf("Acquire %s = %+v, %v", h, d, err)
			}
			res.Holders = append(res.Holders, h)
			res.Expires = append(res.Expires, d.Expires.UnixMicro())
			time.Sleep(20 * time.Millisecond) // leases that end at distinct times
		}
		writeJSON(t, cfg.Out, res)
		time.Sleep(time.Hour) // held until killed
		return
	}

	var mu sync.Mutex
	var res semResult
	var wg sync.WaitGroup
	end := cfg.Start.Add(cfg.Duration)
	for range cfg.Goroutines {
		wg.Go(func() {
			var local semResult
			fail := func(err error) {
				local.Errors++
				if local.FirstErr == "" {
					local.FirstErr = err.Error()
				}
			}
			time.Sleep(time.Until(cfg.Start))
			for time.Now().Before(end) {
				h := sluice.NewHolder()
				d, err := s.Acquire(ctx, cfg.Key, cfg.Limit, h)
				if err != nil {
					fail(err)
					continue
				}
				local.MaxHeld = max(local.MaxHeld, d.Held)
				if !d.Acquired {
					local.Denials++
					if d.RetryAfter <= 0 {
						fail(fmt.Errorf("denied with RetryAfter %v", d.RetryAfter))
					}
					time.Sleep(rand.N(time.Millisecond))
					continue
				}
				acq := d.Expires.UnixMicro() - lease
				time.Sleep(rand.N(3 * time.Millisecond))
				rel, err := s.ReleaseAt(ctx, cfg.Key, h)
				if err != nil {
					// Not known when it ended: count it held to its lease's end.
					fail(err)
					local.Intervals = append(local.Intervals, semInterval{acq, d.Expires.UnixMicro()})
					continue
				}
				local.Intervals = append(local.Intervals, semInterval{acq, rel.UnixMicro()})
			}
			mu.Lock()
			defer mu.Unlock()
			res.Intervals = append(res.Intervals, local.Intervals...)
			res.MaxHeld = max(res.MaxHeld, local.MaxHeld)
			res.Denials += local.Denials
			res.Errors += local.Errors
			if res.FirstErr == "" {
				res.FirstErr = local.FirstErr
			}
		})
	}
	wg.Wait()
	writeJSON(t, cfg.Out, res)
}

// startSemChild starts a child with cfg; its log goes to a file in dir.
func startSemChild(t *testing.T, cfg semConfig) (*exec.Cmd, string) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logPath := cfg.Out + ".log"
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	cmd := exec.Command(os.Args[0], "-test.run=^TestSemaphoreHelper$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envSemChild+"="+string(raw))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, logPath
}

// maxConcurrent sweeps the intervals [Acq, Rel): the most held at once,
// and an instant where that many were. At equal times a release counts
// before an acquire: the intervals are half-open.
func maxConcurrent(iv []semInterval) (most int, at int64) {
	type ev struct {
		t int64
		d int
	}
	evs := make([]ev, 0, 2*len(iv))
	for _, i := range iv {
		evs = append(evs, ev{i.Acq, +1}, ev{i.Rel, -1})
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if a.t != b.t {
			return int(a.t - b.t)
		}
		return a.d - b.d
	})
	n := 0
	for _, e := range evs {
		n += e.d
		if n > most {
			most, at = n, e.t
		}
	}
	return most, at
}

func TestMaxConcurrent(t *testing.T) {
	iv := []semInterval{{0, 10}, {10, 20}, {5, 15}, {12, 13}}
	if got, at := maxConcurrent(iv); got != 3 || at != 12 {
		t.Fatalf("maxConcurrent = %d at %d, want 3 at 12", got, at)
	}
}

func TestSemaphoreMultiProcessExactness(t *testing.T) {
	if os.Getenv(envSemChild) != "" {
		t.Skip("in a helper process")
	}
	procs := envInt(t, envProcs, 4)
	gor := envInt(t, envGor, 4)
	dur := envDuration(t, envDur, 1500*time.Millisecond)
	srv := redistest.Server(t)
	dir := t.TempDir()
	lim := sluice.ConcurrencyLimit{Max: 3, TTL: time.Minute}
	key := fmt.Sprintf("semmp%d", rand.Uint32())
	start := time.Now().Add(time.Second)
	type child struct {
		cmd      *exec.Cmd
		out, log string
	}
	var children []child
	for p := range procs {
		cfg := semConfig{Mode: "exact", Addr: srv.Addr, Client: []string{"rueidis", "go-redis"}[p%2], Key: key, Limit: lim,
			Start: start, Duration: dur, Goroutines: gor, Out: filepath.Join(dir, "child"+strconv.Itoa(p)+".json")}
		cmd, log := startSemChild(t, cfg)
		children = append(children, child{cmd, cfg.Out, log})
	}
	var all []semInterval
	maxHeld, denials := 0, 0
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
		var res semResult
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		if res.Errors > 0 {
			t.Errorf("child %d: %d failed calls, first: %s", p, res.Errors, res.FirstErr)
		}
		if len(res.Intervals) == 0 {
			t.Errorf("child %d never held a permit", p)
		}
		for _, iv := range res.Intervals {
			if iv.Rel < iv.Acq {
				t.Errorf("child %d: holding released at %d before it was acquired at %d", p, iv.Rel, iv.Acq)
			}
		}
		all = append(all, res.Intervals...)
		maxHeld = max(maxHeld, res.MaxHeld)
		denials += res.Denials
	}
	most, at := maxConcurrent(all)
	t.Logf("%d processes × %d goroutines, %v: %d holdings, %d denials; at most %d held at once (at %d µs); largest Held replied %d; Max %d",
		procs, gor, dur, len(all), denials, most, at, maxHeld, lim.Max)
	if most > lim.Max {
		t.Errorf("%d permits held at once at %d µs, want <= Max %d", most, at, lim.Max)
	}
	if most < lim.Max {
		t.Errorf("at most %d held at once under contention, want exactly Max %d (the test did not saturate)", most, lim.Max)
	}
	if maxHeld > lim.Max {
		t.Errorf("a reply reported Held %d > Max %d", maxHeld, lim.Max)
	}
	if denials == 0 {
		t.Error("no denials: the key was never contended")
	}
	if n := srv.MustDo("ZCARD", "sluice:{"+key+"}c"); n != "0" {
		t.Errorf("ZCARD after every release = %s, want 0", n)
	}
}

// TestSemaphoreCrash kills a child holding every permit of a key and checks
// on Redis's clock that they free when their leases end, not before, and
// not later.
func TestSemaphoreCrash(t *testing.T) {
	if os.Getenv(envSemChild) != "" {
		t.Skip("in a helper process")
	}
	srv := redistest.Server(t)
	dir := t.TempDir()
	lim := sluice.ConcurrencyLimit{Max: 3, TTL: 500 * time.Millisecond}
	key := fmt.Sprintf("semcrash%d", rand.Uint32())
	name := "sluice:{" + key + "}c"
	cfg := semConfig{Mode: "crash", Addr: srv.Addr, Client: "rueidis", Key: key, Limit: lim, Out: filepath.Join(dir, "crash.json")}
	cmd, log := startSemChild(t, cfg)
	deadline := time.Now().Add(30 * time.Second)
	var res semResult
	for {
		raw, err := os.ReadFile(cfg.Out)
		if err == nil {
			if err := json.Unmarshal(raw, &res); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			logText, _ := os.ReadFile(log)
			t.Fatalf("child did not acquire: %s", logText)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	cmd.Wait()
	// The holders' scores are their leases' ends.
	for i, h := range res.Holders {
		if got := srv.MustDo("ZSCORE", name, h); got != strconv.FormatInt(res.Expires[i], 10) {
			t.Fatalf("ZSCORE %s = %s after the crash, want %d", h, got, res.Expires[i])
		}
	}

	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	s := redisstore.NewRueidis(rc)
	ctx := context.Background()
	// The parent tries to take the slots: the k-th succeeds at the first
	// try on or after the k-th child lease's end; every try before it is
	// denied with RetryAfter the time left to that end.
	var denials int
	var got []int64 // the Redis time of each success
	for k := 0; k < lim.Max; {
		h := fmt.Sprintf("parent-%d", k)
		d, err := s.Acquire(ctx, key, lim, h)
		if err != nil {
			t.Fatal(err)
		}
		if d.Acquired {
			now := d.Expires.UnixMicro() - lim.TTL.Microseconds()
			if now < res.Expires[k] {
				t.Errorf("slot %d acquired at %d µs, before the dead holder's lease ended at %d", k, now, res.Expires[k])
			}
			if d.Held != lim.Max {
				t.Errorf("slot %d: Held %d, want %d (the other dead holders, then the parent's)", k, d.Held, lim.Max)
			}
			got = append(got, now)
			k++
			continue
		}
		denials++
		// On a denial now = the earliest lease's end - RetryAfter.
		now := res.Expires[k] - d.RetryAfter.Microseconds()
		if d.RetryAfter <= 0 || now >= res.Expires[k] {
			t.Fatalf("denied at %d µs with RetryAfter %v, at or after the lease's end %d", now, d.RetryAfter, res.Expires[k])
		}
		if d.Held != lim.Max {
			t.Errorf("denied with Held %d, want %d", d.Held, lim.Max)
		}
		if time.Since(killed) > lim.TTL+5*time.Second {
			t.Fatalf("slot %d still taken %v after the crash", k, time.Since(killed))
		}
		// Come back close to the lease's end, to see it free at it.
		time.Sleep(min(d.RetryAfter, 2*time.Millisecond))
	}
	for k, at := range got {
		// Polled at most every 2 ms: a slot seen free soon after its lease ended.
		late := time.Duration(at-res.Expires[k]) * time.Microsecond
		t.Logf("dead holder %d: lease ended at %d µs, slot taken by the parent %v later", k, res.Expires[k], late)
		if late > 100*time.Millisecond {
			t.Errorf("slot %d freed %v after its lease ended, want at once", k, late)
		}
	}
	if denials == 0 {
		t.Error("no denial before the first lease ended: the child's permits were not seen held")
	}
	t.Logf("killed %d holders; %d denials before their leases ended, each freed at its lease's end", len(res.Holders), denials)
}
