package redisstore_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/reexec"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// The multi-process exactness test: several OS processes (this test binary
// re-executed) share one Redis and hammer the same keys; every process
// records the Redis time of each decision as the script used it (Reserve
// reports it) and streams them to the parent, which checks the merged
// stamps against each algorithm's invariant and replays them, in Redis
// time order, through the algorithm itself (memstore on a clock set to
// each stamp): every admission and every denial must be the one the
// algorithm makes at that instant. The replay holds the store to its
// answers in both directions, so the test needs no bound on how many
// admissions a busy machine manages. The cost cases (mpCostCases) do the
// same with the cost of each decision: sliding logs of 100,000 asked 1 to
// mpMaxCost units at a time, held to the log's invariant in units and
// replayed with each decision's cost.
//
// Nothing is timed: the children start together once all are ready, and
// the parent stops them once every child has been admitted and denied on
// every key (only denied on a log that fills once: see mpCostCases) and
// the boundary pattern has straddled a window boundary (or after
// mpMaxRounds boundary rounds, when the assertions say what was not
// reached). Longer runs, with at least this much wall time:
//
//	SLUICE_MULTIPROC_PROCS=8 SLUICE_MULTIPROC_GOROUTINES=16 SLUICE_MULTIPROC_DURATION=30s \
//	  go test -run TestMultiProcessExactness -v ./redisstore
const (
	envProcs = "SLUICE_MULTIPROC_PROCS"
	envGor   = "SLUICE_MULTIPROC_GOROUTINES"
	envDur   = "SLUICE_MULTIPROC_DURATION"
)

// mpPeriod is short so that a short run spans many periods.
const mpPeriod = 200 * time.Millisecond

// The run's goals: each child admitted mpMinAdmitted times on every key
// and denied on every hammered key, mpMinDenied denials per hammered key
// in all, and every child's boundary goroutines through mpMinRounds
// rounds. mpMaxRounds bounds a run that does not reach them.
const (
	mpMinAdmitted = 5
	mpMinDenied   = 20
	mpMinRounds   = 2
	mpMaxRounds   = 40
)

// mpCase is one key hammered by every process with one pattern.
type mpCase struct {
	Name    string
	Limit   sluice.Limit
	Pattern string // "hammer", "boundary" or "costs" (hammer, 1 to mpMaxCost units a call)
	// MinAdmitted is how many admissions on this key every child must
	// have seen before the run may stop.
	MinAdmitted int
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
			cs = append(cs, mpCase{Name: l.Algorithm.String() + "/" + p, Limit: l, Pattern: p, MinAdmitted: mpMinAdmitted})
		}
	}
	return cs
}

// mpMaxCost is the largest cost the cost cases ask.
const mpMaxCost = 2000

// mpCostCases are sliding logs of 100,000 (a log of up to 100,000 units),
// hammered with costs of 1 to mpMaxCost units, so that a short run fills
// them: one of an hour (its window never slides during a run: it fills
// once, and every later decision is on a full log) and one of 200ms (it
// fills and slides many times). A child that a busy machine starts late
// may find the log of an hour full already: it must be denied there, and
// need not be admitted.
func mpCostCases() []mpCase {
	return []mpCase{
		{Name: "sliding_log/100000 per hour/costs", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 100_000, Period: time.Hour}, Pattern: "costs"},
		{Name: "sliding_log/100000 per 200ms/costs", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 100_000, Period: mpPeriod}, Pattern: "costs", MinAdmitted: mpMinAdmitted},
	}
}

// mpAllCases is every key a child hammers.
func mpAllCases() []mpCase { return slices.Concat(mpCases(), mpCostCases()) }

// mpUnits is a decision of several units: its Redis time (µs) and cost.
type mpUnits struct{ At, N int64 }

// mpConfig is what the parent tells a child.
type mpConfig struct {
	Addr       string
	Client     string // "rueidis" or "go-redis"
	Prefix     string // of every key, unique per run
	Goroutines int
}

// mpReport is what a child streams: the Redis-time stamps (µs) of its
// admissions and denials per case since its last report (with their
// costs, for mpCostCases), the boundary rounds every one of its
// goroutines has finished, and its errors.
type mpReport struct {
	Admitted      map[string][]int64
	Denied        map[string][]int64
	AdmittedUnits map[string][]mpUnits // of mpCostCases
	DeniedUnits   map[string][]mpUnits // of mpCostCases
	Rounds        int                  // the fewest any of its boundary goroutines finished
	Errors        int
	FirstErr      string
}

// childStore is a child's store on the client its configuration names.
func childStore(t *testing.T, addr, client string) *redisstore.Store {
	t.Helper()
	var store *redisstore.Store
	switch client {
	case "rueidis":
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		store = redisstore.NewRueidis(c)
	case "go-redis":
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
		t.Cleanup(func() { c.Close() })
		store = redisstore.NewGoRedis(c)
	default:
		t.Fatalf("unknown client %q", client)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// mpCollector gathers a child's observations between reports.
type mpCollector struct {
	mu       sync.Mutex
	r        mpReport
	rounds   map[int]int // boundary goroutine -> rounds finished
	boundary int         // boundary goroutines
}

// add records a decision of u.N units at u.At on mc's key.
func (c *mpCollector) add(mc mpCase, admitted bool, u mpUnits) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case mc.Pattern == "costs" && admitted:
		c.r.AdmittedUnits[mc.Name] = append(c.r.AdmittedUnits[mc.Name], u)
	case mc.Pattern == "costs":
		c.r.DeniedUnits[mc.Name] = append(c.r.DeniedUnits[mc.Name], u)
	case admitted:
		c.r.Admitted[mc.Name] = append(c.r.Admitted[mc.Name], u.At)
	default:
		c.r.Denied[mc.Name] = append(c.r.Denied[mc.Name], u.At)
	}
}

func (c *mpCollector) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.r.Errors++
	if c.r.FirstErr == "" {
		c.r.FirstErr = err.Error()
	}
}

func (c *mpCollector) round(g int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rounds[g]++
}

// take returns the report so far and starts a new one.
func (c *mpCollector) take() mpReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.r
	r.Rounds = mpMaxRounds
	for g := range c.boundary {
		r.Rounds = min(r.Rounds, c.rounds[g])
	}
	c.r = mpReport{
		Admitted: map[string][]int64{}, Denied: map[string][]int64{},
		AdmittedUnits: map[string][]mpUnits{}, DeniedUnits: map[string][]mpUnits{},
	}
	return r
}

// TestMultiProcessHelper is a child's body; it skips unless started by
// TestMultiProcessExactness.
func TestMultiProcessHelper(t *testing.T) {
	var cfg mpConfig
	child := reexec.Helper(t, &cfg)
	store := childStore(t, cfg.Addr, cfg.Client)
	col := &mpCollector{rounds: map[int]int{}}
	col.take()
	ctx := context.Background()

	var work []func() // started together once the parent says go
	boundaryID := 0
	for _, c := range mpAllCases() {
		key := cfg.Prefix + c.Name
		// lease decides n units and records the decision; a failed one
		// is a zero Decision.
		lease := func(n int) sluice.Decision {
			d, at, err := store.Reserve(ctx, key, c.Limit, n)
			if err != nil {
				col.fail(err)
				return sluice.Decision{}
			}
			if !d.Allowed && d.RetryAfter <= 0 {
				col.fail(fmt.Errorf("%s: %d units denied with RetryAfter %v", c.Name, n, d.RetryAfter))
			}
			col.add(c, d.Allowed, mpUnits{At: at.UnixMicro(), N: int64(n)})
			return d
		}
		for range cfg.Goroutines {
			switch c.Pattern {
			case "hammer", "costs":
				work = append(work, func() {
					n := 1
					for !child.Stopped() {
						d := lease(n)
						if !d.Allowed {
							mpPause(d)
						}
						if c.Pattern == "costs" {
							n = mpNextCost(d)
						}
					}
				})
			case "boundary":
				g := boundaryID
				boundaryID++
				work = append(work, func() {
					// A burst just before an epoch-aligned window
					// boundary and one just after it, at every second
					// boundary (multiples of 2P, the same in every
					// goroutine and process), so that the window
					// before each pair is fresh: a fixed window admits
					// 2*Rate within a few milliseconds there, a
					// sliding log Rate. A round that a busy machine
					// starts late misses its boundary; the run goes on
					// until one straddled.
					p := c.Limit.Period
					for round := 0; round < mpMaxRounds && !child.Stopped(); round++ {
						b := time.Now().Truncate(2 * p).Add(2 * p)
						for _, at := range []time.Time{
							b.Add(-5*time.Millisecond - rand.N(5*time.Millisecond)),
							b.Add(rand.N(2 * time.Millisecond)),
						} {
							time.Sleep(time.Until(at))
							for range 10 {
								lease(1)
							}
						}
						col.round(g)
					}
				})
			}
		}
	}
	col.boundary = boundaryID
	if !child.Ready() {
		return
	}
	var wg sync.WaitGroup
	for _, f := range work {
		wg.Go(f)
	}
	// Report every few milliseconds until the goroutines have stopped.
	child.SendUntil(&wg, 20*time.Millisecond, func() any { return col.take() })
	child.Send(col.take())
}

// mpNextCost is the cost a cost case asks after decision d: 1 to
// mpMaxCost at random, or, half the time when the log is near full,
// exactly what d said remains or one unit more: the edge, where a count
// that is one off admits or denies wrongly (on a log that fills once, only
// such requests find it).
func mpNextCost(d sluice.Decision) int {
	if d.Remaining < mpMaxCost && rand.IntN(2) == 0 {
		return min(max(d.Remaining+rand.IntN(2), 1), mpMaxCost)
	}
	return 1 + rand.IntN(mpMaxCost)
}

// mpPause waits after a denial: soon, but not later than the quota frees.
func mpPause(d sluice.Decision) {
	time.Sleep(rand.N(max(min(d.RetryAfter, 2*time.Millisecond), 0) + 1))
}

// mpRun is the merged observations of a run.
type mpRun struct {
	admitted, denied           map[string][]int64
	admittedUnits, deniedUnits map[string][]mpUnits // of mpCostCases
	perChild                   []map[string][2]int  // child -> case -> admitted, denied
	rounds                     []int
	errors                     []string
	straddle                   int // the most fixed_window/boundary admissions in any Period
}

// goal returns what the run has not reached yet, or "".
func (r *mpRun) goal() string {
	denied := map[string]int{}
	for p, counts := range r.perChild {
		for _, c := range mpAllCases() {
			n := counts[c.Name]
			if n[0] < c.MinAdmitted {
				return fmt.Sprintf("child %d admitted %d times on %s (want %d)", p, n[0], c.Name, c.MinAdmitted)
			}
			if c.Pattern != "boundary" && n[1] == 0 {
				return fmt.Sprintf("child %d never denied on %s", p, c.Name)
			}
			denied[c.Name] += n[1]
		}
		if r.rounds[p] < mpMinRounds {
			return fmt.Sprintf("child %d finished %d boundary rounds (want %d)", p, r.rounds[p], mpMinRounds)
		}
	}
	for _, c := range mpAllCases() {
		if c.Pattern != "boundary" && denied[c.Name] < mpMinDenied {
			return fmt.Sprintf("%d denials on %s (want %d)", denied[c.Name], c.Name, mpMinDenied)
		}
	}
	if rate := mpCases()[1].Limit.Rate; r.straddle <= rate {
		return fmt.Sprintf("the fixed window's boundary bursts admitted at most %d in any %v (want > Rate %d: a burst on each side of a boundary)", r.straddle, mpPeriod, rate)
	}
	return ""
}

func (r *mpRun) add(child int, rep mpReport) {
	for name, s := range rep.Admitted {
		r.admitted[name] = append(r.admitted[name], s...)
		n := r.perChild[child][name]
		n[0] += len(s)
		r.perChild[child][name] = n
	}
	for name, s := range rep.Denied {
		r.denied[name] = append(r.denied[name], s...)
		n := r.perChild[child][name]
		n[1] += len(s)
		r.perChild[child][name] = n
	}
	for name, u := range rep.AdmittedUnits {
		r.admittedUnits[name] = append(r.admittedUnits[name], u...)
		n := r.perChild[child][name]
		n[0] += len(u)
		r.perChild[child][name] = n
	}
	for name, u := range rep.DeniedUnits {
		r.deniedUnits[name] = append(r.deniedUnits[name], u...)
		n := r.perChild[child][name]
		n[1] += len(u)
		r.perChild[child][name] = n
	}
	if len(rep.Admitted["fixed_window/boundary"]) > 0 {
		s := r.admitted["fixed_window/boundary"]
		slices.Sort(s)
		r.straddle, _ = maxInWindow(s, mpPeriod.Microseconds())
	}
	r.rounds[child] = rep.Rounds
	if rep.Errors > 0 {
		r.errors = append(r.errors, fmt.Sprintf("child %d: %d failed decisions, first: %s", child, rep.Errors, rep.FirstErr))
	}
}

func TestMultiProcessExactness(t *testing.T) {
	procs := reexec.EnvInt(t, envProcs, 4)
	gor := reexec.EnvInt(t, envGor, 4)
	atLeast := reexec.EnvDuration(t, envDur, 0)
	srv := redistest.Server(t)
	prefix := fmt.Sprintf("mp%d:", rand.Uint32())
	clients := []string{"rueidis", "go-redis"}
	var cfgs []any
	for p := range procs {
		cfgs = append(cfgs, mpConfig{Addr: srv.Addr, Client: clients[p%2], Prefix: prefix, Goroutines: gor})
	}
	g := reexec.Start(t, "TestMultiProcessHelper", cfgs)
	run := &mpRun{
		admitted: map[string][]int64{}, denied: map[string][]int64{},
		admittedUnits: map[string][]mpUnits{}, deniedUnits: map[string][]mpUnits{},
		rounds: make([]int, procs),
	}
	for range procs {
		run.perChild = append(run.perChild, map[string][2]int{})
	}
	g.Go()
	began := time.Now()
	for m := range g.Messages() {
		var rep mpReport
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatalf("child %d: %v", m.Child, err)
		}
		run.add(m.Child, rep)
		if len(run.errors) > 0 || run.goal() == "" && time.Since(began) >= atLeast || slices.Min(run.rounds) >= mpMaxRounds {
			g.Stop()
		}
	}
	g.Wait()
	for _, e := range run.errors {
		t.Error(e)
	}
	t.Logf("%d processes × %d goroutines per key, %v", procs, gor, time.Since(began).Round(time.Millisecond))
	if miss := run.goal(); miss != "" {
		t.Errorf("after %d boundary rounds: %s", slices.Min(run.rounds), miss)
	}

	for _, c := range mpCases() {
		t.Run(c.Name, func(t *testing.T) {
			s := slices.Clone(run.admitted[c.Name])
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
				t.Logf("%d admissions, %d denials; at most %d in any %v (at %d)", len(s), len(run.denied[c.Name]), got, lim.Period, at)
				if got > lim.Rate {
					t.Errorf("%d admissions in (%d-%d, %d], want <= Rate %d", got, at, pUs, at, lim.Rate)
				}
			case sluice.FixedWindow, sluice.SlidingWindow:
				got, w := maxInAlignedWindow(s, pUs)
				t.Logf("%d admissions, %d denials; at most %d in an aligned window (%d)", len(s), len(run.denied[c.Name]), got, w)
				if got > lim.Rate {
					t.Errorf("%d admissions in window [%d, +%d), want <= Rate %d", got, w*pUs, pUs, lim.Rate)
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
				t.Logf("%d admissions, %d denials over %d µs", len(s), len(run.denied[c.Name]), s[len(s)-1]-s[0])
			}
			if msg := replay(lim, run.admitted[c.Name], run.denied[c.Name]); msg != "" {
				t.Error(msg)
			}
		})
	}
	for _, c := range mpCostCases() {
		t.Run(c.Name, func(t *testing.T) {
			u := slices.Clone(run.admittedUnits[c.Name])
			slices.SortFunc(u, func(a, b mpUnits) int { return cmp.Compare(a.At, b.At) })
			if len(u) == 0 {
				t.Fatal("no admissions")
			}
			lim := c.Limit
			pUs := lim.Period.Microseconds()
			var units int64
			for _, a := range u {
				units += a.N
			}
			got, at := maxUnitsInWindow(u, pUs)
			t.Logf("%d admissions of %d units, %d denials; at most %d units in any %v (at %d)",
				len(u), units, len(run.deniedUnits[c.Name]), got, lim.Period, at)
			if got > int64(lim.Rate) {
				t.Errorf("%d units admitted in (%d-%d, %d], want <= Rate %d", got, at, pUs, at, lim.Rate)
			}
			if msg := replayUnits(lim, run.admittedUnits[c.Name], run.deniedUnits[c.Name]); msg != "" {
				t.Error(msg)
			}
		})
	}
}

// replay runs the decisions of one unit each, in the order of their Redis
// time, through memstore (see replayUnits).
func replay(lim sluice.Limit, admitted, denied []int64) string {
	ones := func(s []int64) []mpUnits {
		u := make([]mpUnits, len(s))
		for i, at := range s {
			u[i] = mpUnits{At: at, N: 1}
		}
		return u
	}
	return replayUnits(lim, ones(admitted), ones(denied))
}

// replayUnits runs the decisions, in the order of their Redis time (an
// admission before a denial at the same microsecond: scripts run one at a
// time, and a denial changes nothing, so this order is one Redis may have
// run them in whenever the decisions are right: a denial that Redis ran
// before an admission of the same time is denied after it too, as more
// counts then, and admissions of the same time fit in any order), through
// memstore on a clock set to each stamp, each with its cost, and returns
// the first decision that differs from the algorithm's, or "".
func replayUnits(lim sluice.Limit, admitted, denied []mpUnits) string {
	type decision struct {
		mpUnits
		allowed bool
	}
	ds := make([]decision, 0, len(admitted)+len(denied))
	for _, u := range admitted {
		ds = append(ds, decision{u, true})
	}
	for _, u := range denied {
		ds = append(ds, decision{u, false})
	}
	slices.SortFunc(ds, func(a, b decision) int {
		switch {
		case a.At != b.At:
			return cmp.Compare(a.At, b.At)
		case a.allowed == b.allowed:
			return 0
		case a.allowed:
			return -1
		}
		return 1
	})
	var now time.Time
	ref := memstore.New(memstore.WithClock(func() time.Time { return now }))
	defer ref.Close()
	for i, d := range ds {
		now = time.UnixMicro(d.At)
		want, err := ref.AllowN(context.Background(), "k", lim, int(d.N))
		if err != nil {
			return fmt.Sprintf("replay: %v", err)
		}
		if want.Allowed != d.allowed {
			verb := map[bool]string{true: "admitted", false: "denied"}
			return fmt.Sprintf("decision %d of %d, of %d units at %d µs: Redis %s, the algorithm %s (replayed in Redis time order)",
				i+1, len(ds), d.N, d.At, verb[d.allowed], verb[want.Allowed])
		}
	}
	return ""
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
	units := []struct {
		give   []mpUnits
		p      int64
		want   int64
		wantAt int64
	}{
		{[]mpUnits{{1, 7}}, 10, 7, 1},
		{[]mpUnits{{0, 3}, {5, 4}, {10, 2}}, 10, 7, 5},  // (0, 10] excludes 0's 3 units
		{[]mpUnits{{5, 1}, {5, 2}, {14, 3}}, 10, 6, 14}, // equal stamps all count
		{[]mpUnits{{0, 9}, {10, 2}, {11, 3}, {19, 1}}, 10, 9, 0},
	}
	for _, tt := range units {
		got, at := maxUnitsInWindow(tt.give, tt.p)
		if got != tt.want || at != tt.wantAt {
			t.Errorf("maxUnitsInWindow(%v, %d) = %d at %d, want %d at %d", tt.give, tt.p, got, at, tt.want, tt.wantAt)
		}
	}
	if got, k := maxInAlignedWindow([]int64{0, 9, 10, 11, 12, 25}, 10); got != 3 || k != 1 {
		t.Errorf("maxInAlignedWindow = %d in window %d, want 3 in window 1", got, k)
	}
}

// TestReplay: the replay accepts the algorithm's own decisions and finds a
// wrong admission and a wrong denial.
func TestReplay(t *testing.T) {
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Second}
	const w = 1_800_000_000_000_000 // a window's start
	tests := []struct {
		name             string
		admitted, denied []int64
		wantOK           bool
	}{
		{"right", []int64{w, w + 1}, []int64{w + 2, w + 2}, true},
		{"a denial at the same µs as an admission", []int64{w, w + 1}, []int64{w + 1}, true},
		{"admitted over the limit", []int64{w, w + 1, w + 2}, nil, false},
		{"denied under the limit", []int64{w}, []int64{w + 1}, false},
		{"a new window", []int64{w, w + 1, w + 1_000_000}, []int64{w + 999_999}, true},
	}
	for _, tt := range tests {
		msg := replay(lim, tt.admitted, tt.denied)
		if (msg == "") != tt.wantOK {
			t.Errorf("%s: replay = %q, want ok %v", tt.name, msg, tt.wantOK)
		}
	}
}

// TestReplayCosts: the replay of decisions with costs on a sliding log
// accepts the algorithm's own and finds a wrong admission and a wrong
// denial.
func TestReplayCosts(t *testing.T) {
	lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: time.Second}
	const w = 1_800_000_000_000_000
	tests := []struct {
		name             string
		admitted, denied []mpUnits
		wantOK           bool
	}{
		{"right", []mpUnits{{w, 4}, {w + 1, 6}}, []mpUnits{{w + 2, 1}}, true},
		{"a denial at the same µs as an admission", []mpUnits{{w, 4}, {w + 1, 5}}, []mpUnits{{w + 1, 2}}, true},
		{"admitted over the limit by a unit", []mpUnits{{w, 6}, {w + 1, 5}}, nil, false},
		{"denied under the limit", []mpUnits{{w, 6}}, []mpUnits{{w + 1, 4}}, false},
		{"the units leave the window", []mpUnits{{w, 10}, {w + 1_000_000, 3}}, []mpUnits{{w + 999_999, 1}}, true},
		{"only some units left the window", []mpUnits{{w, 4}, {w + 1, 6}, {w + 1_000_000, 5}}, nil, false},
	}
	for _, tt := range tests {
		msg := replayUnits(lim, tt.admitted, tt.denied)
		if (msg == "") != tt.wantOK {
			t.Errorf("%s: replayUnits = %q, want ok %v", tt.name, msg, tt.wantOK)
		}
	}
}
