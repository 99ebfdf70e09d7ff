package tiered

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/tick"
	"github.com/sluicehq/sluice/internal/validate"
	"github.com/sluicehq/sluice/memstore"
)

var _ sluice.FullStore = (*Store)(nil)

const numShards = 64

// returnWorkers bounds the concurrent Returns of a sweep or of Close (a
// pipelining client sends them together).
const returnWorkers = 64

// Store is a sluice.Store with a local tier in front of a shared store. It
// is safe for concurrent use; Close returns the unspent leased units and
// stops its sweeper.
type Store struct {
	shared sluice.FullStore // lifted
	// noReserve is set once the shared store reported that it cannot
	// reserve (sluice.ErrReserveUnsupported): no leases from then on.
	noReserve atomic.Bool
	clock     func() time.Time // nil: the monotonic clock
	epoch     time.Time

	leaseMax      int
	leaseFraction float64
	refresh       float64 // refresh-ahead low water, a fraction of a lease; 0: off
	stamped       bool    // lease SlidingLog, TokenBucket and GCRA too
	lifetime      time.Duration
	share         float64
	local         *memstore.Store // the approximate local share; nil when off
	returnTimeout time.Duration
	closeTimeout  time.Duration
	log           *slog.Logger
	sweepEvery    time.Duration
	idle          time.Duration
	shardCap      int // entries per shard

	seed   maphash.Seed
	shards [numShards]shard

	life      sync.RWMutex // slow paths read-lock it; Close write-locks it
	closed    atomic.Bool
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error

	pendMu  sync.Mutex
	pending []giveBack // leftovers whose return failed on a caller's path

	shared_, leases, leased, returned, returnErrors, refreshes atomic.Int64
	refreshing                                                 sync.WaitGroup // refreshes in flight
}

type shard struct {
	mu     sync.Mutex
	m      map[ckey]*entry
	local  int64 // decisions served locally
	denied int64 // of them, cached denials
	// refunds counts the refunds (Return) begun on the shard's keys: a
	// denial decided while one was on its way may predate it, and is not
	// cached.
	refunds atomic.Uint64
	// resetsBegun and resetsDone count the resets (Reset) of the shard's
	// keys begun and done: a denial decided while one was on its way is
	// not cached (resetMark, resetSince).
	resetsBegun, resetsDone atomic.Uint64
	_                       [8]byte
}

// ckey is the identity of a local state: the key and the whole limit, since
// a change of Rate or Burst changes every answer.
type ckey struct {
	key string
	lim sluice.Limit
}

type entry struct {
	// The denial cache: a request of exactly denyN units is denied until
	// denyStop (local time), the store's RetryAfter denyUntil or
	// MaxCachedDenial after the call was sent, whichever is sooner.
	denyN     int
	denyUntil time.Duration
	denyStop  time.Duration
	denySent  time.Duration
	deny      sluice.Decision

	g        grant
	fetching chan struct{} // non-nil while one caller leases for the key

	// Refresh ahead: the next lease, taken in the background when g runs
	// low; refreshing while that call is in flight; refreshOff after a
	// refresh was denied or failed, until a caller's own lease succeeds
	// (so that an exhausted or unreachable store is not asked on every
	// spend).
	next       grant
	refreshing bool
	refreshOff bool

	demand    int64 // units asked since lastLease
	lastLease time.Duration
	leases    int     // leases taken, counting to 2
	ewma      float64 // units asked per lifetime
	lastUse   time.Duration
	dead      bool // removed from its shard: look the key up again

	// noLeaseUntil (local time): a degraded Reserve asked to decide without
	// leases until then, each decision by the shared store's AllowN.
	noLeaseUntil time.Duration
}

// New returns a Store in front of shared and starts its sweeper, or an
// error naming the first invalid option. Close does not close shared,
// which the caller owns.
func New(shared sluice.Store, opts ...Option) (*Store, error) {
	if shared == nil {
		return nil, errors.New("tiered: New(nil): want a shared store")
	}
	s := &Store{
		shared:        sluice.Lift(shared),
		returnTimeout: DefaultReturnTimeout,
		closeTimeout:  DefaultCloseTimeout,
		shardCap:      DefaultMaxKeys / numShards,
		log:           slog.New(slog.DiscardHandler),
		seed:          maphash.MakeSeed(),
		stop:          make(chan struct{}),
		done:          make(chan struct{}),
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if err := s.checkOptions(); err != nil {
		return nil, err
	}
	if s.clock != nil {
		s.epoch = s.clock()
	} else {
		s.epoch = time.Now()
	}
	if s.share > 0 {
		var mo []memstore.Option
		if s.clock != nil {
			mo = append(mo, memstore.WithClock(s.clock))
		}
		s.local = memstore.New(mo...)
	}
	s.sweepEvery, s.idle = time.Second, time.Second
	if s.leaseMax > 0 {
		s.sweepEvery = min(max(s.lifetime/4, time.Millisecond), time.Second)
		s.idle = max(2*s.lifetime, time.Second)
	}
	for i := range s.shards {
		s.shards[i].m = make(map[ckey]*entry)
	}
	go tick.Every(s.stop, s.done, s.sweepEvery, s.sweep)
	return s, nil
}

// Stats is a snapshot of a Store's counters.
type Stats struct {
	// Local counts decisions made without a shared call: lease spends,
	// cached denials and local-share admissions.
	Local int64
	// CachedDenials counts the denials among Local.
	CachedDenials int64
	// Shared counts calls to the shared store: AllowN, AllowMulti, Reserve
	// and Return.
	Shared int64
	// Leases counts the leases granted (Reserve calls that admitted),
	// Leased their units.
	Leases, Leased int64
	// Refreshes counts the granted leases among Leases that were taken
	// ahead, in the background (WithRefreshAhead).
	Refreshes int64
	// Returned counts units given back; ReturnErrors the Returns that
	// failed (their units stay counted until they expire in the store).
	Returned, ReturnErrors int64
}

// Stats returns the Store's counters.
func (s *Store) Stats() Stats {
	st := Stats{
		Shared:       s.shared_.Load(),
		Leases:       s.leases.Load(),
		Leased:       s.leased.Load(),
		Refreshes:    s.refreshes.Load(),
		Returned:     s.returned.Load(),
		ReturnErrors: s.returnErrors.Load(),
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Local += sh.local
		st.CachedDenials += sh.denied
		sh.mu.Unlock()
	}
	return st
}

// String describes the store for logs.
func (s *Store) String() string {
	return fmt.Sprintf("tiered(%v, leases %v max %d fraction %g lifetime %v, local share %g)",
		s.shared, s.leasing(), s.leaseMax, s.leaseFraction, s.lifetime, s.share)
}

// mono is the local time since the store's epoch.
func (s *Store) mono() time.Duration {
	if s.clock != nil {
		return s.clock().Sub(s.epoch)
	}
	return time.Since(s.epoch)
}

func (s *Store) shardOf(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)%numShards]
}

// AllowN implements sluice.Store. A request that the local tier can decide
// (a lease spend, a cached denial, the local share) is decided here without
// a shared call; every other goes to the shared store, which validates it.
//
// A limit that counts every hit (sluice.CountAll) is always decided by the
// shared store: its charges, denied ones included, must all reach the
// shared count, which neither a lease nor a cached denial would do.
func (s *Store) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	if n < 0 {
		return sluice.Decision{}, validate.Cost(lim, n)
	}
	if s.closed.Load() {
		return sluice.Decision{}, sluice.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return sluice.Decision{}, err
	}
	if lim.Counting == sluice.CountAll {
		s.shared_.Add(1)
		return s.shared.AllowN(ctx, key, lim, n)
	}
	if n == 0 {
		return s.peek(ctx, key, lim)
	}
	ck := ckey{key, lim}
	sh := s.shardOf(key)
	if s.local != nil {
		if d, ok := s.localShare(sh, ck, n); ok {
			return d, nil
		}
	}
	now := s.mono()
	sh.mu.Lock()
	e := sh.m[ck] // the one lookup of the decision: later steps keep e
	noLease := false
	if e != nil {
		e.lastUse = now
		if d, k, ok := s.fromEntry(sh, e, ck, now, n, true); ok {
			sh.mu.Unlock()
			if k > 0 {
				s.startRefresh(ck, k)
			}
			return d, nil
		}
		noLease = now < e.noLeaseUntil
	}
	sh.mu.Unlock()
	return s.slow(ctx, sh, ck, e, n, noLease)
}

// fromEntry decides from e alone: a cached denial, or a spend from its
// lease (counting n in its demand when count is true). It also returns the
// size of a lease to take ahead, 0 for none. sh.mu is held.
func (s *Store) fromEntry(sh *shard, e *entry, ck ckey, now time.Duration, n int, count bool) (sluice.Decision, int, bool) {
	if d, ok := e.cachedDenial(now, n); ok {
		sh.local++
		sh.denied++
		return d, 0, true
	}
	d, ok := s.take(e, ck, now, n)
	if !ok {
		return sluice.Decision{}, 0, false
	}
	if count {
		e.demand += int64(n)
	}
	sh.local++
	return d, s.refreshSize(e, now, ck.lim), true
}

// slow decides through the shared store, e being ck's entry as the fast
// path found it (nil when it had none); noLease when a degraded Reserve asked
// for none for now.
func (s *Store) slow(ctx context.Context, sh *shard, ck ckey, e *entry, n int, noLease bool) (sluice.Decision, error) {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return sluice.Decision{}, sluice.ErrClosed
	}
	if noLease || !s.leasable(ck.lim) {
		return s.direct(ctx, sh, ck, e, n)
	}
	return s.viaLease(ctx, sh, ck, e, n)
}

// live returns ck's entry: e while it is in the shard, otherwise the
// shard's (created when there is room), or nil. sh.mu is held.
func (s *Store) live(sh *shard, ck ckey, e *entry) *entry {
	if e != nil && !e.dead {
		return e
	}
	if e = sh.m[ck]; e == nil && len(sh.m) < s.shardCap {
		e = &entry{}
		sh.m[ck] = e
	}
	return e
}

// forget removes e from its shard. sh.mu is held.
func forget(sh *shard, ck ckey, e *entry) {
	delete(sh.m, ck)
	e.dead = true
}

// leasing reports whether the store takes leases: WithLeases, and a shared
// store that has not said it cannot reserve.
func (s *Store) leasing() bool { return s.leaseMax > 0 && !s.noReserve.Load() }

// leasable reports whether lim's decisions go through leases.
func (s *Store) leasable(lim sluice.Limit) bool {
	if !s.leasing() {
		return false
	}
	return s.stamped || lim.Algorithm == sluice.FixedWindow || lim.Algorithm == sluice.SlidingWindow
}

// peek asks the shared store, adding the units this process holds (unless
// the answer is degraded: its Remaining is unknown).
func (s *Store) peek(ctx context.Context, key string, lim sluice.Limit) (sluice.Decision, error) {
	d, err := s.shared.AllowN(ctx, key, lim, 0)
	s.shared_.Add(1)
	if err != nil || !s.leasing() || d.Degraded {
		return d, err
	}
	now := s.mono()
	sh := s.shardOf(key)
	sh.mu.Lock()
	if e := sh.m[ckey{key, lim}]; e != nil && now < e.g.expires {
		d.Remaining = min(d.Remaining+int(e.g.units), lim.Capacity())
	}
	sh.mu.Unlock()
	return d, nil
}

// Reserve implements sluice.Reserver by passing the call to the shared
// store, so that a caller can reserve units and settle them later
// (sluice.Limiter.Reserve); the local tier's own leases are apart. A
// shared store that cannot reserve returns its
// sluice.ErrReserveUnsupported, passed on as is.
func (s *Store) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	if s.closed.Load() {
		return sluice.Decision{}, time.Time{}, sluice.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return sluice.Decision{}, time.Time{}, err
	}
	s.shared_.Add(1)
	return s.shared.Reserve(ctx, key, lim, n)
}

// Lease is Reserve's former name.
//
// Deprecated: use Reserve.
func (s *Store) Lease(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	return s.Reserve(ctx, key, lim, n)
}

// Return implements sluice.Reserver by passing the refund to the shared
// store (a zero at is the shared store's time now). The key's cached
// denials, under lim in either Counting, are dropped, so that the next
// request sees the refund at once. A shared store that cannot reserve
// returns its sluice.ErrReserveUnsupported.
func (s *Store) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	s.shared_.Add(1)
	sh := s.shardOf(key)
	sh.refunds.Add(1) // before: a denial decided from now on may predate it
	err := s.shared.Return(ctx, key, lim, n, at)
	// Dropped after the refund: a denial cached while it was in flight
	// may predate it.
	s.dropDenials(key, lim)
	return err
}

// dropDenials forgets the cached denials of key under lim, counting
// admitted hits or every hit.
func (s *Store) dropDenials(key string, lim sluice.Limit) {
	sh := s.shardOf(key)
	sh.mu.Lock()
	for _, c := range [...]sluice.Counting{sluice.CountAdmitted, sluice.CountAll} {
		if e := sh.m[ckey{key, lim.WithCounting(c)}]; e != nil {
			e.denyN = 0
		}
	}
	sh.mu.Unlock()
}

// AllowMulti implements sluice.MultiStore by asking the shared store (its
// sluice.ErrMultiUnsupported, when it cannot, passed on as is): an
// all-or-nothing decision over several keys is not served from one key's
// lease.
func (s *Store) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	if s.closed.Load() {
		return nil, sluice.ErrClosed
	}
	s.shared_.Add(1)
	return s.shared.AllowMulti(ctx, reqs)
}

// Close stops the sweeper, waits for the calls in flight, and returns every
// unspent leased unit (each within the return timeout, all within the close
// timeout). Later calls return sluice.ErrClosed. It does not close the
// shared store. The error reports returns that failed.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		<-s.done
		s.life.Lock()
		rets := s.collect(true)
		if len(rets) > 0 {
			before := s.returnErrors.Load()
			ctx, cancel := context.WithTimeout(context.Background(), s.closeTimeout)
			s.giveBackAll(rets, ctx)
			cancel()
			if failed := s.returnErrors.Load() - before; failed > 0 {
				s.closeErr = fmt.Errorf("tiered: close: %d of %d returns of leased units failed", failed, len(rets))
			}
		}
		s.life.Unlock()
		s.refreshing.Wait() // refreshes that started too late to lease anything
		if s.local != nil {
			s.closeErr = errors.Join(s.closeErr, s.local.Close())
		}
	})
	return s.closeErr
}
