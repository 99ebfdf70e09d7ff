package redisstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/reexec"
	"github.com/sluicehq/sluice/redisstore"
)

// The semaphore's multi-process tests: this test binary re-executed as
// children (internal/testserver/reexec) that share one Redis.
//
// The exactness test runs by counts: the children start together once all
// are ready and stream their holdings; the parent stops them once every
// child has held a permit semMinHeld times, the key has been denied
// semMinDenied times and Max permits were held at once (or after
// semMaxAttempts attempts, when the assertions say what was not reached).
// Longer runs, with at least this much wall time:
//
//	SLUICE_MULTIPROC_PROCS=8 SLUICE_MULTIPROC_GOROUTINES=16 SLUICE_MULTIPROC_DURATION=30s \
//	  go test -run TestSemaphoreMultiProcessExactness -v ./redisstore
const (
	semMinHeld     = 5
	semMinDenied   = 20
	semMaxAttempts = 200_000
)

type semConfig struct {
	Mode       string // "exact" or "crash"
	Addr       string
	Client     string // "rueidis" or "go-redis"
	Key        string
	Limit      sluice.ConcurrencyLimit
	Goroutines int
}

// semInterval is one holding, [Acq, Rel) in Redis µs.
type semInterval struct{ Acq, Rel int64 }

// semResult is what a child reports: in exact mode, what it saw since its
// last report; in crash mode, the permits it holds when it is killed.
type semResult struct {
	Intervals []semInterval
	MaxHeld   int // the largest Held a reply reported
	Attempts  int
	Denials   int
	Errors    int
	FirstErr  string
	Holders   []string
	Expires   []int64
}

// add merges o into r.
func (r *semResult) add(o semResult) {
	r.Intervals = append(r.Intervals, o.Intervals...)
	r.MaxHeld = max(r.MaxHeld, o.MaxHeld)
	r.Attempts += o.Attempts
	r.Denials += o.Denials
	r.Errors += o.Errors
	if r.FirstErr == "" {
		r.FirstErr = o.FirstErr
	}
}

// TestSemaphoreHelper is a child's body; it skips unless started by the
// tests below.
func TestSemaphoreHelper(t *testing.T) {
	var cfg semConfig
	child := reexec.Helper(t, &cfg)
	s := childStore(t, cfg.Addr, cfg.Client)
	ctx := context.Background()
	lease := cfg.Limit.TTL.Microseconds()
	if !child.Ready() {
		return
	}
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
		child.Send(res)
		<-child.Done() // held until killed
		return
	}

	var mu sync.Mutex
	var res semResult
	var wg sync.WaitGroup
	for range cfg.Goroutines {
		wg.Go(func() {
			fail := func(err error) {
				mu.Lock()
				defer mu.Unlock()
				res.Errors++
				if res.FirstErr == "" {
					res.FirstErr = err.Error()
				}
			}
			for !child.Stopped() {
				h := sluice.NewHolder()
				d, err := s.Acquire(ctx, cfg.Key, cfg.Limit, h)
				mu.Lock()
				res.Attempts++
				mu.Unlock()
				if err != nil {
					fail(err)
					continue
				}
				mu.Lock()
				res.MaxHeld = max(res.MaxHeld, d.Held)
				if !d.Acquired {
					res.Denials++
				}
				mu.Unlock()
				if !d.Acquired {
					if d.RetryAfter <= 0 {
						fail(fmt.Errorf("denied with RetryAfter %v", d.RetryAfter))
					}
					time.Sleep(rand.N(time.Millisecond))
					continue
				}
				acq := d.Expires.UnixMicro() - lease
				time.Sleep(rand.N(3 * time.Millisecond))
				iv := semInterval{acq, d.Expires.UnixMicro()}
				rel, err := s.ReleaseAt(ctx, cfg.Key, h)
				if err != nil {
					// Not known when it ended: count it held to its lease's end.
					fail(err)
				} else {
					iv.Rel = rel.UnixMicro()
				}
				mu.Lock()
				res.Intervals = append(res.Intervals, iv)
				mu.Unlock()
			}
		})
	}
	take := func() semResult {
		mu.Lock()
		defer mu.Unlock()
		r := res
		res = semResult{}
		return r
	}
	child.SendUntil(&wg, 20*time.Millisecond, func() any { return take() })
	child.Send(take())
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
	procs := reexec.EnvInt(t, envProcs, 4)
	gor := reexec.EnvInt(t, envGor, 4)
	atLeast := reexec.EnvDuration(t, envDur, 0)
	srv := redistest.Server(t)
	lim := sluice.ConcurrencyLimit{Max: 3, TTL: time.Minute}
	key := fmt.Sprintf("semmp%d", rand.Uint32())
	var cfgs []any
	for p := range procs {
		cfgs = append(cfgs, semConfig{Mode: "exact", Addr: srv.Addr, Client: []string{"rueidis", "go-redis"}[p%2], Key: key, Limit: lim, Goroutines: gor})
	}
	g := reexec.Start(t, "TestSemaphoreHelper", cfgs)
	per := make([]semResult, procs)
	var all semResult
	// goal returns what the run has not reached yet, or "".
	goal := func() string {
		for p, r := range per {
			if len(r.Intervals) < semMinHeld {
				return fmt.Sprintf("child %d held a permit %d times (want %d)", p, len(r.Intervals), semMinHeld)
			}
		}
		if all.Denials < semMinDenied {
			return fmt.Sprintf("%d denials (want %d): the key was not contended", all.Denials, semMinDenied)
		}
		if most, _ := maxConcurrent(all.Intervals); most < lim.Max {
			return fmt.Sprintf("at most %d held at once (want Max %d): the key was not saturated", most, lim.Max)
		}
		return ""
	}
	g.Go()
	began := time.Now()
	for m := range g.Messages() {
		var r semResult
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatalf("child %d: %v", m.Child, err)
		}
		per[m.Child].add(r)
		all.add(r)
		if all.Errors > 0 || goal() == "" && time.Since(began) >= atLeast || all.Attempts >= semMaxAttempts {
			g.Stop()
		}
	}
	g.Wait()
	for p, r := range per {
		if r.Errors > 0 {
			t.Errorf("child %d: %d failed calls, first: %s", p, r.Errors, r.FirstErr)
		}
		for _, iv := range r.Intervals {
			if iv.Rel < iv.Acq {
				t.Errorf("child %d: holding released at %d before it was acquired at %d", p, iv.Rel, iv.Acq)
			}
		}
	}
	most, at := maxConcurrent(all.Intervals)
	t.Logf("%d processes × %d goroutines, %d attempts in %v: %d holdings, %d denials; at most %d held at once (at %d µs); largest Held replied %d; Max %d",
		procs, gor, all.Attempts, time.Since(began).Round(time.Millisecond), len(all.Intervals), all.Denials, most, at, all.MaxHeld, lim.Max)
	if most > lim.Max {
		t.Errorf("%d permits held at once at %d µs, want <= Max %d", most, at, lim.Max)
	}
	if all.MaxHeld > lim.Max {
		t.Errorf("a reply reported Held %d > Max %d", all.MaxHeld, lim.Max)
	}
	if miss := goal(); miss != "" {
		t.Errorf("after %d attempts: %s", all.Attempts, miss)
	}
	if n := srv.MustDo("ZCARD", "sluice:{"+key+"}c"); n != "0" {
		t.Errorf("ZCARD after every release = %s, want 0", n)
	}
}

// TestSemaphoreCrash kills a child holding every permit of a key and checks
// on Redis's clock that they free when their leases end, not before, and
// not later.
func TestSemaphoreCrash(t *testing.T) {
	srv := redistest.Server(t)
	lim := sluice.ConcurrencyLimit{Max: 3, TTL: 500 * time.Millisecond}
	key := fmt.Sprintf("semcrash%d", rand.Uint32())
	name := "sluice:{" + key + "}c"
	g := reexec.Start(t, "TestSemaphoreHelper", []any{semConfig{Mode: "crash", Addr: srv.Addr, Client: "rueidis", Key: key, Limit: lim}})
	g.Go()
	m, ok := <-g.Messages()
	if !ok {
		g.Wait()
		t.Fatalf("the child sent nothing:\n%s", g.Log(0))
	}
	var res semResult
	if err := json.Unmarshal(m.Data, &res); err != nil {
		t.Fatal(err)
	}
	g.Kill(0)
	g.Wait()
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
			// Held: the dead holders whose leases have not ended yet
			// at now (a busy parent may come back after several
			// ended), the parent's earlier permits and this one.
			want := k + 1
			for _, e := range res.Expires {
				if e > now {
					want++
				}
			}
			if d.Held != want {
				t.Errorf("slot %d: Held %d, want %d (the dead holders whose leases had not ended at %d µs, then the parent's)", k, d.Held, want, now)
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
		// Come back close to the lease's end, to see it free at it.
		time.Sleep(min(d.RetryAfter, 2*time.Millisecond))
	}
	// Every try before a lease's end was denied and none after it (the
	// checks above): how soon after its end the parent came back is its
	// own scheduling, logged.
	for k, at := range got {
		late := time.Duration(at-res.Expires[k]) * time.Microsecond
		t.Logf("dead holder %d: lease ended at %d µs, slot taken by the parent %v later", k, res.Expires[k], late)
	}
	t.Logf("killed %d holders; %d denials before their leases ended, each freed at its lease's end", len(res.Holders), denials)
}
