package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

// maxScriptTime is the longest a script may run in Redis: it blocks every
// other client while it runs.
const maxScriptTime = time.Millisecond

// slowScripts returns the longest script run (EVALSHA or EVAL) the slow
// log holds, and empties the log.
func slowScripts(t testing.TB, c rueidis.Client) time.Duration {
	t.Helper()
	ctx := context.Background()
	v, err := c.Do(ctx, c.B().Arbitrary("SLOWLOG", "GET", "100000").Build()).ToArray()
	if err != nil {
		t.Fatalf("SLOWLOG GET: %v", err)
	}
	var longest int64
	for _, e := range v {
		f, err := e.ToArray()
		if err != nil || len(f) < 4 {
			t.Fatalf("SLOWLOG entry %v: %v", e, err)
		}
		us, _ := f[2].AsInt64()
		args, _ := f[3].ToArray()
		if len(args) == 0 {
			continue
		}
		name, _ := args[0].ToString()
		switch name {
		case "EVALSHA", "evalsha", "EVAL", "eval":
			longest = max(longest, us)
		}
	}
	if err := c.Do(ctx, c.B().Arbitrary("SLOWLOG", "RESET").Build()).Error(); err != nil {
		t.Fatalf("SLOWLOG RESET: %v", err)
	}
	return time.Duration(longest) * time.Microsecond
}

// redisCPU returns the CPU time Redis's main thread (the one that runs
// scripts) has used (Linux's /proc/PID/task/PID/schedstat, in ns), and
// false where it cannot be read.
func redisCPU(srv *redistest.Instance) (time.Duration, bool) {
	pid := strconv.Itoa(srv.Pid())
	b, err := os.ReadFile("/proc/" + pid + "/task/" + pid + "/schedstat")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(ns), err == nil
}

// logPeriod is the Period of the worst cases' logs; their entries lie 1µs
// apart from logStart.
const (
	logPeriod = time.Hour
	logStart  = int64(1_800_000_000_000_000)
)

// fillLog writes, in one bulk set-up, the log that admissions of units[i]
// at logStart+i µs leave (in the millisecond layout, one entry per unit),
// as the scripts write it, and checks it with a peek.
func fillLog(t testing.TB, c rueidis.Client, s *Store, key string, lim sluice.Limit, units []int) {
	t.Helper()
	ctx := context.Background()
	name := s.redisKey(key, lim)
	args := []string{"ZADD", name}
	flush := func(force bool) {
		if len(args) > 2 && (force || len(args) > 20_000) {
			if err := c.Do(ctx, c.B().Arbitrary(args...).Build()).Error(); err != nil {
				t.Fatalf("ZADD: %v", err)
			}
			args = args[:2]
		}
	}
	last := int64(0)
	for i, u := range units {
		at := logStart + int64(i)
		if s.msLayout {
			for j := range u {
				ms := at / 1000
				args = append(args, strconv.FormatInt(ms, 10), fmt.Sprintf("%d-%08x", ms, i<<8|j))
			}
		} else {
			args = append(args, strconv.FormatInt(at, 10), strconv.FormatInt(last+1, 10))
		}
		last += int64(u)
		flush(false)
	}
	if !s.msLayout {
		args = append(args, strconv.FormatInt(-last, 10), "#")
	}
	flush(true)
	if err := c.Do(ctx, c.B().Arbitrary("PEXPIRE", name, strconv.FormatInt(logPeriod.Milliseconds()+3_600_000, 10)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	d, err := s.AllowN(ctx, key, lim, 0)
	if want := max(lim.Rate-int(last), 0); err != nil || d.Remaining != want {
		t.Fatalf("a peek of the log just filled = %+v, %v; want Remaining %d", d, err, want)
	}
}

// ones is n entries of one unit; alternate is entries of 1 and 2 units, n
// units in all.
func ones(n int) []int { u := make([]int, n); return fill(u, 1) }

func fill(u []int, v int) []int {
	for i := range u {
		u[i] = v
	}
	return u
}

func alternate(n int) []int {
	var u []int
	for left := n; left > 0; {
		v := min(1+len(u)%2, left)
		u = append(u, v)
		left -= v
	}
	return u
}

// worstCase is one of the heaviest scripts that validation admits at a
// log's Rate: setup brings keys to their worst state at the test clock's
// time (outside the measurement), run makes the heavy call, its r-th time
// on those keys (a run moves the clock on or picks its target so that each
// finds the keys in a worst state again).
type worstCase struct {
	name     string
	msLayout bool
	setup    func(t testing.TB, w *worstRun)
	run      func(t testing.TB, w *worstRun, r int)
}

// worstRun is one run of a worst case: its store, clock, keys' prefix and
// the log's Rate.
type worstRun struct {
	srv   *redistest.Instance
	c     rueidis.Client
	s     *Store
	clock time.Time
	key   string
	rate  int
	// cpu is the most CPU time Redis's main thread used for one script
	// of the run (the run of a batch, one per batch; false where it cannot
	// be read.
	cpu   time.Duration
	cpuOK bool
}

// script runs f, which runs one script, and notes the CPU time Redis's
// main thread used meanwhile.
func (w *worstRun) script(f func()) {
	cpu0, ok0 := redisCPU(w.srv)
	f()
	cpu1, ok1 := redisCPU(w.srv)
	w.cpu, w.cpuOK = max(w.cpu, cpu1-cpu0), w.cpuOK && ok0 && ok1
}

func (w *worstRun) lim() sluice.Limit {
	return sluice.Limit{Algorithm: sluice.SlidingLog, Rate: w.rate, Period: logPeriod}
}

func (w *worstRun) k(i int) string { return fmt.Sprint(w.key, "/", i) }

// expire moves the clock past the Period of every entry written so far.
func (w *worstRun) expire() { w.clock = w.clock.Add(logPeriod + time.Second) }

func (w *worstRun) allow(t testing.TB, key string, lim sluice.Limit, n int, allowed bool) {
	t.Helper()
	var d sluice.Decision
	var err error
	w.script(func() { d, err = w.s.AllowN(context.Background(), key, lim, n) })
	if err != nil || d.Allowed != allowed {
		t.Fatalf("AllowN(%q, %v, %d) = %+v, %v; want allowed %v", key, lim, n, d, err, allowed)
	}
}

func (w *worstRun) ret(t testing.TB, key string, n int, at time.Time) {
	t.Helper()
	var err error
	w.script(func() { err = w.s.Return(context.Background(), key, w.lim(), n, at) })
	if err != nil {
		t.Fatal(err)
	}
}

func (w *worstRun) multi(t testing.TB, lim sluice.Limit, ns ...int) {
	t.Helper()
	reqs := make([]sluice.Request, len(ns))
	for i, n := range ns {
		reqs[i] = sluice.Request{Key: w.k(i), Limit: lim, N: n}
	}
	var ds []sluice.Decision
	var err error
	w.script(func() { ds, err = w.s.AllowMulti(context.Background(), reqs) })
	if err != nil || !ds[0].Allowed {
		t.Fatalf("AllowMulti: %+v, %v; want allowed", ds, err)
	}
}

// batch makes the batches that take forms from calls pending on keys
// w.k(0) ... and runs them.
func (w *worstRun) batch(t testing.TB, lim sluice.Limit, keys, n int) {
	t.Helper()
	b := &batcher{s: w.s} // as in production: a batch of one runs its flat script
	for i := range keys {
		c := w.s.newCall(w.k(i), lim, n)
		c.ctx = context.Background()
		b.pending = append(b.pending, c)
	}
	for len(b.pending) > 0 {
		batch := b.take()
		w.script(func() { b.exec(batch) })
		for _, c := range batch {
			if c.err != nil || c.res[0] != 1 {
				t.Fatalf("batched decision %+v, %v; want allowed", c.res, c.err)
			}
		}
	}
}

// logCases are the worst cases of one log: an admission onto a full log
// whose entries all expired (a bounded trim, and one member written
// whatever the cost), a denial that searches for the unit whose expiry
// admits it, a return that renumbers LogReturnDepth-1 members, a refund
// that empties LogReturnDepth of them; in the millisecond layout, where
// each unit is a member, an admission and a denial of MaxMillisecondUnits.
func logCases() []worstCase {
	full := func(units func(rate int) []int) func(t testing.TB, w *worstRun) {
		return func(t testing.TB, w *worstRun) {
			fillLog(t, w.c, w.s, w.k(0), w.lim(), units(w.rate))
			w.clock = time.UnixMicro(logStart + int64(w.rate))
		}
	}
	admit := func(n func(w *worstRun) int) func(t testing.TB, w *worstRun, r int) {
		return func(t testing.TB, w *worstRun, r int) {
			w.expire()
			w.allow(t, w.k(0), w.lim(), n(w), true)
		}
	}
	deny := func(n func(w *worstRun) int) func(t testing.TB, w *worstRun, r int) {
		return func(t testing.TB, w *worstRun, r int) { w.allow(t, w.k(0), w.lim(), n(w), false) }
	}
	one := func(*worstRun) int { return 1 }
	rate := func(w *worstRun) int { return w.rate }
	half := func(w *worstRun) int { return w.rate / 2 }
	most := func(*worstRun) int { return MaxMillisecondUnits }
	return []worstCase{
		{"cost 1 onto a full expired log", false, full(ones), admit(one)},
		{"cost Rate onto a full expired log", false, full(ones), admit(rate)},
		{"denial of cost Rate/2 on a full log of 1 and 2 units, searched", false, full(alternate), deny(half)},
		{"return of the oldest entry a return reaches", false, full(ones), func(t testing.TB, w *worstRun, r int) {
			w.ret(t, w.k(0), 1, time.UnixMicro(logStart+int64(w.rate-algo.LogReturnDepth-r)))
		}},
		{"refund of Rate units", false, full(ones), func(t testing.TB, w *worstRun, r int) {
			w.ret(t, w.k(0), w.rate, time.Time{})
		}},
		{"reset of a full log", false, full(ones), func(t testing.TB, w *worstRun, r int) {
			if r > 0 {
				fillLog(t, w.c, w.s, w.k(0), w.lim(), ones(w.rate))
			}
			var err error
			w.script(func() { err = w.s.Reset(context.Background(), w.k(0), w.lim()) })
			if err != nil {
				t.Fatal(err)
			}
		}},
		{"millisecond layout: cost MaxMillisecondUnits onto a full expired log", true, full(ones), admit(most)},
		{"millisecond layout: denial of cost MaxMillisecondUnits on a full log", true, full(ones), deny(most)},
	}
}

// manyCases are the worst cases of the scripts that decide many keys at
// once, on logs of Rate min(rate, 100000) (16 keys; 10,000 in the
// millisecond layout) and min(rate, 500) (128 keys).
func manyCases() []worstCase {
	fullKeys := func(keys, most int) func(t testing.TB, w *worstRun) {
		return func(t testing.TB, w *worstRun) {
			w.rate = min(w.rate, most)
			// One log written, the others copied by Redis (COPY): the
			// same state at a fraction of the set-up's time.
			fillLog(t, w.c, w.s, w.k(0), w.lim(), ones(w.rate))
			src := w.s.redisKey(w.k(0), w.lim())
			for i := 1; i < keys; i++ {
				if err := w.c.Do(context.Background(), w.c.B().Arbitrary("COPY", src, w.s.redisKey(w.k(i), w.lim()), "REPLACE").Build()).Error(); err != nil {
					t.Fatalf("COPY: %v", err)
				}
			}
		}
	}
	nothing := func(testing.TB, *worstRun) {}
	gcra := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1 << 30, Period: time.Second}
	each := func(n int) []int { return fill(make([]int, sluice.MaxMultiRequests), n) }
	msUnits := each(1)
	msUnits[0] = MaxMillisecondUnits - (sluice.MaxMultiRequests - 1)
	return []worstCase{
		{"AllowMulti: 16 full expired logs, cost Rate each", false, fullKeys(16, 100_000), func(t testing.TB, w *worstRun, _ int) {
			w.expire()
			w.multi(t, w.lim(), each(w.rate)...)
		}},
		{"AllowMulti, millisecond layout: 16 full expired logs, MaxMillisecondUnits units in all", true, fullKeys(16, 10_000), func(t testing.TB, w *worstRun, _ int) {
			w.expire()
			w.multi(t, w.lim(), msUnits...)
		}},
		{"AllowMulti: 16 gcra keys", false, nothing, func(t testing.TB, w *worstRun, _ int) {
			w.multi(t, gcra, each(1)...)
		}},
		{"batch: 256 gcra calls", false, nothing, func(t testing.TB, w *worstRun, _ int) {
			w.batch(t, gcra, 256, 1)
		}},
		{"batch: 128 sliding-log calls of cost Rate on full expired logs", false, fullKeys(128, 500), func(t testing.TB, w *worstRun, _ int) {
			w.expire()
			w.batch(t, w.lim(), 128, w.rate)
		}},
		{"batch, millisecond layout: 8 calls of cost MaxMillisecondUnits on full expired logs", true, fullKeys(8, 500), func(t testing.TB, w *worstRun, _ int) {
			w.expire()
			w.batch(t, w.lim(), 8, MaxMillisecondUnits)
		}},
		{"semaphore: acquire on a key whose MaxPermits holders expired together", false, nothing, func(t testing.TB, w *worstRun, r int) {
			key := w.k(r)
			expiredHolders(t, w.c, w.s.semKey(key), sluice.MaxPermits, w.clock)
			lim := sluice.ConcurrencyLimit{Max: sluice.MaxPermits, TTL: time.Second}
			var d sluice.PermitDecision
			var err error
			w.script(func() { d, err = w.s.Acquire(context.Background(), key, lim, "h") })
			if err != nil || !d.Acquired || d.Held != 1 {
				t.Fatalf("Acquire = %+v, %v; want acquired, held 1 (the expired hold nothing)", d, err)
			}
		}},
	}
}

// expiredHolders writes n holders of the semaphore key name, of ids of
// sluice.MaxHolderLen bytes, whose leases all ended 1ms before now, in one
// bulk set-up, as the script writes them.
func expiredHolders(t testing.TB, c rueidis.Client, name string, n int, now time.Time) {
	t.Helper()
	args := []string{"ZADD", name}
	end := strconv.FormatInt(now.Add(-time.Millisecond).UnixMicro(), 10)
	for i := range n {
		args = append(args, end, fmt.Sprintf("holder-%0*d", sluice.MaxHolderLen-len("holder-"), i))
	}
	if err := c.Do(context.Background(), c.B().Arbitrary(args...).Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// worstRuns is how many times a measurement runs a worst case.
const worstRuns = 5

// runWorst measures c at rate: a first run on other keys loads the
// scripts (a first call compiles a script, a cost of its size, not of its
// input); then, on fresh keys, worstRuns runs each under SLOWLOG. It
// returns a bound on the longest script of each run: the longest that
// SLOWLOG holds, or the CPU time Redis's main thread used while a script
// ran (worstRun.script) when that is less. Both are at least the script's
// own time: SLOWLOG measures wall time, which a machine busy with other
// work stretches (an involuntary wait counts), and the CPU time also
// counts the reading and writing of the call. So the fastest run is the
// closest to a script's own time, which a busy machine does not stretch.
func runWorst(t testing.TB, srv *redistest.Instance, c rueidis.Client, wc worstCase, rate int, prefix string) []time.Duration {
	w := &worstRun{srv: srv, c: c, rate: rate}
	opts := []Option{WithBatching(false), WithTestClock(func() time.Time { return w.clock }), WithPrefix(prefix)}
	if wc.msLayout {
		opts = append(opts, WithMillisecondLayout())
	}
	w.s = NewRueidis(c, opts...)
	var took []time.Duration
	for round := range 2 {
		w.clock, w.key, w.rate = time.UnixMicro(logStart), fmt.Sprint(prefix, round), rate
		wc.setup(t, w)
		if round == 0 {
			wc.run(t, w, 0)
			continue
		}
		for r := range worstRuns {
			slowScripts(t, c)
			w.cpu, w.cpuOK = 0, true
			wc.run(t, w, r)
			d := slowScripts(t, c)
			if w.cpuOK {
				d = min(d, w.cpu)
			}
			took = append(took, d)
		}
	}
	return took
}

// TestScriptTime runs the worst cases of every script at the largest
// limits validation admits (sliding logs of 500 and of 100,000: a log's
// work grows by a logarithm with its length) against a real redis-server,
// and asserts that none ran longer than 1 ms of Redis time (SLOWLOG, every
// command logged, and the CPU time of Redis's main thread: runWorst), the
// fastest of worstRuns runs of each. The figures are logged (go test -v).
func TestScriptTime(t *testing.T) {
	srv := redistest.Server(t)
	srv.MustDo("CONFIG", "SET", "slowlog-log-slower-than", "0")
	srv.MustDo("CONFIG", "SET", "slowlog-max-len", "100000")
	c := newRueidis(t, srv.Addr)
	for _, rate := range []int{500, 100_000} {
		for i, wc := range append(logCases(), manyCases()...) {
			if rate > 500 && (strings.Contains(wc.name, "gcra") || strings.HasPrefix(wc.name, "semaphore")) {
				continue // no log: once is enough
			}
			t.Run(fmt.Sprintf("rate %d/%s", rate, wc.name), func(t *testing.T) {
				took := runWorst(t, srv, c, wc, rate, fmt.Sprintf("w%d.%d:", rate, i))
				srv.MustDo("FLUSHALL", "ASYNC")
				t.Logf("longest script of each run: %v", took)
				if fastest := slices.Min(took); fastest > maxScriptTime {
					// A machine whose cores are shared with other work runs
					// every script slower, caches contended: beyond 1 ms,
					// the bound is the calibration script's time measured
					// now (the same kind of work, about twice the
					// heaviest decision's), which a script made twice as
					// heavy exceeds on any machine.
					cal, err := srv.Calibrate(fmt.Sprintf("calibration%d.%d", rate, i))
					if err != nil {
						t.Fatal(err)
					}
					if fastest > cal {
						t.Errorf("the fastest of %d runs took %v, want <= %v (or the calibration, %v)", len(took), fastest, maxScriptTime, cal)
					}
				}
			})
		}
	}
}

// TestScriptTimeFigures measures what docs/bounds.md states per Rate: the
// memory of a full log of entries of one unit (MEMORY USAGE) and the
// fastest and slowest Redis time of each worst case of a log over
// worstRuns runs. It runs with SLUICE_SCRIPT_FIGURES=1:
//
//	SLUICE_SCRIPT_FIGURES=1 go test -run TestScriptTimeFigures -v ./redisstore
func TestScriptTimeFigures(t *testing.T) {
	if os.Getenv("SLUICE_SCRIPT_FIGURES") == "" {
		t.Skip("set SLUICE_SCRIPT_FIGURES=1 to measure the figures of docs/bounds.md")
	}
	srv := redistest.Server(t)
	srv.MustDo("CONFIG", "SET", "slowlog-log-slower-than", "0")
	srv.MustDo("CONFIG", "SET", "slowlog-max-len", "100000")
	c := newRueidis(t, srv.Addr)
	var rows []string
	for _, rate := range []int{1000, 10_000, 100_000} {
		for _, ms := range []bool{false, true} {
			now := func() time.Time { return time.UnixMicro(logStart + int64(rate)) }
			s := NewRueidis(c, WithTestClock(now))
			if ms {
				s = NewRueidis(c, WithMillisecondLayout(), WithTestClock(now))
			}
			lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: rate, Period: logPeriod}
			fillLog(t, c, s, "mem", lim, ones(rate))
			n, _ := strconv.Atoi(srv.MustDo("MEMORY", "USAGE", s.redisKey("mem", lim), "SAMPLES", "0"))
			rows = append(rows, fmt.Sprintf("rate %d, millisecond layout %v: a full log of %d entries: %d bytes (%d per entry)", rate, ms, rate, n, n/rate))
			srv.MustDo("FLUSHALL", "ASYNC")
		}
		for i, wc := range logCases() {
			took := runWorst(t, srv, c, wc, rate, fmt.Sprintf("f%d.%d:", rate, i))
			srv.MustDo("FLUSHALL", "ASYNC")
			rows = append(rows, fmt.Sprintf("rate %d: %s: fastest %v, slowest %v", rate, wc.name, slices.Min(took), slices.Max(took)))
		}
	}
	t.Logf("figures:\n%s", strings.Join(rows, "\n"))
}

// TestTakeBoundsWork: a batch holds at most maxBatch calls and maxBatchWork
// work, and a call heavier than the budget goes alone: a sliding-log
// decision weighs the same whatever its cost, but in the millisecond
// layout, where each unit is an entry.
func TestTakeBoundsWork(t *testing.T) {
	s := &Store{prefix: DefaultPrefix}
	logLim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 100_000, Period: time.Hour}
	b := &batcher{s: s}
	for i := range 300 {
		b.pending = append(b.pending, s.newCall(strconv.Itoa(i), sluice.PerSecond(10), 1))
	}
	if got := len(b.take()); got != maxBatch {
		t.Errorf("take() of 300 gcra calls took %d, want %d", got, maxBatch)
	}
	for _, n := range []int{1, 100_000} {
		b.pending = b.pending[:0]
		for i := range 100 {
			b.pending = append(b.pending, s.newCall(strconv.Itoa(i), logLim, n))
		}
		if got, want := len(b.take()), maxBatchWork/callWork(int(sluice.SlidingLog), n); got != want {
			t.Errorf("take() of sliding-log calls of cost %d took %d, want %d", n, got, want)
		}
	}
	ms := &Store{prefix: DefaultPrefix, msLayout: true}
	b = &batcher{s: ms}
	for i := range 3 {
		b.pending = append(b.pending, ms.newCall(strconv.Itoa(i), logLim, MaxMillisecondUnits))
	}
	if got := len(b.take()); got != 1 {
		t.Errorf("take() of millisecond-layout calls of cost %d took %d, want 1", MaxMillisecondUnits, got)
	}
}

// TestLogLength: however admissions (single or in AllowMulti), returns and
// refunds come, a sliding log's ZSET holds at most Rate + 25 members
// besides '#' (the millisecond layout: Rate + 2 entries), though a trim
// removes a bounded number of expired members.
func TestLogLength(t *testing.T) {
	srv := redistest.Server(t)
	c := newRueidis(t, srv.Addr)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 3))
	for run := range 40 {
		clock := time.UnixMicro(1_800_000_000_000_000)
		opts := []Option{WithBatching(false), WithTestClock(func() time.Time { return clock })}
		seq, slack := 1, 25 // the '#' member; the expired members a log may hold
		if run%2 == 1 {
			opts, seq, slack = append(opts, WithMillisecondLayout()), 0, 24
		}
		s := NewRueidis(c, opts...)
		lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 1 + rng.IntN(200), Period: 100 * time.Millisecond}
		key := fmt.Sprint("len", run)
		var leases []time.Time
		for range 400 {
			clock = clock.Add(time.Duration(rng.Int64N(int64(lim.Period) / 10)))
			if rng.IntN(20) == 0 {
				clock = clock.Add(lim.Period)
			}
			n := 1
			if rng.IntN(4) == 0 {
				n = 1 + rng.IntN(min(lim.Rate, MaxMillisecondUnits))
			}
			var err error
			switch rng.IntN(6) {
			case 0:
				_, err = s.AllowMulti(ctx, []sluice.Request{{Key: key, Limit: lim, N: n}})
			case 1:
				if len(leases) > 0 {
					err = s.Return(ctx, key, lim, n, leases[rng.IntN(len(leases))])
				}
			case 2:
				err = s.Return(ctx, key, lim, n, time.Time{})
			default:
				var d sluice.Decision
				var at time.Time
				if d, at, err = s.Reserve(ctx, key, lim, n); err == nil && d.Allowed {
					leases = append(leases[max(len(leases)-50, 0):], at)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := strconv.Atoi(srv.MustDo("ZCARD", s.redisKey(key, lim)))
			if err != nil {
				t.Fatal(err)
			}
			if got-seq > lim.Rate+slack {
				t.Fatalf("run %d (%v): the log holds %d members, want <= Rate + %d = %d", run, lim, got-seq, slack, lim.Rate+slack)
			}
		}
	}
}

// TestMultiBounds: AllowMulti takes at most MaxMultiRequests requests, of
// any cost in sluice's layout, and in the millisecond layout at most
// MaxMillisecondUnits sliding-log units in all, as AllowN does; one past
// either is an error wrapping ErrExceedsCapacity, before anything is sent.
func TestMultiBounds(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	c := newRueidis(t, srv.Addr)
	lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 100_000, Period: time.Minute}
	reqs := func(n int, cost func(i int) int) []sluice.Request {
		r := make([]sluice.Request, n)
		for i := range r {
			r[i] = sluice.Request{Key: fmt.Sprint("mb", n, cost(0), "/", i), Limit: lim, N: cost(i)}
		}
		return r
	}
	one := func(int) int { return 1 }
	units := func(total int) func(int) int {
		return func(i int) int {
			if i == 0 {
				return total - 1
			}
			return 1
		}
	}
	s := NewRueidis(c)
	if _, err := s.AllowMulti(ctx, reqs(sluice.MaxMultiRequests, one)); err != nil {
		t.Errorf("AllowMulti of %d requests: %v, want nil", sluice.MaxMultiRequests, err)
	}
	if _, err := s.AllowMulti(ctx, reqs(sluice.MaxMultiRequests+1, one)); !errors.Is(err, sluice.ErrExceedsCapacity) {
		t.Errorf("AllowMulti of %d requests: %v, want ErrExceedsCapacity", sluice.MaxMultiRequests+1, err)
	}
	if _, err := s.AllowMulti(ctx, reqs(2, units(100_000))); err != nil {
		t.Errorf("AllowMulti of 100,000 sliding-log units: %v, want nil", err)
	}
	ms := NewRueidis(c, WithMillisecondLayout())
	if _, err := ms.AllowMulti(ctx, reqs(2, units(MaxMillisecondUnits))); err != nil {
		t.Errorf("AllowMulti of %d sliding-log units in the millisecond layout: %v, want nil", MaxMillisecondUnits, err)
	}
	if _, err := ms.AllowMulti(ctx, reqs(2, units(MaxMillisecondUnits+1))); !errors.Is(err, sluice.ErrExceedsCapacity) {
		t.Errorf("AllowMulti of %d sliding-log units in the millisecond layout: %v, want ErrExceedsCapacity", MaxMillisecondUnits+1, err)
	}
	var le *sluice.LimitError
	if _, err := ms.AllowN(ctx, "mb-n", lim, MaxMillisecondUnits+1); !errors.Is(err, sluice.ErrExceedsCapacity) || !errors.As(err, &le) || le.Field != "N" {
		t.Errorf("AllowN of %d units in the millisecond layout: %v, want ErrExceedsCapacity on N", MaxMillisecondUnits+1, err)
	}
}
