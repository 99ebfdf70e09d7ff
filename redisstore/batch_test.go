package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/wait"
)

// TestBatchDeadlines: callers queued behind batches in flight on a server
// that does not answer return at their own deadline, and the store works
// again once the server does.
func TestBatchDeadlines(t *testing.T) {
	srv := redistest.Server(t)
	s := NewRueidis(newRueidis(t, srv.Addr))
	lim := sluice.PerSecond(1000)
	if _, err := s.AllowN(context.Background(), "warm", lim, 1); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	var wg sync.WaitGroup
	var late atomic.Int64
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			var err error
			// Late, past what a goroutine woken by the same deadline
			// was: a busy machine delays both.
			if wait.PastDeadline(ctx, func() { _, err = s.AllowN(ctx, "k", lim, 1) }) > 400*time.Millisecond {
				late.Add(1)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("caller %d: AllowN on a paused server: error = %v, want DeadlineExceeded", i, err)
			}
		}()
	}
	wg.Wait()
	if n := late.Load(); n > 0 {
		t.Errorf("%d callers returned more than 400ms after their 100ms deadline (after a goroutine woken by it)", n)
	}
	srv.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Batches still in flight drain; a new decision goes through. (The
	// first may still meet the end of a re-dial that began while the server
	// was paused: rueidis reports that dial's timeout to the calls waiting
	// on the connection.)
	for attempt := 1; ; attempt++ {
		d, err := s.AllowN(ctx, "after", lim, 1)
		if err == nil && d.Allowed {
			break
		}
		if attempt == 3 || ctx.Err() != nil {
			t.Fatalf("AllowN after the server resumed, attempt %d = %+v, %v", attempt, d, err)
		}
	}
	// The runners retire once nothing is pending (a runner wakes its
	// callers before it looks again).
	running, pending := -1, -1
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		s.batch.mu.Lock()
		running, pending = s.batch.running, len(s.batch.pending)
		s.batch.mu.Unlock()
		if running == 0 && pending == 0 {
			break
		}
	}
	if running != 0 || pending != 0 {
		t.Errorf("batcher after the storm: %d running, %d pending; want 0, 0", running, pending)
	}
}

// TestBatchConcurrent: many callers on one key through batches never admit
// more than the limit, and decisions on one key in one batch see each
// other.
func TestBatchConcurrent(t *testing.T) {
	srv := redistest.Server(t)
	s := NewRueidis(newRueidis(t, srv.Addr))
	for _, a := range algorithms {
		lim := sluice.Limit{Algorithm: a, Rate: 50, Period: time.Hour}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 4 {
					d, err := s.AllowN(context.Background(), "hot/"+a.String(), lim, 1)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if got := admitted.Load(); got != 50 {
			t.Errorf("%v: 256 concurrent requests on a limit of 50 admitted %d, want 50", a, got)
		}
	}
	if b := s.batch.batches.Load(); b >= s.batch.decisions.Load() {
		t.Logf("no batch held more than one decision (%d batches)", b)
	}
}

// TestMillisecondLayoutExact runs the millisecond layout's semantics
// (milliseconds, entries above now-window) on a test clock through the
// flat, batch and multi scripts.
func TestMillisecondLayoutExact(t *testing.T) {
	srv := redistest.Server(t)
	var now atomic.Int64
	clock := WithTestClock(func() time.Time { return time.UnixMicro(now.Load()) })
	c := newRueidis(t, srv.Addr)
	lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 3, Period: time.Second}
	base := int64(1_800_000_000_000_000)
	steps := []struct {
		at   int64 // µs after base
		n    int
		want sluice.Decision
	}{
		{0, 1, sluice.Decision{Allowed: true, Limit: lim, Remaining: 2, ResetAfter: time.Second}},
		{100_400, 1, sluice.Decision{Allowed: true, Limit: lim, Remaining: 1, ResetAfter: 999600 * time.Microsecond}},
		{200_000, 1, sluice.Decision{Allowed: true, Limit: lim, Remaining: 0, ResetAfter: time.Second}},
		{300_500, 1, sluice.Decision{Limit: lim, RetryAfter: 699500 * time.Microsecond, ResetAfter: 899500 * time.Microsecond}},
		{300_500, 0, sluice.Decision{Allowed: true, Limit: lim, ResetAfter: 899500 * time.Microsecond}},
		{999_999, 1, sluice.Decision{Limit: lim, RetryAfter: time.Microsecond, ResetAfter: 200001 * time.Microsecond}},
		// At 1000 ms the entry scored 0 is at now-window: gone.
		{1_000_000, 1, sluice.Decision{Allowed: true, Limit: lim, Remaining: 0, ResetAfter: time.Second}},
		// At 1100 ms the entry scored 100 has gone too; 2 do not fit in
		// the 1 left until the entry scored 200 leaves.
		{1_100_000, 2, sluice.Decision{Limit: lim, Remaining: 1, RetryAfter: 100 * time.Millisecond, ResetAfter: 900 * time.Millisecond}},
	}
	paths := map[string]func(key string, n int) (sluice.Decision, error){}
	for _, batch := range []bool{true, false} {
		s := NewRueidis(c, clock, WithMillisecondLayout(), WithBatching(batch))
		if batch {
			s.batch.alwaysScript = true // one call at a time, through batch.lua
		}
		name := map[bool]string{true: "batch", false: "flat"}[batch]
		paths[name] = func(key string, n int) (sluice.Decision, error) {
			return s.AllowN(context.Background(), key, lim, n)
		}
		if !batch {
			paths["multi"] = func(key string, n int) (sluice.Decision, error) {
				ds, err := s.AllowMulti(context.Background(), []sluice.Request{{Key: key, Limit: lim, N: n}})
				if err != nil {
					return sluice.Decision{}, err
				}
				return ds[0], nil
			}
		}
	}
	for name, allow := range paths {
		for _, st := range steps {
			now.Store(base + st.at)
			d, err := allow("ms-exact-"+name, st.n)
			if err != nil || d != st.want {
				t.Errorf("%s: AllowN(%d) at +%dµs = %+v, %v; want %+v", name, st.n, st.at, d, err, st.want)
			}
		}
	}
}

// TestBatchGroups: a batch mixing algorithms, limits, costs and test times
// (so that its calls form several groups, interleaved) decides every call
// as the flat script decides it alone.
func TestBatchGroups(t *testing.T) {
	batched, flat, clock, _ := batchPair(t)
	lims := []sluice.Limit{
		{Algorithm: sluice.GCRA, Rate: 5, Period: time.Second},
		{Algorithm: sluice.GCRA, Rate: 7, Period: time.Second, Burst: 3},
		{Algorithm: sluice.GCRA, Rate: 3, Period: time.Minute},
		{Algorithm: sluice.FixedWindow, Rate: 4, Period: time.Second},
		{Algorithm: sluice.FixedWindow, Rate: 9, Period: 1500 * time.Millisecond},
		{Algorithm: sluice.SlidingLog, Rate: 4, Period: time.Second},
		{Algorithm: sluice.SlidingWindow, Rate: 6, Period: time.Second},
		{Algorithm: sluice.TokenBucket, Rate: 5, Period: time.Second, Burst: 8},
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	groups := 0
	for round := range 150 {
		type req struct {
			key string
			lim sluice.Limit
			n   int
			at  int64
		}
		var reqs []req
		var calls []*call
		seen := map[string]bool{}
		for range 1 + rng.IntN(40) {
			r := req{key: fmt.Sprintf("k%d", rng.IntN(5)), lim: lims[rng.IntN(len(lims))], n: []int{0, 1, 1, 1, 2}[rng.IntN(5)]}
			// One state appears once per batch: the order of the calls of
			// one batch is the batch's choice.
			id := fmt.Sprint(r.key, r.lim.Algorithm, r.lim.Period)
			if seen[id] {
				continue
			}
			seen[id] = true
			if rng.IntN(4) == 0 {
				clock.Add(rng.Int64N(50_000))
			}
			r.at = clock.Load()
			reqs = append(reqs, r)
			cl := batched.newCall(r.key, r.lim, r.n)
			cl.ctx = ctx
			calls = append(calls, cl)
		}
		var distinct []*decisionArgs
	calls:
		for _, cl := range calls {
			for _, a := range distinct {
				if a.same(&cl.args) {
					continue calls
				}
			}
			distinct = append(distinct, &cl.args)
		}
		groups = max(groups, len(distinct))
		batched.batch.exec(calls)
		for i, r := range reqs {
			clock.Store(r.at)
			want, err := flat.AllowN(ctx, r.key, r.lim, r.n)
			if err != nil {
				t.Fatalf("round %d: flat AllowN(%q, %v, %d): %v", round, r.key, r.lim, r.n, err)
			}
			if calls[i].err != nil {
				t.Fatalf("round %d: batched call %d (%q, %v, %d): %v", round, i, r.key, r.lim, r.n, calls[i].err)
			}
			if got := decision(r.lim, calls[i].res[:]); got != want {
				t.Errorf("round %d: batched call %d (%q, %v, %d at %d) = %+v, flat script says %+v", round, i, r.key, r.lim, r.n, r.at, got, want)
			}
		}
		clock.Add(rng.Int64N(400_000))
	}
	if groups < 5 {
		t.Errorf("batches held at most %d groups; the test wants several", groups)
	}
}

// TestDecodeBatch: the compact batch reply decodes to each call's five
// values, and a reply too short or too long is an error, not a panic.
func TestDecodeBatch(t *testing.T) {
	const base = 1_700_000_000_000_000
	for _, tt := range []struct {
		name string
		res  []int64
		n    int
		want [][5]int64
		err  bool
	}{
		{name: "admitted at the base", res: []int64{base, 9, 1000, 0, 0}, n: 2,
			want: [][5]int64{{1, 9, 0, 1000, base}, {1, 0, 0, 0, base}}},
		{name: "denied", res: []int64{base, -1, 250, 1000, -4, 7, 3}, n: 2,
			want: [][5]int64{{0, 0, 250, 1000, base}, {0, 3, 7, 3, base}}},
		{name: "another time", res: []int64{base, 5, -1001, -40, -1, 2, -1, 12}, n: 2,
			want: [][5]int64{{1, 5, 0, 1000, base - 40}, {0, 0, 2, 0, base + 12}}},
		{name: "empty", res: nil, n: 1, err: true},
		{name: "short", res: []int64{base, 5}, n: 1, err: true},
		{name: "short after a denial", res: []int64{base, -1, 3}, n: 1, err: true},
		{name: "short after another time", res: []int64{base, 1, -3}, n: 1, err: true},
		{name: "long", res: []int64{base, 1, 3, 4}, n: 1, err: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			calls := make([]*call, tt.n)
			for i := range calls {
				calls[i] = &call{}
			}
			err := decodeBatch(tt.res, calls)
			if (err != nil) != tt.err {
				t.Fatalf("decodeBatch(%v) error = %v, want error %v", tt.res, err, tt.err)
			}
			if tt.err {
				return
			}
			for i, c := range calls {
				if c.res != tt.want[i] {
					t.Errorf("decodeBatch(%v): call %d = %v, want %v", tt.res, i, c.res, tt.want[i])
				}
			}
		})
	}
}

// dataCommands is how many commands Redis has run other than scripts,
// TIME and introspection: the calls that decisions make on keys.
func dataCommands(t *testing.T, srv *redistest.Instance) int {
	t.Helper()
	total := 0
	for _, l := range strings.Split(srv.MustDo("INFO", "commandstats"), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":calls=")
		if !ok {
			continue
		}
		switch strings.TrimPrefix(name, "cmdstat_") {
		case "evalsha", "eval", "script|load", "time", "info", "ping", "hello", "client|setinfo", "client|tracking":
			continue
		}
		n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		if err != nil {
			t.Fatalf("commandstats line %q: %v", l, err)
		}
		total += n
	}
	return total
}

// TestBatchHotKeyDenials: one key's calls in one batch past its limit are
// decided as the flat script decides them one after another, and the
// denials after the first cost Redis no command.
func TestBatchHotKeyDenials(t *testing.T) {
	batched, flat, _, srv := batchPair(t)
	ctx := context.Background()
	const calls, rate = 30, 5
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.TokenBucket, sluice.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			lim := sluice.Limit{Algorithm: alg, Rate: rate, Period: time.Second}
			before := dataCommands(t, srv)
			var want []sluice.Decision
			for range calls {
				d, err := flat.AllowN(ctx, "hot", lim, 1)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, d)
			}
			flatCmds := dataCommands(t, srv) - before

			batch := make([]*call, calls)
			for i := range batch {
				batch[i] = batched.newCall("hot", lim, 1)
				batch[i].ctx = ctx
			}
			before = dataCommands(t, srv)
			batched.batch.exec(batch)
			batchCmds := dataCommands(t, srv) - before

			denied := 0
			for i, cl := range batch {
				if cl.err != nil {
					t.Fatalf("call %d: %v", i, cl.err)
				}
				if got := decision(lim, cl.res[:]); got != want[i] {
					t.Errorf("call %d = %+v, flat script says %+v", i, got, want[i])
				}
				if !want[i].Allowed {
					denied++
				}
			}
			if denied != calls-rate {
				t.Fatalf("%d of %d calls denied, want %d", denied, calls, calls-rate)
			}
			// Every denial but the first is free: at least one command each
			// in the flat run.
			if batchCmds > flatCmds-(denied-1) {
				t.Errorf("batch ran %d commands, flat calls %d: want at most %d", batchCmds, flatCmds, flatCmds-(denied-1))
			}
			t.Logf("%d calls, %d denied: %d commands flat, %d batched", calls, denied, flatCmds, batchCmds)
		})
	}
}

// TestBatchRepeats: batches in which states recur, each with its own
// arguments (so one group per distinct limit and cost, the calls of a
// state in arrival order) and interleaved with other states, decide every
// call as the flat script decides the state's calls one after another,
// denials repeated from an earlier one included.
func TestBatchRepeats(t *testing.T) {
	batched, flat, clock, _ := batchPair(t)
	lims := []sluice.Limit{
		{Algorithm: sluice.GCRA, Rate: 3, Period: time.Second},
		{Algorithm: sluice.GCRA, Rate: 4, Period: time.Second, Burst: 2},
		{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Second},
		{Algorithm: sluice.SlidingLog, Rate: 3, Period: time.Second},
		{Algorithm: sluice.SlidingWindow, Rate: 4, Period: time.Second},
		{Algorithm: sluice.TokenBucket, Rate: 2, Period: time.Second, Burst: 3},
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	repeatedDenials := 0
	for round := range 200 {
		type state struct {
			key string
			lim sluice.Limit
			n   int
		}
		var states []state
		seen := map[string]bool{}
		for range 1 + rng.IntN(6) {
			s := state{key: fmt.Sprintf("k%d", rng.IntN(4)), lim: lims[rng.IntN(len(lims))], n: []int{0, 1, 1, 1, 2}[rng.IntN(5)]}
			id := fmt.Sprint(s.key, s.lim.Algorithm, s.lim.Period)
			if !seen[id] {
				seen[id] = true
				states = append(states, s)
			}
		}
		var order []int // the state of each call, in arrival order
		for range 2 + rng.IntN(30) {
			order = append(order, rng.IntN(len(states)))
		}
		calls := make([]*call, len(order))
		for i, si := range order {
			s := states[si]
			calls[i] = batched.newCall(s.key, s.lim, s.n)
			calls[i].ctx = ctx
		}
		batched.batch.exec(calls)
		denied := map[int]bool{}
		for i, si := range order {
			s := states[si]
			want, err := flat.AllowN(ctx, s.key, s.lim, s.n)
			if err != nil {
				t.Fatalf("round %d: flat AllowN(%q, %v, %d): %v", round, s.key, s.lim, s.n, err)
			}
			if calls[i].err != nil {
				t.Fatalf("round %d: batched call %d: %v", round, i, calls[i].err)
			}
			if got := decision(s.lim, calls[i].res[:]); got != want {
				t.Errorf("round %d: batched call %d (%q, %v, n=%d) = %+v, flat script says %+v", round, i, s.key, s.lim, s.n, got, want)
			}
			if !want.Allowed {
				if denied[si] {
					repeatedDenials++
				}
				denied[si] = true
			}
		}
		clock.Add(rng.Int64N(700_000))
	}
	if repeatedDenials < 100 {
		t.Errorf("%d denials repeated an earlier one of their batch; the test wants many", repeatedDenials)
	}
}

// TestBatchOfOne: a lone call, a batch of one, runs its algorithm's flat
// script, which costs Redis less than the batch script around it; with
// alwaysScript it runs the batch script, as the differential tests want.
func TestBatchOfOne(t *testing.T) {
	srv := redistest.Server(t)
	c := newRueidis(t, srv.Addr)
	lim := sluice.PerSecond(10)
	for _, always := range []bool{false, true} {
		s := NewRueidis(c)
		s.batch.alwaysScript = always
		srv.MustDo("SCRIPT", "FLUSH")
		d, err := s.AllowN(context.Background(), fmt.Sprint("one-", always), lim, 1)
		if err != nil || !d.Allowed || d.Remaining != 9 {
			t.Fatalf("alwaysScript %v: AllowN = %+v, %v; want allowed, 9 remaining", always, d, err)
		}
		want := "1\n0"
		if always {
			want = "0\n1"
		}
		if got := srv.MustDo("SCRIPT", "EXISTS", singleScripts[lim.Algorithm].sha, batchScript.sha); got != want {
			t.Errorf("alwaysScript %v: SCRIPT EXISTS flat, batch = %q, want %q", always, got, want)
		}
	}
}

// TestClusterBatching: on Cluster, decisions are batched per hash slot.
// Concurrent callers on hot keys in different slots, through rueidis and
// go-redis, are admitted exactly up to the limit, in batches of several
// calls, and each slot's batches run on its own node.
func TestClusterBatching(t *testing.T) {
	cl := redistest.Cluster(t, 3, 0)
	clients := map[string]*Store{
		"rueidis": NewRueidis(newRueidis(t, cl.Addrs()...)),
		"goredis": NewGoRedis(newGoRedis(t, true, cl.Addrs()...)),
	}
	ctx := context.Background()
	const limit, callers, each = 40, 32, 10
	for name, s := range clients {
		t.Run(name, func(t *testing.T) {
			if s.slotBatch == nil {
				t.Fatal("no per-slot batching on Cluster")
			}
			lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: limit, Period: time.Hour}
			keys := []string{name + "-a", name + "-b", name + "-c", name + "-d"}
			slots := map[uint16]bool{}
			for _, k := range keys {
				slots[slot(s.redisKey(k, lim))] = true
			}
			if len(slots) < 2 {
				t.Fatalf("keys %v share one slot; the test wants several", keys)
			}
			admitted := make([]atomic.Int64, len(keys))
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() {
					for j := range each {
						k := (i + j) % len(keys)
						d, err := s.AllowN(ctx, keys[k], lim, 1)
						if err != nil {
							t.Errorf("AllowN(%q): %v", keys[k], err)
							return
						}
						if d.Allowed {
							admitted[k].Add(1)
						}
					}
				})
			}
			wg.Wait()
			var batches, decisions int64
			counted := map[*batcher]bool{} // keys may share a slot
			for i, k := range keys {
				if got, want := admitted[i].Load(), int64(min(limit, callers*each/len(keys))); got != want {
					t.Errorf("%q: %d admitted, want %d", k, got, want)
				}
				if b := s.batcherFor(s.redisKey(k, lim)); !counted[b] {
					counted[b] = true
					batches += b.batches.Load()
					decisions += b.decisions.Load()
				}
			}
			if decisions != callers*each {
				t.Errorf("the slots' batchers decided %d calls, want %d", decisions, callers*each)
			}
			if batches >= decisions {
				t.Errorf("%d decisions in %d batches: no batch held two", decisions, batches)
			}
			t.Logf("%d decisions in %d batches over %d slots", decisions, batches, len(slots))
		})
	}
}

// batchPair returns a batching store and a flat one on one new server,
// both on the test clock it returns (set to a fixed start).
func batchPair(t *testing.T) (batched, flat *Store, clock *atomic.Int64, srv *redistest.Instance) {
	t.Helper()
	srv = redistest.Server(t)
	c := newRueidis(t, srv.Addr)
	clock = new(atomic.Int64)
	clock.Store(1_700_000_000_000_000)
	tc := WithTestClock(func() time.Time { return time.UnixMicro(clock.Load()) })
	return NewRueidis(c, tc, WithPrefix("b:")), NewRueidis(c, tc, WithPrefix("f:"), WithBatching(false)), clock, srv
}
