package region

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/validate"
)

var _ sluice.FullStore = (*Store)(nil)

const numShards = 32

// maxFetches bounds the calls to the home store in flight at once.
const maxFetches = 256

// Store decides from units granted by a home store (a sluice.Granter),
// taken ahead of need in the background; see the package documentation.
// It is safe for concurrent use. Close gives back what it can and stops
// its goroutines.
type Store struct {
	global  sluice.FullStore // lifted
	granter sluice.Granter
	holder  string
	cfg     config
	epoch   time.Time
	limits  validate.Limits
	seed    maphash.Seed
	shards  [numShards]shard
	link    link

	closed   atomic.Bool
	life     sync.RWMutex // fetches read-lock it; Close write-locks it
	fetchWG  sync.WaitGroup
	sem      chan struct{} // fetches in flight
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
	closeErr error

	pendMu  sync.Mutex
	pending []giveBack // units of ended grants to give back (buckets)

	st stats
}

type stats struct {
	local, localDenied, waits, waitDenied            atomic.Int64
	degradedAllowed, degradedDenied, degradedLeased  atomic.Int64
	fetches, fetchErrors, granted, late, stale, lost atomic.Int64
	reports                                          atomic.Int64
}

type shard struct {
	mu sync.Mutex
	m  map[ckey]*entry
}

// ckey is the identity of a local state: the key and the whole limit.
type ckey struct {
	key string
	lim sluice.Limit
}

// New returns a Store that decides from units the home store grants to
// holder (its name at the home store: the region, or the region and the
// process, unique among the holders of a key; 1 to
// sluice.MaxGrantHolderLen bytes), or an error naming the first invalid
// argument. home must implement sluice.Granter (memstore and redisstore
// do); its other calls pass through it. Close does not close home.
func New(home sluice.Store, holder string, opts ...Option) (*Store, error) {
	if home == nil {
		return nil, errors.New("region: New(nil): want a home store")
	}
	g, ok := home.(sluice.Granter)
	if !ok {
		return nil, fmt.Errorf("region: New(%T): %w", home, sluice.ErrGrantUnsupported)
	}
	if holder == "" || len(holder) > sluice.MaxGrantHolderLen {
		return nil, fmt.Errorf("region: New: holder %q: want 1 to %d bytes", holder, sluice.MaxGrantHolderLen)
	}
	s := &Store{global: sluice.Lift(home), granter: g, holder: holder, cfg: defaults(), seed: maphash.MakeSeed()}
	for _, o := range opts {
		if err := o(&s.cfg); err != nil {
			return nil, err
		}
	}
	s.epoch = time.Now()
	s.link = link{minTimeout: s.cfg.minTimeout, maxTimeout: s.cfg.maxTimeout}
	for i := range s.shards {
		s.shards[i].m = make(map[ckey]*entry)
	}
	s.sem = make(chan struct{}, maxFetches)
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.loop()
	return s, nil
}

// mono is the local monotonic time since New.
func (s *Store) mono() time.Duration { return time.Since(s.epoch) }

func (s *Store) shardOf(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)%numShards]
}

// String describes the store for logs.
func (s *Store) String() string {
	return fmt.Sprintf("region(%s over %v)", s.holder, s.global)
}

// Stats is a snapshot of a Store's counters.
type Stats struct {
	// Local counts decisions made from units held, LocalDenied the
	// denials made without a call (no units, and the home store's answer
	// or one on its way says so).
	Local, LocalDenied int64
	// Waits counts the decisions that waited for a key's first answer;
	// WaitDenied those of them denied.
	Waits, WaitDenied int64
	// DegradedAllowed and DegradedDenied count the decisions made by the
	// failure mode while the home store did not answer (a Reserve
	// included); DegradedLeased the units the Reserves of the failure mode
	// handed out.
	DegradedAllowed, DegradedDenied, DegradedLeased int64
	// Fetches counts the calls to the home store's Grant (reports
	// included), FetchErrors those that failed; Reports those sent for
	// a report alone.
	Fetches, FetchErrors, Reports int64
	// Granted counts the units granted; Late those dropped because their
	// answer came after their window (or lease time) ended; Lost those
	// that ended unspent. Stale counts requests the home store received
	// after their deadline (nothing applied).
	Granted, Late, Lost, Stale int64
	// SRTT, RTTVar and Timeout are the measured round trip and the
	// deadline it sets; Down reports whether the last call failed, Downs
	// how often the link went down.
	SRTT, RTTVar, Timeout time.Duration
	Down                  bool
	Downs                 int64
}

// Stats returns the Store's counters.
func (s *Store) Stats() Stats {
	srtt, rv := s.link.rtt()
	return Stats{
		Local: s.st.local.Load(), LocalDenied: s.st.localDenied.Load(),
		Waits: s.st.waits.Load(), WaitDenied: s.st.waitDenied.Load(),
		DegradedAllowed: s.st.degradedAllowed.Load(), DegradedDenied: s.st.degradedDenied.Load(), DegradedLeased: s.st.degradedLeased.Load(),
		Fetches: s.st.fetches.Load(), FetchErrors: s.st.fetchErrors.Load(), Reports: s.st.reports.Load(),
		Granted: s.st.granted.Load(), Late: s.st.late.Load(), Lost: s.st.lost.Load(), Stale: s.st.stale.Load(),
		SRTT: srtt, RTTVar: rv, Timeout: s.link.timeout(), Down: s.link.down(), Downs: s.link.downs.Load(),
	}
}

// grantable reports whether lim's decisions are made from grants: the
// window algorithms and the buckets, counting admitted hits.
func grantable(lim sluice.Limit) bool {
	return lim.Algorithm != sluice.SlidingLog && lim.Counting != sluice.CountAll
}

// AllowN implements sluice.Store: a decision from the units held, never
// waiting for the home store but on a key's first use (see the package
// documentation).
func (s *Store) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	d, _, err := s.decide(ctx, key, lim, n, false)
	return d, err
}

// decide is AllowN, and Reserve when reserve is true: it also returns
// the time to report for the units (see Reserve).
func (s *Store) decide(ctx context.Context, key string, lim sluice.Limit, n int, reserve bool) (sluice.Decision, time.Time, error) {
	if s.closed.Load() {
		return sluice.Decision{}, time.Time{}, sluice.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return sluice.Decision{}, time.Time{}, err
	}
	if n == 0 {
		d, err := s.peek(ctx, key, lim)
		return d, time.Time{}, err
	}
	if !grantable(lim) {
		if reserve {
			return s.global.Reserve(ctx, key, lim, n)
		}
		d, err := s.global.AllowN(ctx, key, lim, n)
		return d, time.Time{}, err
	}
	if _, err := s.limits.Check(key, lim, n); err != nil {
		return sluice.Decision{}, time.Time{}, err
	}
	sh, ck, e, now := s.lockEntry(key, lim)
	if e == nil {
		sh.mu.Unlock()
		if reserve {
			return s.global.Reserve(ctx, key, lim, n)
		}
		d, err := s.global.AllowN(ctx, key, lim, n)
		return d, time.Time{}, err
	}
	e.lastUse = now
	e.asked.add(now, s.tau(), n)
	if d, at, ok := s.spend(e, ck, now, n); ok {
		s.st.local.Add(1)
		f := s.fetchDue(e, ck, now, 0)
		sh.mu.Unlock()
		s.start(f)
		return d, at, nil
	}
	if !e.answered && !e.warming && !s.link.down() {
		// The key's first use: wait for its first answer, in turn.
		w := &waiter{n: n, ch: make(chan struct{})}
		e.waiters = append(e.waiters, w)
		f := s.fetchDue(e, ck, now, n)
		sh.mu.Unlock()
		s.start(f)
		return s.wait(ctx, sh, w, reserve)
	}
	if now < e.denyUntil {
		d := e.cachedDenial(ck.lim, now)
		sh.mu.Unlock()
		s.st.localDenied.Add(1)
		return d, time.Time{}, nil
	}
	if s.link.down() {
		f := s.fetchDue(e, ck, now, n) // a probe, when due
		var d sluice.Decision
		var at time.Time
		if reserve {
			d, at = s.degradeReserve(e, ck, now, n)
		} else {
			d = s.degrade(e, ck, now, n)
		}
		sh.mu.Unlock()
		s.start(f)
		return d, at, nil
	}
	f := s.fetchDue(e, ck, now, n)
	d := s.waitDenial(e, ck, now)
	sh.mu.Unlock()
	s.start(f)
	s.st.localDenied.Add(1)
	return d, time.Time{}, nil
}

// Warm makes key known under lim before its first decision, so that its
// decisions never wait for the home store's first answer: it asks the
// home store for the units a first use asks for (a tenth of the capacity,
// counted there as any grant) and returns once the answer is in. The
// decisions after it are made from those units, and once they run out
// (or end with their window) are denied at once, RetryAfter the time the
// next units should come, while those are fetched. A warmed key is kept
// for the report TTL (WithReportTTL) even if unused, then forgotten after
// the idle time as any other. A process calls it for the keys it knows
// before it takes traffic (sluice serve --region warms the configuration's
// counters of fixed values). It returns nil at once for a key already
// answered and for a limit decided by the home store alone (a sliding log,
// or one counting every hit); the home store's error when it does not
// answer within ctx or the link's deadline; an input error for an invalid
// key or limit.
func (s *Store) Warm(ctx context.Context, key string, lim sluice.Limit) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := s.limits.Check(key, lim, 1); err != nil {
		return err
	}
	if !grantable(lim) {
		return nil
	}
	sh, ck, e, now := s.lockEntry(key, lim)
	if e == nil {
		sh.mu.Unlock()
		return fmt.Errorf("region: warm %q: %w", key, errFull)
	}
	e.lastUse = now
	if e.answered {
		sh.mu.Unlock()
		return nil
	}
	e.holdUntil = max(e.holdUntil, now+s.cfg.reportTTL)
	var f *fetch
	if !e.fetching {
		if f = s.plan(e, ck, now, max((lim.Capacity()+9)/10, 1), 0); f == nil {
			sh.mu.Unlock()
			return fmt.Errorf("region: warm %q: %w", key, errBusy)
		}
		e.warming, e.unsized = true, true
	}
	w := &waiter{ch: make(chan struct{})}
	e.waiters = append(e.waiters, w)
	sh.mu.Unlock()
	s.start(f)
	select {
	case <-w.ch:
		return w.err
	case <-ctx.Done():
		sh.mu.Lock()
		defer sh.mu.Unlock()
		select {
		case <-w.ch:
			return w.err
		default:
			w.gone = true
			return ctx.Err()
		}
	}
}

var (
	errFull = errors.New("the store holds its maximum of keys (WithMaxKeys)")
	errBusy = errors.New("too many calls to the home store in flight")
)

// tau is the time constant of the demand meters.
func (s *Store) tau() time.Duration {
	srtt, _ := s.link.rtt()
	return max(4*s.cfg.refresh, 4*srtt, 100*time.Millisecond)
}

// lockEntry locks the shard of key and returns it with the state's
// identity, its entry (made when there is room; nil when the store holds
// its maximum of keys) and the time; the caller unlocks sh.mu.
func (s *Store) lockEntry(key string, lim sluice.Limit) (sh *shard, ck ckey, e *entry, now time.Duration) {
	ck, sh, now = ckey{key, lim}, s.shardOf(key), s.mono()
	sh.mu.Lock()
	return sh, ck, s.entry(sh, ck, now), now
}

// entry returns ck's entry, made when there is room; nil when the store
// holds its maximum of keys. sh.mu is held.
func (s *Store) entry(sh *shard, ck ckey, now time.Duration) *entry {
	if e := sh.m[ck]; e != nil {
		return e
	}
	if len(sh.m) >= max(s.cfg.maxKeys/numShards, 1) {
		return nil
	}
	e := &entry{created: now, lastUse: now}
	sh.m[ck] = e
	return e
}

// waitDenial is the denial of a request that the units held cannot serve
// while the home store's next answer is on its way or due: RetryAfter is
// when that answer should be here.
func (s *Store) waitDenial(e *entry, ck ckey, now time.Duration) sluice.Decision {
	srtt, _ := s.link.rtt()
	if srtt == 0 {
		srtt = s.cfg.minTimeout
	}
	var ra time.Duration
	switch {
	case e.fetching:
		ra = e.fetchSent + srtt - now
	case e.nextFetch > now:
		ra = e.nextFetch - now + srtt
	default:
		ra = srtt // a call starts now
	}
	return sluice.Decision{Limit: ck.lim, Remaining: int(e.held), RetryAfter: max(ra, time.Millisecond), ResetAfter: e.resetAfter(now)}
}

// waiter is a decision waiting for its key's first answer.
type waiter struct {
	n    int
	ch   chan struct{}
	gone bool // the caller left (its context ended): skip it
	d    sluice.Decision
	at   time.Time
	err  error
}

// wait waits for w's answer or its caller's context.
func (s *Store) wait(ctx context.Context, sh *shard, w *waiter, reserve bool) (sluice.Decision, time.Time, error) {
	s.st.waits.Add(1)
	select {
	case <-w.ch:
	case <-ctx.Done():
		sh.mu.Lock()
		select {
		case <-w.ch: // answered meanwhile
		default:
			w.gone = true
			sh.mu.Unlock()
			return sluice.Decision{}, time.Time{}, ctx.Err()
		}
		sh.mu.Unlock()
	}
	if w.err == nil && !w.d.Allowed {
		s.st.waitDenied.Add(1)
	}
	if reserve && w.d.Degraded && !w.d.Allowed {
		w.d, w.at = sluice.Decision{Limit: w.d.Limit, Degraded: true, RetryAfter: s.link.timeout()}, time.Time{}
	}
	return w.d, w.at, w.err
}

// peek asks the home store (n = 0) and adds the units held.
func (s *Store) peek(ctx context.Context, key string, lim sluice.Limit) (sluice.Decision, error) {
	d, err := s.global.AllowN(ctx, key, lim, 0)
	if err != nil || d.Degraded || !grantable(lim) {
		return d, err
	}
	now := s.mono()
	sh := s.shardOf(key)
	sh.mu.Lock()
	if e := sh.m[ckey{key, lim}]; e != nil {
		e.dropEnded(s, ckey{key, lim}, now)
		d.Remaining = min(d.Remaining+int(e.held), lim.Capacity())
	}
	sh.mu.Unlock()
	return d, nil
}

// Reset implements sluice.Resetter: it resets the key at the home store,
// then drops this store's state of the key under lim's algorithm and
// period (its units are not given back: they were counted in the state
// the reset deleted). The home store's holder table is left as it is.
func (s *Store) Reset(ctx context.Context, key string, lim sluice.Limit) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	err := s.global.Reset(ctx, key, lim)
	if validate.IsInput(err) || errors.Is(err, sluice.ErrResetUnsupported) {
		return err
	}
	sh := s.shardOf(key)
	sh.mu.Lock()
	for ck, e := range sh.m {
		if ck.key == key && ck.lim.Algorithm == lim.Algorithm && ck.lim.Period == lim.Period {
			e.grants, e.held, e.denyUntil = nil, 0, 0
			e.dead = true
			delete(sh.m, ck)
		}
	}
	sh.mu.Unlock()
	return err
}

// Acquire, Release, Extend and Freed pass to the home store: a region
// cannot hold permits for the fleet.

// Acquire implements sluice.Semaphore by passing the call to the home
// store.
func (s *Store) Acquire(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	if s.closed.Load() {
		return sluice.PermitDecision{}, sluice.ErrClosed
	}
	return s.global.Acquire(ctx, key, lim, holder)
}

// Release implements sluice.Semaphore by passing the call to the home
// store.
func (s *Store) Release(ctx context.Context, key, holder string) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	return s.global.Release(ctx, key, holder)
}

// Extend implements sluice.Semaphore by passing the call to the home
// store.
func (s *Store) Extend(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	if s.closed.Load() {
		return sluice.PermitDecision{}, sluice.ErrClosed
	}
	return s.global.Extend(ctx, key, lim, holder)
}

// Freed implements sluice.PermitWaker by passing the call to the home
// store.
func (s *Store) Freed(key string) <-chan struct{} {
	if s.closed.Load() {
		return nil
	}
	return s.global.Freed(key)
}

// ceilUnits is ceil(x) as units, within [0, max].
func ceilUnits(x float64, most int) int {
	if math.IsNaN(x) || x <= 0 {
		return 0
	}
	if x >= float64(most) {
		return most
	}
	return int(math.Ceil(x))
}
