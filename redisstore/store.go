package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/bound"
	"github.com/sluicehq/sluice/internal/redisclock"
	"github.com/sluicehq/sluice/internal/validate"
)

var _ sluice.FullStore = (*Store)(nil)

// ErrCrossSlot is returned by AllowMulti on Redis Cluster when the requests'
// keys lie in different hash slots, so that no single script can decide
// them atomically. The error names two such keys. It also matches
// sluice.ErrMultiUnsupported (errors.Is): these requests cannot be decided
// all or nothing, and nothing was sent; a caller decides them one by one,
// as it would with a store that has no AllowMulti, and a failover.Store
// passes the error on rather than taking it for Redis failing.
var ErrCrossSlot error = crossSlotError{}

type crossSlotError struct{}

func (crossSlotError) Error() string {
	return "redisstore: AllowMulti keys are in different Redis Cluster slots"
}

func (crossSlotError) Is(target error) bool { return target == sluice.ErrMultiUnsupported }

// DefaultPrefix starts every key name the store writes.
const DefaultPrefix = "sluice:"

// testSlackMs lengthens every TTL when a test clock is set: state then
// carries its own times, and a key must not expire in real time while the
// test's clock stands still.
const testSlackMs = 3_600_000

// Store is a sluice.Store on Redis: every decision is made by a Lua script
// run with EVALSHA, on Redis's clock, in one round trip. It is safe for
// concurrent use; concurrent decisions share round trips (rueidis's
// auto-pipelining) and script runs (WithBatching).
type Store struct {
	c      scripter
	prefix string
	// msLayout is WithMillisecondLayout's choice.
	msLayout bool
	// batching is WithBatching's choice; batch is nil when off.
	batching bool
	// slotKey picks the part of a key that chooses its Cluster slot.
	slotKey func(string) string
	clock   func() time.Time // test only; nil means Redis TIME
	closed  atomic.Bool
	once    sync.Once

	limits   validate.Limits // the limits validated at the entrance (check)
	argCache sync.Map        // sluice.Limit -> *limitArgs
	batch    *batcher        // nil: one single script per decision, or per slot
	// slotBatch holds, on Cluster with batching, one batcher per hash
	// slot (made on first use): a script's keys must share a slot there.
	slotBatch []atomic.Pointer[batcher]
	argCached atomic.Int64
	open      openOptions // Open's options (open.go)
	// deadlines ends the batched calls of contexts made by bound.With.
	deadlines bound.Wheel
}

// EnforcesDeadline reports whether AllowN and Reserve end by a deadline
// given them with package bound (a sluice-internal way for failover to
// give its deadline without a timer per call), whatever their context's
// Done says: they do when decisions are batched (WithBatching), each
// caller waiting on a timer it shares with the calls whose deadlines fall
// in the same millisecond.
func (s *Store) EnforcesDeadline() bool { return s.batch != nil || s.slotBatch != nil }

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the prefix of every key name (default DefaultPrefix).
// Braces in it are escaped like keys, so that it never forms a hash tag.
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = escape(p) } }

// WithSlotKey sets the part of each key that chooses its Redis Cluster hash
// slot (by default the whole key), so that AllowMulti can decide keys of
// different subjects in one script on Cluster: with f returning the tenant
// of keys like "tenant42/route/x", a tenant's limits and its routes' limits
// share a slot. Key names grow by the slot key. On a single node it only
// changes the names. A nil f is the default.
func WithSlotKey(f func(key string) string) Option { return func(s *Store) { s.slotKey = f } }

// WithMillisecondLayout stores sliding-log limits in the millisecond
// layout: key rl:<key> (no prefix, no escaping, one state per key whatever
// the Period), a ZSET scored in milliseconds with members "<ms>-<8 hex>",
// trimmed and given a PEXPIRE of the window on each admission, counting the
// entries scored above now-window. It is the layout of a widely used
// Python/Redis sliding-log script, so a fleet still running such workers
// shares one quota with sluice. Periods must be whole milliseconds. Other
// algorithms keep sluice's layout.
//
// Every unit is a member of its own in this layout, as the Python script
// writes them, so that the work of a call grows with its cost: a call asks
// at most MaxMillisecondUnits units.
func WithMillisecondLayout() Option { return func(s *Store) { s.msLayout = true } }

// MaxMillisecondUnits is the most sliding-log units one call asks in the
// millisecond layout (WithMillisecondLayout): an AllowN or Lease of more,
// or an AllowMulti whose sliding-log requests ask more in all, is an error
// wrapping sluice.ErrExceedsCapacity, and a Return gives back at most this
// many. (sluice's own layout writes one member per decision, whatever its
// cost.)
const MaxMillisecondUnits = 128

// withTestClock makes every script use now() instead of Redis's TIME, and
// lengthens TTLs by an hour so that keys outlive a stopped clock: exact
// tests only (sluicetest's fake clock, differential fuzzing), here
// (export_test.go) and in other packages (internal/redisclock).
func withTestClock(now func() time.Time) Option { return func(s *Store) { s.clock = now } }

func init() {
	redisclock.Register(func(now func() time.Time) any { return withTestClock(now) })
}

func newStore(c scripter, opts []Option) *Store {
	s := &Store{c: c, prefix: DefaultPrefix, batching: !c.isRing()}
	for _, o := range opts {
		o(s)
	}
	switch {
	case !s.batching || c.isRing():
	case c.isCluster():
		s.slotBatch = make([]atomic.Pointer[batcher], 16384)
	default:
		s.batch = &batcher{s: s}
	}
	return s
}

// batcherFor is the batcher of a key's decisions: the store's, or on
// Cluster its hash slot's; nil without batching.
func (s *Store) batcherFor(redisKey string) *batcher {
	if s.slotBatch == nil {
		return s.batch
	}
	p := &s.slotBatch[slot(redisKey)]
	if b := p.Load(); b != nil {
		return b
	}
	p.CompareAndSwap(nil, &batcher{s: s})
	return p.Load()
}

// WithBatching turns batching on or off (default on). With batching, the
// decisions of concurrent callers that arrive while earlier ones are in
// flight go to Redis in one script run, each still one atomic decision
// made by its algorithm's own math, so that Redis spends its time deciding
// rather than starting scripts. On Cluster, where a script's keys share a
// hash slot, decisions are batched per slot: the calls of one hot key share
// runs, and a key's repeated denials in a run cost Redis nothing. Off,
// every decision is one script run. A go-redis Ring, which shards by key,
// cannot run one script over the keys of several callers: there every
// decision is one script run, whatever on says.
func WithBatching(on bool) Option { return func(s *Store) { s.batching = on } }

// NewRueidis returns a Store deciding through c, the fast path: rueidis
// pipelines concurrent decisions automatically. Close does not close c.
func NewRueidis(c rueidis.Client, opts ...Option) *Store {
	return newStore(rueidisClient{c: c}, opts)
}

// NewGoRedis returns a Store deciding through an existing go-redis client
// (*redis.Client, *redis.ClusterClient, *redis.Ring, or a failover client
// for Sentinel).
// go-redis retries commands after network errors unless MaxRetries is -1;
// a retried decision may be counted twice, so prefer a client with
// MaxRetries: -1. Close does not close c.
func NewGoRedis(c redis.UniversalClient, opts ...Option) *Store {
	return newStore(goRedisClient{c: c}, opts)
}

// Close makes later calls return sluice.ErrClosed and closes the client if
// the store opened it (Open).
func (s *Store) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		s.c.close()
	})
	return nil
}

// check validates a request at the store's entrance, as memstore does: a
// limit seen before costs one lookup in the cache of validated limits.
func (s *Store) check(ctx context.Context, key string, lim sluice.Limit, n int) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := s.limits.Check(key, lim, n); err != nil {
		return err
	}
	if s.msLayout && lim.Algorithm == sluice.SlidingLog {
		if lim.Period%time.Millisecond != 0 {
			return fmt.Errorf("%w: Period %v must be whole milliseconds in the millisecond layout (WithMillisecondLayout)", sluice.ErrInvalidLimit, lim.Period)
		}
		if n > MaxMillisecondUnits {
			return msUnitsError(n)
		}
	}
	return nil
}

// msUnitsError is the error of a call that asks n units, more than
// MaxMillisecondUnits, of the millisecond layout.
func msUnitsError(n int) error {
	return &sluice.LimitError{Field: "N", Reason: fmt.Sprintf("n = %d, but the millisecond layout writes one entry per unit, at most %d in one call", n, MaxMillisecondUnits), Err: sluice.ErrExceedsCapacity}
}

// kind numbers lim's script in the scripts: its algorithm, the
// millisecond layout's log, or for a limit that counts every hit its
// algorithm plus kindCharge. The Counting is so part of every script's
// arguments.
func (s *Store) kind(lim sluice.Limit) int {
	if s.msLayout && lim.Algorithm == sluice.SlidingLog {
		return kindMsLog
	}
	if lim.Counting == sluice.CountAll {
		return kindCharge + int(lim.Algorithm)
	}
	return int(lim.Algorithm)
}

func params(lim sluice.Limit) algo.Params {
	return algo.NewParams(algo.Kind(lim.Algorithm), int64(lim.Rate), int64(lim.Burst), lim.Period.Microseconds())
}

// AllowN implements sluice.Store.
func (s *Store) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	d, _, err := s.allow(ctx, key, lim, n)
	return d, err
}

func (s *Store) allow(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, int64, error) {
	if err := s.check(ctx, key, lim, n); err != nil {
		return sluice.Decision{}, 0, err
	}
	if s.batch != nil || s.slotBatch != nil {
		c := s.newCall(key, lim, n)
		if err := s.batcherFor(c.key).do(ctx, c); err != nil {
			return sluice.Decision{}, 0, err // c stays with its batch
		}
		if err := c.err; err != nil {
			putCall(c)
			return sluice.Decision{}, 0, withCtx(ctx, err) // the batch's context is not ctx
		}
		d, at := decision(lim, c.res[:]), c.res[4]
		putCall(c)
		return d, at, nil
	}
	a := s.newArgs(lim, n)
	sc := singleScripts[a.kind]
	res, err := s.run(ctx, sc, []string{s.redisKey(key, lim)}, a.appendSingle(make([]string, 0, 6), s.clock != nil))
	if err != nil {
		return sluice.Decision{}, 0, err
	}
	if len(res) != 5 {
		return sluice.Decision{}, 0, fmt.Errorf("redisstore: eval %s: reply has %d values, want 5", sc.name, len(res))
	}
	return decision(lim, res), res[4], nil
}

// newCall is a batch call deciding n on key under lim.
func (s *Store) newCall(key string, lim sluice.Limit, n int) *call {
	c := getCall()
	c.key = s.redisKey(key, lim)
	c.args = s.newArgs(lim, n)
	c.work = callWork(c.args.kind, n)
	return c
}

func decision(lim sluice.Limit, r []int64) sluice.Decision {
	return sluice.Decision{
		Allowed:    r[0] == 1,
		Limit:      lim,
		Remaining:  int(r[1]),
		RetryAfter: time.Duration(r[2]) * time.Microsecond,
		ResetAfter: time.Duration(r[3]) * time.Microsecond,
	}
}

// Reserve implements sluice.Reserver: AllowN, and the Redis time (µs) the
// script decided at, which Return needs.
func (s *Store) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	d, at, err := s.allow(ctx, key, lim, n)
	if err != nil {
		return d, time.Time{}, err
	}
	return d, time.UnixMicro(at), nil
}

// Lease is Reserve's former name.
//
// Deprecated: use Reserve.
func (s *Store) Lease(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	return s.Reserve(ctx, key, lim, n)
}

// Return implements sluice.Reserver: it gives back n units reserved at
// at, as far as they still count (as memstore does), in one script on
// Redis time. A zero at is Redis's time now, as the script reads it: a
// refund whose admission time is unknown leaves the current window, moves
// a bucket's TAT back by its full worth, or removes a log's newest
// entries, never crediting more than the key counts. n may be up to
// sluice.MaxCharge whatever the limit's Counting.
func (s *Store) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	if err := s.check(ctx, key, lim, 0); err != nil {
		return err
	}
	if n < 0 || n > sluice.MaxCharge {
		return validate.Request(key, lim.WithCounting(sluice.CountAll), n)
	}
	if n == 0 {
		return nil
	}
	a := s.newArgs(lim, n)
	args := a.appendAll(s.clockArgs(make([]string, 0, 8)))
	if at.IsZero() {
		args = append(args, "")
	} else {
		args = append(args, strconv.FormatInt(at.UnixMicro(), 10))
	}
	_, err := s.run(ctx, returnScript, []string{s.redisKey(key, lim)}, args)
	return err
}

// String describes the store for logs.
func (s *Store) String() string {
	return fmt.Sprintf("redisstore(prefix %q, cluster %v, batching %v)", s.prefix, s.c.isCluster(), s.batch != nil || s.slotBatch != nil)
}
