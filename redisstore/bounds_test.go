package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

// maxScriptTime is the longest a script may run in Redis: it blocks every
// other client while it runs.
const maxScriptTime = time.Millisecond

// slowScripts returns the time of every script run (EVALSHA or EVAL) the
// slow log holds, oldest first, and empties the log.
func slowScripts(t *testing.T, c rueidis.Client) []time.Duration {
	t.Helper()
	ctx := context.Background()
	v, err := c.Do(ctx, c.B().Arbitrary("SLOWLOG", "GET", "100000").Build()).ToArray()
	if err != nil {
		t.Fatalf("SLOWLOG GET: %v", err)
	}
	var out []time.Duration
	for _, e := range slices.Backward(v) {
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
			out = append(out, time.Duration(us)*time.Microsecond)
		}
	}
	if err := c.Do(ctx, c.B().Arbitrary("SLOWLOG", "RESET").Build()).Error(); err != nil {
		t.Fatalf("SLOWLOG RESET: %v", err)
	}
	return out
}

// fastestRuns returns, for each script of a case (the i-th of each run),
// its fastest run, and the slowest of those: a script preempted in one run
// is not preempted in all. Runs with another number of scripts than the
// first count their longest script for every position.
func fastestRuns(runs [][]time.Duration) time.Duration {
	if len(runs) == 0 || len(runs[0]) == 0 {
		return 0
	}
	best := make([]time.Duration, len(runs[0]))
	for i := range best {
		best[i] = time.Hour
	}
	for _, r := range runs {
		for i := range best {
			d := slices.Max(r)
			if len(r) == len(best) {
				d = r[i]
			}
			best[i] = min(best[i], d)
		}
	}
	return slices.Max(best)
}

// worstCase is one of the heaviest scripts that validation admits: setup
// brings keys to their worst state (outside the measurement), run makes
// the heavy call.
type worstCase struct {
	name  string
	setup func(t *testing.T, s *Store, clock *time.Time, key string)
	run   func(t *testing.T, s *Store, clock *time.Time, key string)
}

func mustAllow(t *testing.T, s *Store, key string, lim sluice.Limit, n int) {
	t.Helper()
	if d, err := s.AllowN(context.Background(), key, lim, n); err != nil || !d.Allowed {
		t.Fatalf("AllowN(%q, %v, %d) = %+v, %v; want allowed", key, lim, n, d, err)
	}
}

// TestScriptTime runs the worst cases of every script at the largest limits
// validation admits, against a real redis-server, and asserts with SLOWLOG
// (every command logged) that none ran longer than 1 ms of Redis time.
// SLOWLOG times a command on the wall clock, and a machine shared with
// other work stretches a run (preempted in the middle, or slower while
// other work holds the core's caches and its twin): each case runs up to
// five times, each run next to redistest's calibration script (the same
// kind of work, about twice the heaviest decision's time; its fastest of
// three), and passes when each of its scripts took at most 1 ms in one of
// the runs, or, after five runs, no longer at its fastest than the fastest
// calibration. A script made twice as heavy fails on any machine. The
// figures are logged (go test -v).
func TestScriptTime(t *testing.T) {
	srv := redistest.Server(t)
	srv.MustDo("CONFIG", "SET", "slowlog-log-slower-than", "0")
	srv.MustDo("CONFIG", "SET", "slowlog-max-len", "100000")
	c := newRueidis(t, srv.Addr)
	ctx := context.Background()
	const P = time.Second
	logLim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: sluice.MaxSlidingLogRate, Period: P}
	full := sluice.MaxSlidingLogRate
	// fillKeys fills n logs (key/0 ... key/n-1) to their Rate, then moves
	// the clock past their Period: the next admission expires every entry.
	fillKeys := func(n int) func(t *testing.T, s *Store, clock *time.Time, key string) {
		return func(t *testing.T, s *Store, clock *time.Time, key string) {
			for i := range n {
				mustAllow(t, s, fmt.Sprint(key, "/", i), logLim, full)
			}
			*clock = clock.Add(P + time.Millisecond)
		}
	}
	multi := func(lim sluice.Limit, ns ...int) func(t *testing.T, s *Store, clock *time.Time, key string) {
		return func(t *testing.T, s *Store, clock *time.Time, key string) {
			reqs := make([]sluice.Request, len(ns))
			for i, n := range ns {
				reqs[i] = sluice.Request{Key: fmt.Sprint(key, "/", i), Limit: lim, N: n}
			}
			ds, err := s.AllowMulti(ctx, reqs)
			if err != nil || !ds[0].Allowed {
				t.Fatalf("AllowMulti: %+v, %v; want allowed", ds, err)
			}
		}
	}
	// logMulti is the heaviest sliding-log AllowMulti: MaxMultiRequests
	// logs, all full and expired, asking MaxSlidingLogRate units in all.
	logMulti := make([]int, sluice.MaxMultiRequests)
	for i := range logMulti {
		logMulti[i] = 1
	}
	logMulti[0] = full - (sluice.MaxMultiRequests - 1)
	bucketMulti := make([]int, sluice.MaxMultiRequests)
	for i := range bucketMulti {
		bucketMulti[i] = 1
	}
	// batchOf makes the batches that take forms from calls pending on
	// the given keys and runs them.
	batchOf := func(lim sluice.Limit, keys, n int) func(t *testing.T, s *Store, clock *time.Time, key string) {
		return func(t *testing.T, s *Store, clock *time.Time, key string) {
			b := &batcher{s: s} // as in production: a batch of one runs its flat script
			for i := range keys {
				c := s.newCall(fmt.Sprint(key, "/", i), lim, n)
				c.ctx = ctx
				b.pending = append(b.pending, c)
			}
			for len(b.pending) > 0 {
				batch := b.take()
				b.exec(batch)
				for _, c := range batch {
					if c.err != nil || c.res[0] != 1 {
						t.Fatalf("batched decision %+v, %v; want allowed", c.res, c.err)
					}
				}
			}
		}
	}
	gcra := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1 << 30, Period: P}
	tests := []struct {
		worstCase
		msLayout bool
	}{
		{worstCase: worstCase{"sliding log: cost Rate onto a full expired log", fillKeys(1), func(t *testing.T, s *Store, _ *time.Time, key string) {
			mustAllow(t, s, key+"/0", logLim, full)
		}}},
		{worstCase: worstCase{"sliding log, millisecond layout: cost Rate onto a full expired log", fillKeys(1), func(t *testing.T, s *Store, _ *time.Time, key string) {
			mustAllow(t, s, key+"/0", logLim, full)
		}}, msLayout: true},
		{worstCase: worstCase{"sliding log: denial of cost Rate on a full log", fillKeys(0), func(t *testing.T, s *Store, _ *time.Time, key string) {
			mustAllow(t, s, key+"/d", logLim, full)
			if d, err := s.AllowN(ctx, key+"/d", logLim, full); err != nil || d.Allowed {
				t.Fatalf("AllowN on a full log = %+v, %v; want denied", d, err)
			}
		}}},
		{worstCase: worstCase{"sliding log: return after an admission that left expired entries", fillKeys(1), func(t *testing.T, s *Store, _ *time.Time, key string) {
			_, at, err := s.Reserve(ctx, key+"/0", logLim, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Return(ctx, key+"/0", logLim, 1, at); err != nil {
				t.Fatal(err)
			}
		}}},
		{worstCase: worstCase{"AllowMulti: 16 full expired logs, 500 units in all", fillKeys(sluice.MaxMultiRequests), multi(logLim, logMulti...)}},
		{worstCase: worstCase{"AllowMulti, millisecond layout: 16 full expired logs, 500 units in all", fillKeys(sluice.MaxMultiRequests), multi(logLim, logMulti...)}, msLayout: true},
		{worstCase: worstCase{"AllowMulti: 16 gcra keys", fillKeys(0), multi(gcra, bucketMulti...)}},
		{worstCase: worstCase{"batch: 256 gcra calls", fillKeys(0), batchOf(gcra, 256, 1)}},
		{worstCase: worstCase{"batch: 128 sliding-log calls of cost 1 on full expired logs", fillKeys(128), batchOf(logLim, 128, 1)}},
		{worstCase: worstCase{"batch: 8 sliding-log calls of cost Rate on full expired logs", fillKeys(8), batchOf(logLim, 8, full)}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var runs [][]time.Duration
			var cal []time.Duration
			var best time.Duration
			for attempt := range 5 {
				clock := time.UnixMicro(1_800_000_000_000_000)
				opts := []Option{WithBatching(false), WithTestClock(func() time.Time { return clock }),
					WithPrefix(fmt.Sprintf("worst%d.%d:", i, attempt))}
				if tt.msLayout {
					opts = append(opts, WithMillisecondLayout())
				}
				s := NewRueidis(c, opts...)
				key := fmt.Sprintf("w%d.%d", i, attempt)
				tt.setup(t, s, &clock, key)
				tt.run(t, s, &clock, key) // loads the scripts, the first time
				clock = clock.Add(P + time.Millisecond)
				key += "x"
				tt.setup(t, s, &clock, key)
				slowScripts(t, c)
				tt.run(t, s, &clock, key)
				runs = append(runs, slowScripts(t, c))
				d, err := srv.Calibrate(fmt.Sprintf("calibration%d.%d", i, attempt))
				if err != nil {
					t.Fatal(err)
				}
				cal = append(cal, d)
				// Within 1 ms: done. Else the comparison with the
				// calibration takes every run of both.
				if best = fastestRuns(runs); best <= maxScriptTime {
					break
				}
			}
			t.Logf("scripts of each run: %v; calibration: %v", runs, cal)
			if bound := max(maxScriptTime, slices.Min(cal)); best > bound {
				t.Errorf("the slowest script, at its fastest of %d runs, took %v, want <= %v (1 ms, or the fastest calibration %v): %v", len(runs), best, bound, slices.Min(cal), runs)
			}
		})
	}
}

// TestTakeBoundsWork: a batch holds at most maxBatch calls and maxBatchWork
// work, and a call heavier than the budget goes alone.
func TestTakeBoundsWork(t *testing.T) {
	s := &Store{prefix: DefaultPrefix}
	logLim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: sluice.MaxSlidingLogRate, Period: time.Second}
	b := &batcher{s: s}
	for i := range 300 {
		b.pending = append(b.pending, s.newCall(strconv.Itoa(i), sluice.PerSecond(10), 1))
	}
	if got := len(b.take()); got != maxBatch {
		t.Errorf("take() of 300 gcra calls took %d, want %d", got, maxBatch)
	}
	b.pending = b.pending[:0]
	for i := range 3 {
		b.pending = append(b.pending, s.newCall(strconv.Itoa(i), logLim, sluice.MaxSlidingLogRate))
	}
	if got := len(b.take()); got != 1 {
		t.Errorf("take() of sliding-log calls of cost %d took %d, want 1", sluice.MaxSlidingLogRate, got)
	}
	b.pending = b.pending[:0]
	for i := range 100 {
		b.pending = append(b.pending, s.newCall(strconv.Itoa(i), logLim, 1))
	}
	if got, want := len(b.take()), maxBatchWork/callWork(int(sluice.SlidingLog), 1); got != want {
		t.Errorf("take() of sliding-log calls of cost 1 took %d, want %d", got, want)
	}
}

// TestLogLength: however admissions, single or in AllowMulti, come, a
// sliding log's ZSET holds at most Rate + 24 entries besides its sequence
// number, though a trim removes only as many expired entries as the
// admission's cost allows.
func TestLogLength(t *testing.T) {
	srv := redistest.Server(t)
	c := newRueidis(t, srv.Addr)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 3))
	for run := range 40 {
		clock := time.UnixMicro(1_800_000_000_000_000)
		opts := []Option{WithBatching(false), WithTestClock(func() time.Time { return clock })}
		seq := 1 // the sequence number's member
		if run%2 == 1 {
			opts, seq = append(opts, WithMillisecondLayout()), 0
		}
		s := NewRueidis(c, opts...)
		lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 1 + rng.IntN(200), Period: 100 * time.Millisecond}
		key := fmt.Sprint("len", run)
		for range 400 {
			clock = clock.Add(time.Duration(rng.Int64N(int64(lim.Period) / 10)))
			if rng.IntN(20) == 0 {
				clock = clock.Add(lim.Period)
			}
			n := 1
			if rng.IntN(4) == 0 {
				n = 1 + rng.IntN(lim.Rate)
			}
			var err error
			if rng.IntN(2) == 0 {
				_, err = s.AllowN(ctx, key, lim, n)
			} else {
				_, err = s.AllowMulti(ctx, []sluice.Request{{Key: key, Limit: lim, N: n}})
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := strconv.Atoi(srv.MustDo("ZCARD", s.redisKey(key, lim)))
			if err != nil {
				t.Fatal(err)
			}
			if got-seq > lim.Rate+24 {
				t.Fatalf("run %d (%v): the log holds %d entries, want <= Rate + 24 = %d", run, lim, got-seq, lim.Rate+24)
			}
		}
	}
}

// TestMultiBounds: AllowMulti takes at most MaxMultiRequests requests and
// MaxSlidingLogRate sliding-log units in all; one past either is an error
// wrapping ErrExceedsCapacity, before anything is sent.
func TestMultiBounds(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	s := NewRueidis(newRueidis(t, srv.Addr))
	lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: sluice.MaxSlidingLogRate, Period: time.Minute}
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
	if _, err := s.AllowMulti(ctx, reqs(sluice.MaxMultiRequests, one)); err != nil {
		t.Errorf("AllowMulti of %d requests: %v, want nil", sluice.MaxMultiRequests, err)
	}
	if _, err := s.AllowMulti(ctx, reqs(sluice.MaxMultiRequests+1, one)); !errors.Is(err, sluice.ErrExceedsCapacity) {
		t.Errorf("AllowMulti of %d requests: %v, want ErrExceedsCapacity", sluice.MaxMultiRequests+1, err)
	}
	if _, err := s.AllowMulti(ctx, reqs(2, units(sluice.MaxSlidingLogRate))); err != nil {
		t.Errorf("AllowMulti of %d sliding-log units: %v, want nil", sluice.MaxSlidingLogRate, err)
	}
	if _, err := s.AllowMulti(ctx, reqs(2, units(sluice.MaxSlidingLogRate+1))); !errors.Is(err, sluice.ErrExceedsCapacity) {
		t.Errorf("AllowMulti of %d sliding-log units: %v, want ErrExceedsCapacity", sluice.MaxSlidingLogRate+1, err)
	}
}
