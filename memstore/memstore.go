// Package memstore is the in-process sluice.Store: sharded (no global lock),
// bounded by WithMaxKeys, removing state once it can no longer matter, with
// a clock that tests can inject. A decision on an existing key allocates
// nothing; a new key allocates nothing either but, now and then, a larger
// table for its shard (and a sliding log its ring).
//
// State is kept per (key, Algorithm, Period): the same key may carry a
// per-second and a per-day limit at once, and changing a limit's Rate or
// Burst keeps what was counted.
//
// An option given an invalid value (a nil function, a negative count or
// interval) cannot be reported by New, which returns a Store whatever its
// options: the Store then answers every call with an error naming the
// option, and keeps no state.
//
// A limit that counts every hit (sluice.CountAll) is charged whatever the
// decision, its debt bounded as internal/algo's Charge steps bound it
// (docs/bounds.md).
//
// A Store is a sluice.FullStore with every capability: AllowMulti
// (all-or-nothing under the locks of every shard involved), Reserve and
// Return (for Limiter.Reserve and tiered's leases), Reset, concurrency
// limits (per key, a set of holders, each with its TTL's end, trimmed on
// every call; see Acquire) with Freed to wake a waiter when a permit
// frees, and Close (which stops the sweeper and waits for it).
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/tick"
	"github.com/sluicehq/sluice/internal/validate"
)

var _ sluice.FullStore = (*Store)(nil)

// Store is an in-process sluice.Store. It is safe for concurrent use.
// Close stops its sweeper and waits for it.
type Store struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
	now    func() time.Time // nil: the monotonic clock from base
	base   time.Time
	baseµs int64
	limits validate.Limits // the limits validated, with their parameters

	maxKeys int
	sweep   time.Duration
	stop    chan struct{}
	done    chan struct{}
	closed  atomic.Bool
	once    sync.Once

	evictions atomic.Int64
	onEvict   func()

	err error // the first invalid option, returned by every call (closed is set)

	sem semTable // the concurrency limits (semaphore.go)
}

// Option configures a Store.
type Option func(*Store)

// invalid records the first invalid option.
func (s *Store) invalid(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("memstore: "+format, args...)
	}
}

// WithClock sets the clock. Tests inject a fake clock to get exact
// decisions; time read from it is clamped per key so that it never runs
// backwards. The default is the wall clock read at New advanced by the
// monotonic clock: one cheap clock read per decision, and no jumps when the
// system's wall clock is stepped. now must not be nil.
func WithClock(now func() time.Time) Option {
	return func(s *Store) {
		if now == nil {
			s.invalid("WithClock(nil)")
			return
		}
		s.now = now
	}
}

// WithMaxKeys bounds the number of states held (one per key, algorithm and
// period); the bound is split evenly across the shards, of which a bounded
// store has one per 64 states (at most DefaultShards). When a shard is full,
// a new state first removes the shard's expired states and otherwise evicts,
// of a sample, the live state that expires soonest (evicting live state
// forgets what it counted; Evictions counts it). 0, the default, is
// unbounded; the sweeper still removes expired state. n must not be
// negative.
//
// n also bounds, separately, the keys of concurrency limits (Acquire): a
// key is held while it has a live permit. A live permit is never evicted
// (forgetting it would admit more than Max at once): Acquire of a new key
// when n keys hold live permits returns an error wrapping
// ErrSemaphoreFull. Each key holds at most sluice.MaxPermits permits.
func WithMaxKeys(n int) Option {
	return func(s *Store) {
		if n < 0 {
			s.invalid("WithMaxKeys(%d): negative", n)
			return
		}
		s.maxKeys = n
	}
}

// WithOnEvict makes f run once for every live state that WithMaxKeys
// evicts (expired states removed to make room are not evictions), as for a
// metric. f runs with a shard's lock held: it must be fast, and must not
// call the Store. f must not be nil.
func WithOnEvict(f func()) Option {
	return func(s *Store) {
		if f == nil {
			s.invalid("WithOnEvict(nil)")
			return
		}
		s.onEvict = f
	}
}

// WithSweepInterval sets how often the sweeper removes expired state
// (default 1 minute); 0 disables the sweeper. d must not be negative.
func WithSweepInterval(d time.Duration) Option {
	return func(s *Store) {
		if d < 0 {
			s.invalid("WithSweepInterval(%v): negative", d)
			return
		}
		s.sweep = d
	}
}

// DefaultShards is the number of shards of a Store without a small WithMaxKeys.
const DefaultShards = 64

// New returns a Store and starts its sweeper. With an invalid option, the
// Store starts no sweeper and every call returns an error naming the
// option.
func New(opts ...Option) *Store {
	s := &Store{seed: maphash.MakeSeed(), sweep: time.Minute}
	for _, o := range opts {
		o(s)
	}
	if s.err != nil {
		s.maxKeys, s.sweep = 0, 0
		s.closed.Store(true) // every call reports s.err
	}
	s.base = time.Now()
	s.baseµs = s.base.UnixMicro()
	// A bounded store keeps at least 64 states per shard, so that the
	// bound, split evenly across shards, is not reached in one shard long
	// before the others; a bound under 128 is one shard, exactly global.
	n := DefaultShards
	for s.maxKeys > 0 && n > 1 && n*64 > s.maxKeys {
		n /= 2
	}
	s.shards = make([]shard, n)
	s.mask = uint64(n - 1)
	for i := range s.shards {
		if s.maxKeys > 0 {
			s.shards[i].cap = s.maxKeys / n
			if i < s.maxKeys%n {
				s.shards[i].cap++
			}
		}
	}
	s.sem.init(n)
	if s.sweep > 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go tick.Every(s.stop, s.done, s.sweep, func() { s.Sweep() })
	}
	return s
}

// Close stops the sweeper and waits for it to return. Later calls return
// sluice.ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
	})
	return nil
}

// Len reports the number of states held, expired ones not yet swept included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		n += s.shards[i].len()
	}
	return n
}

// Evictions reports how many live states WithMaxKeys has evicted.
func (s *Store) Evictions() int64 { return s.evictions.Load() }

// Sweep removes every state that no longer matters. The sweeper calls it;
// it is exported for callers that run without one.
func (s *Store) Sweep() {
	now := s.nowMicro()
	for i := range s.shards {
		s.shards[i].sweepLocked(now)
	}
	s.sweepSem(now)
	s.sweepGrants(now)
}

func (sh *shard) len() int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.n
}

func (sh *shard) sweepLocked(now int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.sweep(now)
}

// ref names one state: its key, algorithm and period, the hash that places
// it, and its shard.
type ref struct {
	key    string
	period int64
	h      uint64 // the hash of key and period, the algorithm in the low bits
	si     int    // the shard's index
	sh     *shard
}

func (s *Store) ref(key string, p *algo.Params) ref {
	h := maphash.String(s.seed, key)
	return ref{key: key, period: p.Period, h: stateHash(h, p), si: int(h & s.mask), sh: &s.shards[h&s.mask]}
}

// stateHash is the hash of a state from its key's hash: the shard is chosen
// by the key's low bits, the slot by the high bits of a hash that mixes in
// the period, so that one key's states go to different slots of the same
// shard; the algorithm is in the low bits.
func stateHash(keyHash uint64, p *algo.Params) uint64 {
	return (keyHash^uint64(p.Period)*0x9e3779b97f4a7c15)&^kindMask | uint64(p.Kind)
}

// AllowN implements sluice.Store.
func (s *Store) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	return s.allow(ctx, key, lim, n, nil)
}

// allow decides n for key and, when stampOut is not nil, reports there the
// time (µs) at which an admission was counted: now, or the state's own time
// when the clock ran backwards for the key.
func (s *Store) allow(ctx context.Context, key string, lim sluice.Limit, n int, stampOut *int64) (d sluice.Decision, err error) {
	p, err := s.check(ctx, key, lim, n)
	if err != nil {
		return sluice.Decision{}, err
	}
	// Scalars rather than a ref: the hot path copies no structs.
	kh := maphash.String(s.seed, key)
	h := stateHash(kh, p)
	sh := &s.shards[kh&s.mask]
	// The clock is read before locking, to keep the lock short: a time a
	// little older than another caller's is clamped per key like any clock
	// that runs backwards.
	now := s.nowMicro()
	var r algo.Result
	r, now = sh.decide(s, h, key, p, now, int64(n), stampOut != nil)
	if stampOut != nil {
		*stampOut = now
	}
	// Field by field into the result: building a Decision and copying it
	// costs a store-forwarding stall per decision.
	d.Allowed = r.Allowed
	d.Limit.Algorithm, d.Limit.Rate, d.Limit.Period, d.Limit.Burst = lim.Algorithm, lim.Rate, lim.Period, lim.Burst
	d.Limit.Counting = lim.Counting
	d.Remaining = int(r.Remaining)
	d.RetryAfter = time.Duration(r.RetryAfter) * time.Microsecond
	d.ResetAfter = time.Duration(r.ResetAfter) * time.Microsecond
	return d, nil
}

// decide applies one step to the state (h, p.Period, key) of sh under its
// lock, released by a deferred unlock even if the step panics (no state is
// then changed: every step computes before it writes). With stamp, it
// returns as its second value the time at which an admission was counted.
func (sh *shard) decide(s *Store, h uint64, key string, p *algo.Params, now, n int64, stamp bool) (algo.Result, int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.lookupH(h, p.Period, key)
	var r algo.Result
	var e *entry
	if i >= 0 {
		e = &sh.slots[i]
	}
	switch {
	case e == nil:
		fresh := entry{h: h}
		r = sh.step(&fresh, now, p, n, true)
		if counted(p, r, n) {
			sh.insertH(h, p.Period, key, now, s).setState(&fresh)
			sh.noteExpiry(fresh.expires)
		}
	case e.expires <= now:
		// The state no longer matters: start afresh, and drop it unless
		// this request is counted.
		sh.reset(e)
		r = sh.step(e, now, p, n, true)
		if !counted(p, r, n) {
			sh.removeAt(i)
		}
	default:
		r = sh.step(e, now, p, n, true)
		if stamp && counted(p, r, n) {
			now = sh.stamp(e, now, p)
		}
	}
	return r, now
}

// nowMicro is the store's time in µs since the Unix epoch.
func (s *Store) nowMicro() int64 {
	if s.now != nil {
		return s.now().UnixMicro()
	}
	return s.baseµs + int64(time.Since(s.base)/time.Microsecond)
}

// check validates a request as validate.Request does and returns the
// limit's parameters.
func (s *Store) check(ctx context.Context, key string, lim sluice.Limit, n int) (*algo.Params, error) {
	if s.closed.Load() {
		return nil, s.closedErr()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if key == "" || len(key) > sluice.MaxKeyLen {
		return nil, sluice.ValidateKey(key)
	}
	p, err := s.limits.Params(lim)
	if err != nil {
		return nil, err
	}
	if n < 0 || int64(n) > p.Cap && !(p.Charge && n <= sluice.MaxCharge) {
		return nil, validate.Cost(lim, n)
	}
	return p, nil
}

// closedErr is the error of a call on a closed store: the invalid option
// it was built with (New marks such a store closed), else
// sluice.ErrClosed.
func (s *Store) closedErr() error {
	if s.err != nil {
		return s.err
	}
	return sluice.ErrClosed
}

// String describes the store for logs.
func (s *Store) String() string {
	return fmt.Sprintf("memstore(%d shards, max keys %d)", len(s.shards), s.maxKeys)
}
