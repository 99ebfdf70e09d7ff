package tiered

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/validate"
	"github.com/sluicehq/sluice/memstore"
)

var (
	_ sluice.Store      = (*Store)(nil)
	_ sluice.MultiStore = (*Store)(nil)
)

// DefaultReturnTimeout bounds each Return.
const DefaultReturnTimeout = 250 * time.Millisecond

// DefaultCloseTimeout bounds all of Close's Returns together.
const DefaultCloseTimeout = 2 * time.Second

const numShards = 64

// returnWorkers bounds the concurrent Returns of a sweep or of Close (a
// pipelining client sends them together).
const returnWorkers = 64

// Store is a sluice.Store with a local tier in front of a shared store. It
// is safe for concurrent use; Close returns the unspent leased units and
// stops its sweeper.
type Store struct {
	shared sluice.Store
	leaser sluice.Leaser     // nil: no leases
	multi  sluice.MultiStore // nil when shared is not one
	clock  func() time.Time  // nil: the monotonic clock
	epoch  time.Time

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
	_      [32]byte
}

// ckey is the identity of a local state: the key and the whole limit, since
// a change of Rate or Burst changes every answer.
type ckey struct {
	key string
	lim sluice.Limit
}

type entry struct {
	// The denial cache: a request of exactly denyN units is denied until
	// denyUntil (local time).
	denyN     int
	denyUntil time.Duration
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
}

// grant is one lease: units admitted by the shared store at its time at.
type grant struct {
	units     int64
	size      int64         // units at the lease
	at        time.Time     // store time of the admission, for Return
	got       time.Duration // local time before the call
	expires   time.Duration // local: no spending at or after
	returnBy  time.Duration // local: a Return after this changes nothing (0: any time)
	remaining int           // the store's Remaining at the lease
	reset     time.Duration // the store's ResetAfter at the lease
	denied    int           // fetch only: the size of a denied lease
}

type giveBack struct {
	ck    ckey
	units int64
	at    time.Time
}

// Option configures a Store.
type Option func(*Store)

// WithLeases turns leases on (when the shared store implements
// sluice.Leaser): a key's lease is at most max units and at most fraction
// of the limit's capacity (rounded down, at least 1), and is spent for at
// most lifetime (less for the window algorithms: see the package
// documentation). Invalid values (max < 1, fraction not in (0, 1],
// lifetime <= 0) leave leases off.
func WithLeases(max int, fraction float64, lifetime time.Duration) Option {
	return func(s *Store) {
		if max >= 1 && fraction > 0 && fraction <= 1 && lifetime > 0 {
			s.leaseMax, s.leaseFraction, s.lifetime = max, fraction, lifetime
		}
	}
}

// WithRefreshAhead takes a key's next lease in the background once its
// current lease is down to lowWater of its size (for example 0.25), so
// that under steady demand no caller waits for the shared store: the
// caller that spends the last unit finds the next lease already there. A
// key then holds up to two leases at once, so up to twice the units sit
// unspent in this process; the shared store counts them all, so the fleet
// stays exact. lowWater must be in (0, 1); other values leave it off. It
// needs WithLeases.
func WithRefreshAhead(lowWater float64) Option {
	return func(s *Store) {
		if lowWater > 0 && lowWater < 1 {
			s.refresh = lowWater
		}
	}
}

// WithStampedLeases also leases SlidingLog, TokenBucket and GCRA limits
// (by default only FixedWindow and SlidingWindow are leased, the others
// deciding through the denial cache alone). The shared store counts their
// units from the lease's time, so its count stays exact over those stamps,
// but a unit spent up to the lease's lifetime L after its stamp widens the
// bound in real time: at most Rate in any interval of length Period − L
// (SlidingLog), at most Burst + Rate·(t+L)/Period in an interval t
// (buckets). See the package documentation.
func WithStampedLeases() Option { return func(s *Store) { s.stamped = true } }

// WithApproximateLocalShare turns on the approximate local tier: a local
// limiter at fraction f of each limit admits first, uncounted by the
// shared store. NOT exact: the fleet may exceed the quota by the sum of the
// local shares (see the package documentation). f must be in (0, 1].
func WithApproximateLocalShare(f float64) Option {
	return func(s *Store) {
		if f > 0 && f <= 1 {
			s.share = f
		}
	}
}

// DefaultMaxKeys bounds the (key, limit) states kept locally.
const DefaultMaxKeys = 1 << 20

// WithMaxKeys bounds the (key, limit) states kept locally (default
// DefaultMaxKeys; idle ones are forgotten after a second or two lifetimes).
// When full, a new key's decisions go to the shared store directly, with
// neither a cached denial nor a lease, until room is made: exact, only
// slower.
func WithMaxKeys(n int) Option {
	return func(s *Store) {
		if n > 0 {
			s.shardCap = max(n/numShards, 1)
		}
	}
}

// WithReturnTimeout bounds each Return (default DefaultReturnTimeout).
func WithReturnTimeout(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.returnTimeout = d
		}
	}
}

// WithCloseTimeout bounds Close's Returns together (default
// DefaultCloseTimeout): a Close on an unreachable store takes at most
// about this long.
func WithCloseTimeout(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.closeTimeout = d
		}
	}
}

// WithLogger sets the logger for failed returns (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(s *Store) {
		if l != nil {
			s.log = l
		}
	}
}

// WithClock sets the local clock that times cached denials and leases
// (default: the monotonic clock). Tests pass the fake clock of the shared
// store.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.clock = now }
}

// New returns a Store in front of shared and starts its sweeper. Close
// does not close shared, which the caller owns.
func New(shared sluice.Store, opts ...Option) *Store {
	s := &Store{
		shared:        shared,
		returnTimeout: DefaultReturnTimeout,
		closeTimeout:  DefaultCloseTimeout,
		shardCap:      DefaultMaxKeys / numShards,
		log:           slog.New(slog.DiscardHandler),
		seed:          maphash.MakeSeed(),
		stop:          make(chan struct{}),
		done:          make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	if s.clock != nil {
		s.epoch = s.clock()
	} else {
		s.epoch = time.Now()
	}
	if l, ok := shared.(sluice.Leaser); ok && s.leaseMax > 0 {
		s.leaser = l
	}
	s.multi, _ = shared.(sluice.MultiStore)
	if s.share > 0 {
		var mo []memstore.Option
		if s.clock != nil {
			mo = append(mo, memstore.WithClock(s.clock))
		}
		s.local = memstore.New(mo...)
	}
	s.sweepEvery, s.idle = time.Second, time.Second
	if s.leaser != nil {
		s.sweepEvery = min(max(s.lifetime/4, time.Millisecond), time.Second)
		s.idle = max(2*s.lifetime, time.Second)
	}
	for i := range s.shards {
		s.shards[i].m = make(map[ckey]*entry)
	}
	go s.sweeper()
	return s
}

// Stats is a snapshot of a Store's counters.
type Stats struct {
	// Local counts decisions made without a shared call: lease spends,
	// cached denials and local-share admissions.
	Local int64
	// CachedDenials counts the denials among Local.
	CachedDenials int64
	// Shared counts calls to the shared store: AllowN, AllowMulti, Lease
	// and Return.
	Shared int64
	// Leases counts Lease calls that were granted, Leased their units.
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
		s.shared, s.leaser != nil, s.leaseMax, s.leaseFraction, s.lifetime, s.share)
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

// AllowN implements sluice.Store.
func (s *Store) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	if s.closed.Load() {
		return sluice.Decision{}, sluice.ErrClosed
	}
	if err := validate.Request(key, lim, n); err != nil {
		return sluice.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return sluice.Decision{}, err
	}
	if n == 0 {
		return s.peek(ctx, key, lim)
	}
	ck := ckey{key, lim}
	sh := s.shardOf(key)
	if d, ok := s.fast(sh, ck, n); ok {
		return d, nil
	}
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return sluice.Decision{}, sluice.ErrClosed
	}
	if !s.leasable(lim) {
		return s.direct(ctx, sh, ck, n)
	}
	return s.viaLease(ctx, sh, ck, n)
}

// leasable reports whether lim's decisions go through leases.
func (s *Store) leasable(lim sluice.Limit) bool {
	if s.leaser == nil {
		return false
	}
	return s.stamped || lim.Algorithm == sluice.FixedWindow || lim.Algorithm == sluice.SlidingWindow
}

// AllowLocal decides from the local tier alone, without a shared call: a
// lease spend, a cached denial, or (when on) an admission of the
// approximate local share. It reports false when only the shared store can
// decide (and for invalid input, n = 0 and a closed store). failover uses it
// (failover.LocalFirst) to skip its deadline for local decisions, and keeps
// spending units leased before an outage while its breaker is open.
func (s *Store) AllowLocal(key string, lim sluice.Limit, n int) (sluice.Decision, bool) {
	if n == 0 || s.closed.Load() || validate.Request(key, lim, n) != nil {
		return sluice.Decision{}, false
	}
	return s.fast(s.shardOf(key), ckey{key, lim}, n)
}

// fast is the local tier: the local share, the denial cache, the lease.
func (s *Store) fast(sh *shard, ck ckey, n int) (sluice.Decision, bool) {
	if s.local != nil {
		if d, ok := s.localShare(sh, ck, n); ok {
			return d, true
		}
	}
	now := s.mono()
	sh.mu.Lock()
	e := sh.m[ck]
	if e == nil {
		sh.mu.Unlock()
		return sluice.Decision{}, false
	}
	e.lastUse = now
	if d, ok := e.cachedDenial(now, n); ok {
		sh.local++
		sh.denied++
		sh.mu.Unlock()
		return d, true
	}
	if d, ok := s.take(e, ck, now, n); ok {
		e.demand += int64(n)
		sh.local++
		k := s.refreshSize(e, now, ck.lim)
		sh.mu.Unlock()
		if k > 0 {
			s.startRefresh(ck, k)
		}
		return d, true
	}
	sh.mu.Unlock()
	return sluice.Decision{}, false
}

// take spends n units from the key's lease, moving on to the lease taken
// ahead when the current one cannot serve n (the current one's units, if
// any, are queued for return).
func (s *Store) take(e *entry, ck ckey, now time.Duration, n int) (sluice.Decision, bool) {
	if d, ok := e.spend(now, n, ck.lim); ok {
		return d, true
	}
	if e.next.units < int64(n) || now >= e.next.expires {
		return sluice.Decision{}, false
	}
	if g := e.g; g.units > 0 && (g.returnBy == 0 || now < g.returnBy) {
		s.pendMu.Lock()
		s.pending = append(s.pending, giveBack{ck, g.units, g.at})
		s.pendMu.Unlock()
	}
	e.g, e.next = e.next, grant{}
	return e.spend(now, n, ck.lim)
}

// refreshSize is the size of the next lease to take ahead for e, or 0 when
// none is due: refresh ahead is on, e's lease is down to the low water,
// and no lease is already ahead or on its way. It marks e refreshing. The
// shard's lock is held.
func (s *Store) refreshSize(e *entry, now time.Duration, lim sluice.Limit) int {
	// A lease of one request's units (k = n: little demand) is not
	// refreshed: the next request may never come.
	if s.refresh == 0 || e.refreshing || e.refreshOff || e.fetching != nil || e.next.units > 0 ||
		e.g.size < 2 || float64(e.g.units) > s.refresh*float64(e.g.size) || s.closed.Load() {
		return 0
	}
	e.refreshing = true
	return s.size(e, now, 1, lim)
}

// startRefresh takes the next lease of ck's key in the background.
func (s *Store) startRefresh(ck ckey, k int) {
	s.refreshing.Add(1)
	go func() {
		defer s.refreshing.Done()
		s.refreshLease(ck, k)
	}()
}

// refreshLease leases k units for ck ahead of need and keeps them as the
// key's next lease (or gives them back when the key no longer wants them).
// It holds the store's life read-lock, so that Close waits for it and then
// returns what it kept.
func (s *Store) refreshLease(ck ckey, k int) {
	sh := s.shardOf(ck.key)
	s.life.RLock()
	defer s.life.RUnlock()
	var (
		d   sluice.Decision
		at  time.Time
		err = sluice.ErrClosed
	)
	sent := s.mono()
	if !s.closed.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), s.returnTimeout)
		d, at, err = s.leaser.Lease(ctx, ck.key, ck.lim, k)
		cancel()
		s.shared_.Add(1)
	}
	granted := err == nil && d.Allowed
	if granted {
		s.leases.Add(1)
		s.leased.Add(int64(k))
		s.refreshes.Add(1)
	}
	sh.mu.Lock()
	e := sh.m[ck]
	if e != nil {
		e.refreshing = false
		e.refreshOff = !granted
		if granted && e.next.units == 0 {
			e.next = s.newGrant(ck.lim, k, at, sent, d)
			granted = false // kept
		}
	}
	sh.mu.Unlock()
	if granted { // the entry is gone: nobody will spend them
		s.giveBack(context.Background(), giveBack{ck, int64(k), at}, true)
	}
}

// localShare admits from the approximate local share, when it can.
func (s *Store) localShare(sh *shard, ck ckey, n int) (sluice.Decision, bool) {
	l, ok := shareLimit(ck.lim, s.share)
	if !ok || n > l.Capacity() {
		return sluice.Decision{}, false
	}
	d, err := s.local.AllowN(context.Background(), ck.key, l, n)
	if err != nil || !d.Allowed {
		return sluice.Decision{}, false
	}
	sh.mu.Lock()
	sh.local++
	sh.mu.Unlock()
	d.Limit = ck.lim
	return d, true
}

// shareLimit is the approximate local share f of lim.
func shareLimit(lim sluice.Limit, f float64) (sluice.Limit, bool) {
	l := lim
	l.Rate = max(int(float64(lim.Rate)*f), 1)
	if lim.Burst > 0 {
		l.Burst = max(int(float64(lim.Burst)*f), 1)
	}
	return l, l.Validate() == nil
}

// direct asks the shared store and caches a denial.
func (s *Store) direct(ctx context.Context, sh *shard, ck ckey, n int) (sluice.Decision, error) {
	sent := s.mono()
	d, err := s.shared.AllowN(ctx, ck.key, ck.lim, n)
	s.shared_.Add(1)
	if err != nil {
		return d, err
	}
	sh.mu.Lock()
	e := sh.m[ck]
	if e == nil && !d.Allowed && len(sh.m) < s.shardCap {
		e = &entry{}
		sh.m[ck] = e
	}
	if e != nil {
		e.record(n, sent, d)
		e.lastUse = sent
	}
	sh.mu.Unlock()
	return d, nil
}

// record caches a denial of n, or clears the cache on an admission.
func (e *entry) record(n int, sent time.Duration, d sluice.Decision) {
	if d.Allowed {
		e.denyN = 0
		return
	}
	e.denyN, e.denySent, e.denyUntil, e.deny = n, sent, sent+d.RetryAfter, d
}

// cachedDenial denies a request of the cached size until the cached
// RetryAfter has passed.
func (e *entry) cachedDenial(now time.Duration, n int) (sluice.Decision, bool) {
	if e.denyN != n || now >= e.denyUntil {
		return sluice.Decision{}, false
	}
	d := e.deny
	d.RetryAfter = e.denyUntil - now
	d.ResetAfter = max(d.ResetAfter-(now-e.denySent), 0)
	if a := d.Limit.Algorithm; a == sluice.TokenBucket || a == sluice.GCRA {
		// The bucket refills at Rate per Period and holds n tokens at
		// denyUntil: n - ceil(wait × Rate/Period) of them now (never more
		// than it holds, at worst one fewer).
		lim := d.Limit
		wait := d.RetryAfter.Microseconds()
		p := lim.Period.Microseconds()
		g := gcd(int64(lim.Rate), p)
		r, p := int64(lim.Rate)/g, p/g // exact below 2^53 for valid limits
		if wait <= (1<<62)/r {
			missing := (wait*r + p - 1) / p
			d.Remaining = min(max(d.Remaining, n-int(missing)), n-1)
		}
	}
	return d, true
}

// spend takes n units from the key's lease when it has them.
func (e *entry) spend(now time.Duration, n int, lim sluice.Limit) (sluice.Decision, bool) {
	g := &e.g
	if g.units < int64(n) || now >= g.expires {
		return sluice.Decision{}, false
	}
	g.units -= int64(n)
	return sluice.Decision{
		Allowed:    true,
		Limit:      lim,
		Remaining:  min(g.remaining+int(g.units), lim.Capacity()),
		ResetAfter: max(g.reset-(now-g.got), 0),
	}, true
}

// viaLease decides through leases: spend from the key's lease, wait for a
// lease another caller is taking, or take one.
func (s *Store) viaLease(ctx context.Context, sh *shard, ck ckey, n int) (sluice.Decision, error) {
	counted := false
	for {
		now := s.mono()
		sh.mu.Lock()
		e := sh.m[ck]
		if e == nil {
			if len(sh.m) >= s.shardCap {
				sh.mu.Unlock()
				return s.direct(ctx, sh, ck, n)
			}
			e = &entry{}
			sh.m[ck] = e
		}
		e.lastUse = now
		if !counted {
			e.demand += int64(n)
			counted = true
		}
		if d, ok := e.cachedDenial(now, n); ok {
			sh.local++
			sh.denied++
			sh.mu.Unlock()
			return d, nil
		}
		if d, ok := s.take(e, ck, now, n); ok {
			sh.local++
			k := s.refreshSize(e, now, ck.lim)
			sh.mu.Unlock()
			if k > 0 {
				s.startRefresh(ck, k)
			}
			return d, nil
		}
		if ch := e.fetching; ch != nil {
			sh.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return sluice.Decision{}, ctx.Err()
			}
		}
		ch := make(chan struct{})
		e.fetching = ch
		old := e.g
		e.g = grant{}
		k := s.size(e, now, n, ck.lim)
		sh.mu.Unlock()

		d, g, err := s.fetch(ctx, ck, n, k, old, now)

		sh.mu.Lock()
		e.fetching = nil
		close(ch)
		if err == nil {
			if d.Allowed {
				e.g = g
				e.denyN = 0
				e.refreshOff = false
			} else {
				e.record(g.denied, now, d)
			}
		}
		sh.mu.Unlock()
		return d, err
	}
}

// size is the number of units to lease for a request of n: the demand per
// lifetime (an exponentially weighted average), within [n, bound].
func (s *Store) size(e *entry, now time.Duration, n int, lim sluice.Limit) int {
	if e.leases > 0 {
		el := max(now-e.lastLease, time.Microsecond)
		perLife := float64(e.demand) * float64(s.lifetime) / float64(el)
		if e.leases == 1 {
			e.ewma = perLife // the first measure
		} else {
			e.ewma = 0.5*e.ewma + 0.5*perLife
		}
	}
	e.leases = min(e.leases+1, 2)
	e.lastLease, e.demand = now, 0
	bound := max(min(s.leaseMax, int(s.leaseFraction*float64(lim.Capacity()))), 1)
	k := min(int(math.Ceil(e.ewma)), bound)
	return max(k, n)
}

// fetch gives back old's units and leases k units (k >= n), spending n.
// When the store denies k > n, it asks once for what the store's Remaining
// says is free (or n alone, for n's exact RetryAfter). On a denial the
// returned grant's denied field is the size denied.
func (s *Store) fetch(ctx context.Context, ck ckey, n, k int, old grant, sent time.Duration) (sluice.Decision, grant, error) {
	if old.units > 0 && (old.returnBy == 0 || sent < old.returnBy) {
		s.giveBack(ctx, giveBack{ck, old.units, old.at}, true)
	}
	for attempt := 0; ; attempt++ {
		d, at, err := s.leaser.Lease(ctx, ck.key, ck.lim, k)
		s.shared_.Add(1)
		if err != nil {
			return d, grant{}, err
		}
		if d.Allowed {
			s.leases.Add(1)
			s.leased.Add(int64(k))
			g := s.newGrant(ck.lim, k-n, at, sent, d)
			g.size = int64(k)
			d.Remaining = min(d.Remaining+k-n, ck.lim.Capacity())
			return d, g, nil
		}
		if k == n {
			return d, grant{denied: n}, nil
		}
		next := n
		if attempt == 0 && d.Remaining >= n {
			next = min(d.Remaining, k)
		}
		if next == k { // raced: the store's Remaining moved
			next = n
		}
		k = next
	}
}

// newGrant builds the grant of a lease of units (left after the spend of
// the request) admitted at the store's time at.
func (s *Store) newGrant(lim sluice.Limit, units int, at time.Time, sent time.Duration, d sluice.Decision) grant {
	g := grant{units: int64(units), size: int64(units), at: at, got: sent, expires: sent + s.lifetime, remaining: d.Remaining, reset: d.ResetAfter}
	switch lim.Algorithm {
	case sluice.FixedWindow, sluice.SlidingWindow:
		// The lease's units count in the store's window of at: spend them
		// only within it, measured locally from before the call (never later
		// than the store's window end).
		p := lim.Period.Microseconds()
		us := at.UnixMicro()
		left := time.Duration(p-mod(us, p)) * time.Microsecond
		g.expires = min(g.expires, sent+left)
		g.returnBy = sent + left
		if lim.Algorithm == sluice.SlidingWindow {
			g.returnBy += lim.Period // still weighs in the next window
		}
	case sluice.SlidingLog:
		g.returnBy = sent + lim.Period
	}
	return g
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// peek asks the shared store, adding the units this process holds.
func (s *Store) peek(ctx context.Context, key string, lim sluice.Limit) (sluice.Decision, error) {
	d, err := s.shared.AllowN(ctx, key, lim, 0)
	s.shared_.Add(1)
	if err != nil || s.leaser == nil {
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

// AllowMulti implements sluice.MultiStore when the shared store does
// (otherwise it returns an error wrapping sluice.ErrMultiUnsupported). It
// always asks the shared store: an all-or-nothing decision over several
// keys is not served from one key's lease.
func (s *Store) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	if s.closed.Load() {
		return nil, sluice.ErrClosed
	}
	for i, rq := range reqs {
		if err := validate.Request(rq.Key, rq.Limit, rq.N); err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.multi == nil {
		return nil, fmt.Errorf("%w: shared store %T", sluice.ErrMultiUnsupported, s.shared)
	}
	s.shared_.Add(1)
	return s.multi.AllowMulti(ctx, reqs)
}

// giveBack returns units; on a caller's path (queue true) a failure queues
// them for the sweeper.
//
// Every unit goes back: for TokenBucket and GCRA the store's Return credits
// n units less what has refilled since the lease's time at (internal/algo's
// bucketCredit), so it never credits the refill twice. (tiered once
// discounted the refill itself as well, written before the stores did.)
func (s *Store) giveBack(ctx context.Context, r giveBack, queue bool) {
	n := r.units
	if n <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.returnTimeout)
	err := s.leaser.Return(ctx, r.ck.key, r.ck.lim, int(n), r.at)
	cancel()
	s.shared_.Add(1)
	if err == nil {
		s.returned.Add(n)
		return
	}
	if queue && !s.closed.Load() {
		s.pendMu.Lock()
		s.pending = append(s.pending, r)
		s.pendMu.Unlock()
		return
	}
	s.returnErrors.Add(1)
	s.log.Warn("tiered: return of leased units failed; they stay counted until they expire", "key", r.ck.key, "limit", r.ck.lim, "units", r.units, "err", err)
}

func (s *Store) sweeper() {
	defer close(s.done)
	t := time.NewTicker(s.sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			rets := s.collect(false)
			if len(rets) > 0 {
				s.giveBackAll(rets, nil)
			}
		}
	}
}

// collect ends the leases that have ended (all of them when all is true),
// takes the pending returns, and forgets idle entries.
func (s *Store) collect(all bool) []giveBack {
	now := s.mono()
	s.pendMu.Lock()
	rets := s.pending
	s.pending = nil
	s.pendMu.Unlock()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for ck, e := range sh.m {
			if e.fetching != nil {
				continue
			}
			for _, g := range []*grant{&e.g, &e.next} {
				if g.units > 0 && (all || now >= g.expires) {
					if g.returnBy == 0 || now < g.returnBy {
						rets = append(rets, giveBack{ck, g.units, g.at})
					}
					*g = grant{}
				}
			}
			if e.g.units == 0 && e.next.units == 0 && !e.refreshing && now >= e.denyUntil && now-e.lastUse >= s.idle {
				delete(sh.m, ck)
			}
		}
		sh.mu.Unlock()
	}
	return rets
}

// giveBackAll returns rets concurrently, each under its own timeout, or
// all under ctx when it is not nil.
func (s *Store) giveBackAll(rets []giveBack, ctx context.Context) {
	sem := make(chan struct{}, returnWorkers)
	var wg sync.WaitGroup
	for _, r := range rets {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, cancel := ctx, context.CancelFunc(func() {})
			if c == nil {
				c, cancel = context.WithTimeout(context.Background(), s.returnTimeout)
			}
			defer cancel()
			s.giveBack(c, r, false)
		}()
	}
	wg.Wait()
}

// Close stops the sweeper, waits for the calls in flight, and returns every
// unspent leased unit (each within the return timeout, all within the close
// timeout). Later calls return
// sluice.ErrClosed. It does not close the shared store. The error reports
// returns that failed.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		<-s.done
		s.life.Lock()
		rets := s.collect(true)
		if s.leaser != nil && len(rets) > 0 {
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
