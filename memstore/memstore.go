// Package memstore is the in-process sluice.Store: sharded (no global lock),
// bounded by WithMaxKeys, removing state once it can no longer matter, with
// a clock that tests can inject. A decision on an existing key allocates
// nothing.
//
// State is kept per (key, Algorithm, Period): the same key may carry a
// per-second and a per-day limit at once, and changing a limit's Rate or
// Burst keeps what was counted.
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
)

var (
	_ sluice.Store      = (*Store)(nil)
	_ sluice.MultiStore = (*Store)(nil)
)

// Store is an in-process sluice.Store. It is safe for concurrent use.
// Close stops its sweeper and waits for it.
type Store struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
	now    func() time.Time

	maxKeys int
	sweep   time.Duration
	stop    chan struct{}
	done    chan struct{}
	closed  atomic.Bool
	once    sync.Once

	evictions atomic.Int64
}

type shard struct {
	mu  sync.Mutex
	m   map[stateKey]*entry
	cap int // 0: unbounded
	_   [40]byte
}

type stateKey struct {
	key    string
	kind   algo.Kind
	period int64
}

// entry is one key's state: three words that hold the state of every
// algorithm but the log, or the log.
type entry struct {
	expires int64 // µs: at and after this, the state no longer matters
	a, b, c int64
	log     *algo.Log
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock (default time.Now). Tests inject a fake clock to
// get exact decisions; time read from it is clamped per key so that it never
// runs backwards.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithMaxKeys bounds the number of keys held. When full, a new key evicts
// expired state first and otherwise the sampled state that expires soonest
// (evicting live state forgets what it counted). 0, the default, is
// unbounded; a sweeper still removes expired state.
func WithMaxKeys(n int) Option { return func(s *Store) { s.maxKeys = max(n, 0) } }

// WithSweepInterval sets how often the sweeper removes expired state
// (default 1 minute); 0 disables the sweeper.
func WithSweepInterval(d time.Duration) Option { return func(s *Store) { s.sweep = max(d, 0) } }

// DefaultShards is the number of shards of a Store without a small WithMaxKeys.
const DefaultShards = 64

// New returns a Store and starts its sweeper.
func New(opts ...Option) *Store {
	s := &Store{now: time.Now, seed: maphash.MakeSeed(), sweep: time.Minute}
	for _, o := range opts {
		o(s)
	}
	n := DefaultShards
	for s.maxKeys > 0 && n > s.maxKeys {
		n /= 2
	}
	s.shards = make([]shard, n)
	s.mask = uint64(n - 1)
	for i := range s.shards {
		s.shards[i].m = make(map[stateKey]*entry)
		if s.maxKeys > 0 {
			s.shards[i].cap = s.maxKeys / n
			if i < s.maxKeys%n {
				s.shards[i].cap++
			}
		}
	}
	if s.sweep > 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.sweeper()
	}
	return s
}

// Close stops the sweeper and waits for it to return. Later decisions
// return sluice.ErrClosed.
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
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Evictions reports how many live states WithMaxKeys has evicted.
func (s *Store) Evictions() int64 { return s.evictions.Load() }

func (s *Store) sweeper() {
	defer close(s.done)
	t := time.NewTicker(s.sweep)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Sweep removes every state that no longer matters. The sweeper calls it;
// it is exported for callers that run without one.
func (s *Store) Sweep() {
	now := s.now().UnixMicro()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.expires <= now {
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
	}
}

func (s *Store) shardIndex(key string) int {
	return int(maphash.String(s.seed, key) & s.mask)
}

// AllowN implements sluice.Store.
func (s *Store) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	if err := s.check(ctx, key, lim, n); err != nil {
		return sluice.Decision{}, err
	}
	p := params(lim)
	sk := stateKey{key: key, kind: p.Kind, period: p.Period}
	sh := &s.shards[s.shardIndex(key)]
	sh.mu.Lock()
	now := s.now().UnixMicro()
	e := sh.m[sk]
	if e != nil && e.expires <= now {
		e.reset()
	}
	var r algo.Result
	if e == nil {
		var fresh entry
		r = fresh.step(now, p, int64(n), true)
		if r.Allowed && n > 0 {
			e = sh.insert(sk, now, s)
			*e = fresh
		}
	} else {
		r = e.step(now, p, int64(n), true)
	}
	sh.mu.Unlock()
	return decision(lim, r), nil
}

func (s *Store) check(ctx context.Context, key string, lim sluice.Limit, n int) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return sluice.ValidateRequest(key, lim, n)
}

// insert adds a new entry for sk, evicting when the shard is full.
// sh.mu is held.
func (sh *shard) insert(sk stateKey, now int64, s *Store) *entry {
	if sh.cap > 0 && len(sh.m) >= sh.cap {
		sh.evict(now, s)
	}
	e := new(entry)
	sh.m[sk] = e
	return e
}

// evictSample is how many entries a full shard looks at to choose a victim.
const evictSample = 16

func (sh *shard) evict(now int64, s *Store) {
	var victim stateKey
	best, seen, expired := int64(0), 0, 0
	for k, e := range sh.m { // map iteration starts at a random entry
		if e.expires <= now {
			delete(sh.m, k)
			expired++
		} else if seen == 0 || e.expires < best {
			victim, best = k, e.expires
		}
		seen++
		if seen >= evictSample {
			break
		}
	}
	if expired == 0 && seen > 0 {
		delete(sh.m, victim)
		s.evictions.Add(1)
	}
}

func (e *entry) reset() {
	e.a, e.b, e.c = 0, 0, 0
	if e.log != nil {
		e.log.Reset()
	}
}

// step applies one algorithm step to e; with commit false nothing changes
// but the dropping of expired log entries.
func (e *entry) step(now int64, p algo.Params, n int64, commit bool) algo.Result {
	var r algo.Result
	switch p.Kind {
	case algo.FixedWindow:
		var w algo.Window
		w, r = algo.FixedWindowStep(algo.Window{Start: e.a, Count: e.b}, now, p, n)
		if commit {
			e.a, e.b = w.Start, w.Count
		}
	case algo.SlidingWindow:
		var c algo.Counter
		c, r = algo.SlidingWindowStep(algo.Counter{Start: e.a, Prev: e.b, Cur: e.c}, now, p, n)
		if commit {
			e.a, e.b, e.c = c.Start, c.Prev, c.Cur
		}
	case algo.TokenBucket:
		var b algo.Bucket
		b, r = algo.TokenBucketStep(algo.Bucket{Deficit: e.a, Last: e.b}, now, p, n)
		if commit {
			e.a, e.b = b.Deficit, b.Last
		}
	case algo.GCRA:
		var t algo.TAT
		t, r = algo.GCRAStep(algo.TAT{At: e.a, Frac: e.b}, now, p, n)
		if commit {
			e.a, e.b = t.At, t.Frac
		}
	case algo.SlidingLog:
		if e.log == nil {
			if !commit || n == 0 {
				var empty algo.Log
				return algo.SlidingLogStep(&empty, now, p, n, false)
			}
			e.log = new(algo.Log)
		}
		r = algo.SlidingLogStep(e.log, now, p, n, commit)
	}
	if commit && r.Allowed && n > 0 {
		e.expires = e.expiry(p)
	}
	return r
}

// expiry returns the time (µs) at and after which e's state no longer
// matters, computed from the state itself rather than from the time of the
// call: an algorithm clamps a clock that ran backwards to the state's own
// time, so now + ResetAfter could end the state too early.
func (e *entry) expiry(p algo.Params) int64 {
	switch p.Kind {
	case algo.FixedWindow:
		return e.a + p.Period // window start + P
	case algo.SlidingWindow:
		if e.c > 0 {
			return e.a + 2*p.Period // the current count weighs until the next window ends
		}
		return e.a + p.Period
	case algo.TokenBucket:
		return e.b + (e.a+p.R-1)/p.R // last + ceil(deficit / R)
	case algo.GCRA:
		if e.b > 0 {
			return e.a + 1 // TAT + Frac/R, Frac > 0
		}
		return e.a
	case algo.SlidingLog:
		if e.log != nil && e.log.Len() > 0 {
			return e.log.Newest() + p.Period
		}
	}
	return 0
}

func params(l sluice.Limit) algo.Params {
	return algo.NewParams(algo.Kind(l.Algorithm), int64(l.Rate), int64(l.Burst), l.Period.Microseconds())
}

func decision(l sluice.Limit, r algo.Result) sluice.Decision {
	return sluice.Decision{
		Allowed:    r.Allowed,
		Limit:      l,
		Remaining:  int(r.Remaining),
		RetryAfter: time.Duration(r.RetryAfter) * time.Microsecond,
		ResetAfter: time.Duration(r.ResetAfter) * time.Microsecond,
	}
}

// String describes the store for logs.
func (s *Store) String() string {
	return fmt.Sprintf("memstore(%d shards, max keys %d)", len(s.shards), s.maxKeys)
}
