package redisstore

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/bound"
)

// batcher gathers the decisions of concurrent callers into one script run
// (batch.lua) while earlier runs are in flight, as auto-pipelining gathers
// commands into one write: a lone caller's decision is sent at once, and
// under load the cost of running a script and of reading TIME is shared by
// a batch. Each decision in a batch is still exactly one atomic AllowN; a
// batch is never retried. A script's keys must share a Cluster hash slot,
// so on Cluster there is one batcher per slot (Store.batcherFor).
//
// Batches are run by up to maxRunning runner goroutines, each sending one
// batch, waking its callers, and going on with whatever has gathered
// meanwhile until nothing has. Callers only wait, each on its own context:
// none is held past its deadline by a client that is slow to fail (rueidis
// re-dials a hung server for about a second whatever the context says).
type batcher struct {
	s       *Store
	mu      sync.Mutex
	pending []*call
	running int // runners

	batches, decisions atomic.Int64 // for benchmarks

	// alwaysScript runs even a batch of one call with the batch script
	// (tests, so that sequential calls exercise it).
	alwaysScript bool
}

// maxRunning is how many batches may be in flight at once. Fewer runners
// make larger batches, so fewer script runs and syscalls per decision; one
// more than one keeps Redis busy while a batch's callers are woken and the
// next batch gathers. Measured (redisstore BenchmarkAllow and bench/redis,
// GCRA, 16 to 256 callers, and sluice serve under bench/loadgen at 64
// callers), two against four: batches of 26 rather than 13, the same or
// more decisions/s at every concurrency, 10% less CPU per decision in the
// client and in Redis, and 4-7% less in the service; one in flight saved
// no more than two.
const maxRunning = 2

// maxBatch bounds the decisions of one script run, and maxBatchWork their
// work (callWork): a script blocks Redis while it runs, and a batch must
// stay well under a millisecond of Redis time. In Redis 7 on a loaded
// 2-core machine, a batched GCRA, fixed or sliding window decision took
// about 3µs, a sliding-log decision up to 16µs (one that trims 16 expired
// entries, or a denial that searches a long log), and in the millisecond
// layout 5µs and about 1µs more per unit of its cost (an entry written,
// and as many expired entries removed): 128 bucket decisions, or 25
// sliding-log ones, take about 400µs. A call heavier than the budget runs
// alone (with its single script).
const (
	maxBatch     = 128
	maxBatchWork = 400
)

// callWork is the work of a decision in maxBatchWork's units (about a µs of
// Redis time): n is the decision's cost.
func callWork(kind, n int) int {
	switch kind {
	case int(sluice.SlidingLog):
		return 16
	case kindMsLog:
		return 5 + 2*n
	}
	return 3
}

type call struct {
	key  string
	args decisionArgs
	work int // callWork
	res  [5]int64
	err  error
	wake chan struct{} // signalled once res/err are set
	ctx  context.Context
}

// do decides c in a batch and waits for its result. It returns an error
// when the caller gives up (ctx) before c's result is in; c is then left to
// its batch, which may still write it.
func (b *batcher) do(ctx context.Context, c *call) error {
	c.ctx = ctx
	b.mu.Lock()
	b.pending = append(b.pending, c)
	if b.running < maxRunning {
		b.running++
		batch := b.take()
		b.mu.Unlock()
		go b.runner(batch)
	} else {
		b.mu.Unlock()
	}
	// A deadline given with package bound (failover's) is kept here, on
	// a timer shared with the calls whose deadlines fall in the same
	// millisecond (and stopped when none of them waits any more): ctx.Done
	// does not report it.
	var expired <-chan struct{}
	var slot *bound.Slot
	if d, ok := bound.Of(ctx); ok {
		slot = b.s.deadlines.After(d)
		expired = slot.Done()
	}
	var err error
	select {
	case <-c.wake:
	case <-ctx.Done():
		err = b.leave(c, ctx.Err())
	case <-expired:
		err = b.leave(c, context.DeadlineExceeded)
	}
	if slot != nil {
		b.s.deadlines.Release(slot)
	}
	return err
}

// leave gives c up with err: taken out of the pending calls when it was
// not sent (no decision was made), else left to its batch in flight,
// which may still count it, as a timed-out single call may.
func (b *batcher) leave(c *call, err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, p := range b.pending {
		if p == c {
			b.pending = append(b.pending[:i], b.pending[i+1:]...)
			break
		}
	}
	return err
}

// calls recycles the calls of decisions that completed; a call whose
// caller gave up is left to the garbage collector, since its batch may
// still write it.
var calls = sync.Pool{New: func() any { return &call{wake: make(chan struct{}, 1)} }}

func getCall() *call { return calls.Get().(*call) }

func putCall(c *call) {
	w := c.wake
	*c = call{wake: w}
	calls.Put(c)
}

// take removes and returns the pending calls of the next batch: in order,
// up to maxBatch calls and maxBatchWork work, and at least one. b.mu is
// held.
func (b *batcher) take() []*call {
	n, work := 0, 0
	for _, c := range b.pending {
		if n == maxBatch || n > 0 && work+c.work > maxBatchWork {
			break
		}
		n++
		work += c.work
	}
	batch := make([]*call, n)
	copy(batch, b.pending)
	b.pending = append(b.pending[:0], b.pending[n:]...)
	return batch
}

// runner runs batch, wakes its callers, and goes on with the calls pending
// by then, until there are none.
func (b *batcher) runner(batch []*call) {
	for {
		b.exec(batch)
		for _, c := range batch {
			c.wake <- struct{}{} // c is its caller's again (or garbage)
		}
		// Let the callers just woken run before taking what is pending: a
		// caller that decides again at once (a loop, a server's next
		// request) then joins this runner's next batch instead of waiting
		// a quarter of a round trip for another runner to come back.
		// bench/redis, c=64: +8% decisions/s, and batches of 15 rather
		// than 10, so less Redis time per decision; c=16: +20%.
		if len(batch) > 1 {
			// (A lone call's caller is as likely to decide next on
			// another key, or on Cluster another slot's batcher.)
			runtime.Gosched()
		}
		b.mu.Lock()
		if len(b.pending) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		batch = b.take()
		b.mu.Unlock()
	}
}

// exec runs one batch script and sets every call's result. Calls with
// equal arguments (kind, n, limit, test time) form a group: the script
// reads a group's arguments once, and its keys follow each other in KEYS,
// so that a decision costs Redis one key and no arguments of its own.
func (b *batcher) exec(batch []*call) {
	b.batches.Add(1)
	b.decisions.Add(int64(len(batch)))
	ctx, cancel := batchContext(batch)
	defer cancel()
	if len(batch) == 1 && !b.alwaysScript {
		b.execOne(ctx, batch[0])
		return
	}
	// group[i] is the group of batch[i]; heads[g] the first call of group g.
	group := make([]int, len(batch))
	heads := make([]int, 0, 4)
	for i, c := range batch {
		g := -1
		// Only the latest groups are searched: batches hold few limits, and
		// a group of one is merely slower (the millisecond layout's random member
		// makes every one of its calls a group of its own).
		for h := len(heads) - 1; h >= 0 && h >= len(heads)-maxGroupScan; h-- {
			if batch[heads[h]].args.same(&c.args) {
				g = h
				break
			}
		}
		if g < 0 {
			g = len(heads)
			heads = append(heads, i)
		}
		group[i] = g
	}
	keys := make([]string, 0, len(batch))
	order := make([]*call, 0, len(batch)) // the calls in KEYS order
	clocked := b.s.clock != nil
	args := b.s.clockArgs(make([]string, 0, 2+7*len(heads)))
	for g, h := range heads {
		a := &batch[h].args
		args = append(a.appendAll(args), a.timeArg(clocked))
		n := 0
		for i, c := range batch[h:] {
			if group[h+i] == g {
				keys = append(keys, c.key)
				order = append(order, c)
				n++
			}
		}
		args = append(args, strconv.Itoa(n))
	}
	res, err := b.s.runSync(ctx, batchScript, keys, args) // no caller waits on this goroutine
	if err == nil {
		err = decodeBatch(res, order)
	}
	if err != nil {
		for _, c := range order {
			c.err = err
		}
	}
}

// execOne decides a batch of one call with its kind's single script,
// which costs Redis about 40% less than the batch script around it (5.5 µs
// of command time against 9.0 for a GCRA decision): below a handful of
// concurrent callers, most batches are of one.
func (b *batcher) execOne(ctx context.Context, c *call) {
	sc := singleScripts[c.args.kind]
	res, err := b.s.runSync(ctx, sc, []string{c.key}, c.args.appendSingle(make([]string, 0, 6), b.s.clock != nil))
	switch {
	case err != nil:
		c.err = err
	case len(res) != 5:
		c.err = fmt.Errorf("redisstore: eval %s: reply has %d values, want 5", sc.name, len(res))
	default:
		c.res = [5]int64(res)
	}
}

// decodeBatch sets the results of calls from the compact reply of
// batch.lua: a base time, then per decision remaining (or -(remaining+1)
// and the retry when denied), and the reset (or -(reset+1) and the time
// used minus the base when the decision did not use the base time).
func decodeBatch(res []int64, calls []*call) error {
	if len(res) == 0 {
		return fmt.Errorf("redisstore: eval batch: empty reply for %d decisions", len(calls))
	}
	base, i := res[0], 1
	next := func() (int64, bool) {
		if i >= len(res) {
			return 0, false
		}
		i++
		return res[i-1], true
	}
	for n, c := range calls {
		v, ok := next()
		allowed, rem, retry := int64(1), v, int64(0)
		if ok && v < 0 {
			allowed, rem = 0, -v-1
			retry, ok = next()
		}
		var reset int64
		if ok {
			reset, ok = next()
		}
		used := base
		if ok && reset < 0 {
			var d int64
			d, ok = next()
			reset, used = -reset-1, base+d
		}
		if !ok {
			return fmt.Errorf("redisstore: eval batch: reply of %d values ends at decision %d of %d", len(res), n+1, len(calls))
		}
		c.res = [5]int64{allowed, rem, retry, reset, used}
	}
	if i != len(res) {
		return fmt.Errorf("redisstore: eval batch: reply has %d values, %d left after %d decisions", len(res), len(res)-i, len(calls))
	}
	return nil
}

// maxGroupScan bounds the groups a call is compared with.
const maxGroupScan = 8

// batchContext is the context of a batch: not cancelled with any one
// caller, and with the latest deadline among them (none if one has none).
func batchContext(batch []*call) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			// Neither deadline nor cancellation: nothing to release.
			return context.WithoutCancel(batch[0].ctx), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}
