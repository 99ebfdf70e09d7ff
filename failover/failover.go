package failover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// Errors that a degraded decision's cause wraps (see Report and Observer).
var (
	// ErrUnavailable is the cause of every degraded decision: the shared
	// store did not answer in time, failed, or is left alone.
	ErrUnavailable = errors.New("failover: shared store unavailable")
	// ErrBreakerOpen is the cause of a decision made while the breaker is
	// open, without calling the shared store. It wraps ErrUnavailable.
	ErrBreakerOpen = fmt.Errorf("%w: circuit breaker open", ErrUnavailable)
	// ErrNoReplicas is the cause when FailOpen was asked for but the store
	// has no WithReplicas: the decision is a denial. It wraps ErrUnavailable.
	ErrNoReplicas = fmt.Errorf("%w: FailOpen needs WithReplicas; denied", ErrUnavailable)
)

// Defaults.
const (
	DefaultTimeout          = 50 * time.Millisecond
	DefaultFailureThreshold = 5
	DefaultProbeInterval    = 100 * time.Millisecond
	DefaultProbeKey         = "sluice:failover:probe"
	// By default the breaker also opens when at least half of at least 20
	// calls in one second failed.
	DefaultErrorRatio    = 0.5
	DefaultErrorWindow   = time.Second
	DefaultErrorMinCalls = 20
	// DefaultLocalMaxKeys bounds the FailOpen local limiter: during an
	// outage, callers that send a new key each time cannot grow it beyond
	// this many states (the ones closest to expiring are evicted first).
	DefaultLocalMaxKeys = 100_000
)

// Pinger is a shared store that can be probed cheaply. The prober uses Ping
// when the store has it, and a peek on the probe key otherwise.
type Pinger interface {
	Ping(ctx context.Context) error
}

// LocalFirst is a shared store with a local tier, such as *tiered.Store:
// AllowLocal decides without a shared call when it can (a lease spend, a
// cached denial) and reports false otherwise. failover asks it first,
// without a deadline, with the breaker closed or open: units leased before
// an outage were admitted by the shared store and are spent as usual.
type LocalFirst interface {
	AllowLocal(key string, lim sluice.Limit, n int) (sluice.Decision, bool)
}

// Store is a sluice.Store that decides through a shared store while it
// answers, and by policy while it does not. It is safe for concurrent use.
type Store struct {
	shared sluice.Store
	multi  sluice.MultiStore // nil when shared is not one
	pinger Pinger            // nil when shared is not one
	first  LocalFirst        // nil when shared is not one

	timeout       time.Duration
	threshold     int64
	ratio         float64
	window        time.Duration
	minCalls      int64
	probeInterval time.Duration
	probeKey      string
	probeLimit    sluice.Limit
	policy        Policy
	replicas      int
	obs           Observer
	log           *slog.Logger
	now           func() time.Time

	local        *memstore.Store
	localMaxKeys int
	epoch        time.Time

	startOpen error // WithStartOpen's cause, nil when closed at start

	open     atomic.Bool
	openedAt atomic.Int64 // ns since epoch
	consec   atomic.Int64
	winStart atomic.Int64 // ns since epoch
	winCalls atomic.Int64
	winFails atomic.Int64

	mu     sync.Mutex // guards closed and the start of probers
	closed bool
	isDone atomic.Bool
	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	sharedCalls, sharedErrors       atomic.Int64
	degradedAllowed, degradedDenied atomic.Int64
	breakerOpens, breakerCloses     atomic.Int64
}

// Option configures a Store.
type Option func(*Store)

// WithTimeout sets the deadline of every shared call (default
// DefaultTimeout). A call whose own context ends sooner keeps that.
func WithTimeout(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.timeout = d
		}
	}
}

// WithFailureThreshold opens the breaker after n consecutive failed shared
// calls (default DefaultFailureThreshold; n < 1 means 1).
func WithFailureThreshold(n int) Option {
	return func(s *Store) { s.threshold = int64(max(n, 1)) }
}

// WithErrorRate opens the breaker when, within one window, at least
// minCalls shared calls were made and at least ratio of them failed.
// A ratio <= 0 disables it; the default is DefaultErrorRatio over
// DefaultErrorWindow with DefaultErrorMinCalls.
func WithErrorRate(ratio float64, window time.Duration, minCalls int) Option {
	return func(s *Store) {
		s.ratio, s.window, s.minCalls = ratio, window, int64(max(minCalls, 1))
		if window <= 0 {
			s.ratio = 0
		}
	}
}

// WithProbeInterval sets how often the open breaker probes the shared
// store (default DefaultProbeInterval): the store is used again at most
// about this long after it answers again.
func WithProbeInterval(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.probeInterval = d
		}
	}
}

// WithProbeKey sets the key that probes peek (n = 0, which changes
// nothing) when the shared store has no Ping (default DefaultProbeKey).
func WithProbeKey(key string) Option {
	return func(s *Store) {
		if sluice.ValidateKey(key) == nil {
			s.probeKey = key
		}
	}
}

// WithDefaultPolicy sets the policy of calls whose context names none
// (default FailClosed).
func WithDefaultPolicy(p Policy) Option {
	return func(s *Store) {
		if p.valid() {
			s.policy = p
		}
	}
}

// WithReplicas declares how many processes share the quota, for FailOpen:
// each admits at most floor(Rate/n) per Period during an outage, so that
// together they stay within Rate. The floor, not the ceiling: n processes
// each admitting ceil(Rate/n) would exceed Rate whenever n does not divide
// it. When Rate < n a process admits 1 per ceil(n/Rate) Periods instead (a
// local limit of 0 would be FailClosed in disguise); Burst is scaled the
// same way, with a minimum of 1.
func WithReplicas(n int) Option {
	return func(s *Store) { s.replicas = max(n, 0) }
}

// WithObserver sets the Observer (default NopObserver).
func WithObserver(o Observer) Option {
	return func(s *Store) {
		if o != nil {
			s.obs = o
		}
	}
}

// WithLogger sets the logger for breaker changes (Warn, Info) and degraded
// decisions (Debug). The default discards.
func WithLogger(l *slog.Logger) Option {
	return func(s *Store) {
		if l != nil {
			s.log = l
		}
	}
}

// WithClock sets the clock of the FailOpen local limiter (default
// time.Now).
func WithClock(now func() time.Time) Option {
	return func(s *Store) {
		if now != nil {
			s.now = now
		}
	}
}

// WithLocalMaxKeys bounds the states of the FailOpen local limiter (default
// DefaultLocalMaxKeys); past it, the state closest to expiring is evicted,
// forgetting what it counted during the outage. n must be at least 1.
func WithLocalMaxKeys(n int) Option {
	return func(s *Store) { s.localMaxKeys = max(n, 1) }
}

// WithStartOpen starts the breaker open, with cause as its reason:
// decisions follow the policy from the first call, Ready reports false, and
// the prober closes the breaker at the shared store's first answer. It is
// for a shared store that cannot be reached yet, such as a service that
// starts before its Redis.
func WithStartOpen(cause error) Option {
	return func(s *Store) {
		if cause == nil {
			cause = ErrUnavailable
		}
		s.startOpen = cause
	}
}

// New returns a Store deciding through shared. Close stops its goroutines;
// it does not close shared, which the caller owns.
func New(shared sluice.Store, opts ...Option) *Store {
	s := &Store{
		shared:        shared,
		timeout:       DefaultTimeout,
		threshold:     DefaultFailureThreshold,
		ratio:         DefaultErrorRatio,
		window:        DefaultErrorWindow,
		minCalls:      DefaultErrorMinCalls,
		probeInterval: DefaultProbeInterval,
		probeKey:      DefaultProbeKey,
		probeLimit:    sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Second},
		policy:        FailClosed,
		obs:           NopObserver{},
		log:           slog.New(slog.DiscardHandler),
		now:           time.Now,
		epoch:         time.Now(),
		localMaxKeys:  DefaultLocalMaxKeys,
	}
	for _, o := range opts {
		o(s)
	}
	s.multi, _ = shared.(sluice.MultiStore)
	s.pinger, _ = shared.(Pinger)
	s.first, _ = shared.(LocalFirst)
	s.local = memstore.New(memstore.WithClock(s.now), memstore.WithMaxKeys(s.localMaxKeys))
	s.base, s.cancel = context.WithCancel(context.Background())
	if s.startOpen != nil {
		s.openBreaker(s.startOpen)
	}
	return s
}

// Stats is a snapshot of a Store's counters.
type Stats struct {
	// SharedCalls and SharedErrors count calls to the shared store (probes
	// excluded) and those that failed.
	SharedCalls, SharedErrors int64
	// Degraded counts decisions made without the shared store's answer
	// (an AllowMulti counts once per request); DegradedAllowed and
	// DegradedDenied split it.
	Degraded, DegradedAllowed, DegradedDenied int64
	// BreakerOpens and BreakerCloses count the breaker's changes.
	BreakerOpens, BreakerCloses int64
	// Open reports whether the breaker is open now.
	Open bool
}

// Stats returns the Store's counters.
func (s *Store) Stats() Stats {
	a, d := s.degradedAllowed.Load(), s.degradedDenied.Load()
	return Stats{
		SharedCalls:     s.sharedCalls.Load(),
		SharedErrors:    s.sharedErrors.Load(),
		Degraded:        a + d,
		DegradedAllowed: a,
		DegradedDenied:  d,
		BreakerOpens:    s.breakerOpens.Load(),
		BreakerCloses:   s.breakerCloses.Load(),
		Open:            s.open.Load(),
	}
}

// Ready reports whether the breaker is closed: the shared store is in use.
// Readiness probes report it.
func (s *Store) Ready() bool { return !s.open.Load() && !s.isDone.Load() }

// Close stops the prober, waits for it, and releases the local limiter.
// Later calls return sluice.ErrClosed. It does not close the shared store.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.isDone.Store(true)
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return s.local.Close()
}

// String describes the store for logs.
func (s *Store) String() string {
	return fmt.Sprintf("failover(%v, %v, timeout %v)", s.shared, s.policy, s.timeout)
}

// AllowN implements sluice.Store.
func (s *Store) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	if s.isDone.Load() {
		return sluice.Decision{}, sluice.ErrClosed
	}
	if err := validate.Request(key, lim, n); err != nil {
		return sluice.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return sluice.Decision{}, err
	}
	if s.first != nil {
		if d, ok := s.first.AllowLocal(key, lim, n); ok {
			return d, nil
		}
	}
	if s.open.Load() {
		return s.degrade(ctx, key, lim, n, ErrBreakerOpen), nil
	}
	cctx, cancel := s.deadline(ctx)
	start := time.Now()
	d, err := s.shared.AllowN(cctx, key, lim, n)
	lat := time.Since(start)
	cancel()
	if err, ok := s.settle(ctx, lat, err); !ok {
		return sluice.Decision{}, err
	} else if err != nil {
		return s.degrade(ctx, key, lim, n, err), nil
	}
	return d, nil
}

// deadline is the context of a shared call: ctx with the store's timeout,
// or ctx itself when its own deadline comes first (Envoy sends its 20ms
// rate-limit timeout as grpc-timeout), which spares a timer per call; the
// call then ends as it would have, at the caller's deadline.
func (s *Store) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= s.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// AllowMulti implements sluice.MultiStore when the shared store does;
// otherwise it returns an error wrapping sluice.ErrMultiUnsupported.
func (s *Store) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	if s.isDone.Load() {
		return nil, sluice.ErrClosed
	}
	if s.multi == nil {
		return nil, fmt.Errorf("%w: shared store %T", sluice.ErrMultiUnsupported, s.shared)
	}
	for i, rq := range reqs {
		if err := validate.Request(rq.Key, rq.Limit, rq.N); err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	if s.open.Load() {
		return s.degradeMulti(ctx, reqs, ErrBreakerOpen), nil
	}
	cctx, cancel := s.deadline(ctx)
	start := time.Now()
	ds, err := s.multi.AllowMulti(cctx, reqs)
	lat := time.Since(start)
	cancel()
	if err, ok := s.settle(ctx, lat, err); !ok {
		return nil, err
	} else if err != nil {
		return s.degradeMulti(ctx, reqs, err), nil
	}
	return ds, nil
}

// settle accounts for one shared call. It returns ok false with the error
// to return as is (the caller's own context ended, or an error that is not
// the store's failure); ok true with a nil error for an answer; ok true with
// the cause for a failure, which the caller degrades.
func (s *Store) settle(ctx context.Context, lat time.Duration, err error) (error, bool) {
	s.sharedCalls.Add(1)
	if err == nil {
		s.obs.SharedLatency(lat, nil)
		s.success()
		return nil, true
	}
	if cerr := ctx.Err(); cerr != nil {
		// The caller's context ended first: its error is the answer. A
		// cancellation says nothing about the store; a deadline that the
		// store did not meet does.
		s.obs.SharedLatency(lat, err)
		if errors.Is(cerr, context.DeadlineExceeded) {
			s.sharedErrors.Add(1)
			s.failure(fmt.Errorf("%w: %w", ErrUnavailable, err))
		}
		return cerr, false
	}
	if isCallerError(err) {
		s.obs.SharedLatency(lat, nil)
		s.success()
		return err, false
	}
	s.sharedErrors.Add(1)
	s.obs.SharedLatency(lat, err)
	cause := fmt.Errorf("%w: %w", ErrUnavailable, err)
	s.failure(cause)
	return cause, true
}

// isCallerError reports errors that say something about the request, not
// about the store's health.
func isCallerError(err error) bool {
	return errors.Is(err, sluice.ErrInvalidLimit) || errors.Is(err, sluice.ErrInvalidKey) ||
		errors.Is(err, sluice.ErrInvalidCost) || errors.Is(err, sluice.ErrExceedsCapacity) ||
		errors.Is(err, sluice.ErrClosed) || errors.Is(err, sluice.ErrMultiUnsupported)
}

func (s *Store) success() {
	if s.consec.Load() != 0 {
		s.consec.Store(0)
	}
	s.countWindow(false)
}

func (s *Store) failure(cause error) {
	c := s.consec.Add(1)
	if s.countWindow(true) || c >= s.threshold {
		s.openBreaker(cause)
	}
}

// countWindow counts one call in the error-rate window and reports whether
// the failures reached the ratio.
func (s *Store) countWindow(failed bool) bool {
	if s.ratio <= 0 {
		return false
	}
	now := int64(time.Since(s.epoch))
	if st := s.winStart.Load(); now-st >= int64(s.window) && s.winStart.CompareAndSwap(st, now) {
		s.winCalls.Store(0)
		s.winFails.Store(0)
	}
	c := s.winCalls.Add(1)
	if !failed {
		return false
	}
	f := s.winFails.Add(1)
	return c >= s.minCalls && float64(f) >= s.ratio*float64(c)
}

func (s *Store) openBreaker(cause error) {
	s.mu.Lock()
	if s.closed || s.open.Load() {
		s.mu.Unlock()
		return
	}
	s.openedAt.Store(int64(time.Since(s.epoch)))
	s.open.Store(true)
	s.breakerOpens.Add(1)
	s.wg.Add(1)
	go s.probe()
	s.mu.Unlock()
	s.log.Warn("failover: breaker opened; deciding by policy", "store", s.shared, "policy", s.policy, "cause", cause)
	s.obs.BreakerOpened(cause)
}

// probe runs while the breaker is open: every probe interval it asks the
// shared store, and closes the breaker at the first answer.
func (s *Store) probe() {
	defer s.wg.Done()
	t := time.NewTicker(s.probeInterval)
	defer t.Stop()
	for {
		select {
		case <-s.base.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(s.base, s.timeout)
		err := s.ping(ctx)
		cancel()
		if err == nil {
			s.closeBreaker()
			return
		}
		s.log.Debug("failover: probe failed", "store", s.shared, "err", err)
	}
}

func (s *Store) ping(ctx context.Context) error {
	if s.pinger != nil {
		return s.pinger.Ping(ctx)
	}
	_, err := s.shared.AllowN(ctx, s.probeKey, s.probeLimit, 0)
	return err
}

func (s *Store) closeBreaker() {
	down := time.Duration(int64(time.Since(s.epoch)) - s.openedAt.Load())
	s.consec.Store(0)
	s.winCalls.Store(0)
	s.winFails.Store(0)
	s.winStart.Store(int64(time.Since(s.epoch)))
	s.open.Store(false)
	s.breakerCloses.Add(1)
	s.log.Info("failover: breaker closed; shared store answers again", "store", s.shared, "downtime", down)
	s.obs.BreakerClosed(down)
}

// policyOf returns the call's policy, or the store's default.
func (s *Store) policyOf(ctx context.Context) Policy {
	if p := PolicyFrom(ctx); p.valid() {
		return p
	}
	return s.policy
}

// degrade decides without the shared store.
func (s *Store) degrade(ctx context.Context, key string, lim sluice.Limit, n int, cause error) sluice.Decision {
	p := s.policyOf(ctx)
	var d sluice.Decision
	switch {
	case n == 0:
		// A peek admits nothing: allowed under every policy, Remaining 0
		// (unknown).
		d = sluice.Decision{Allowed: true, Limit: lim}
	case p == FailOpenUnbounded:
		d = sluice.Decision{Allowed: true, Limit: lim}
	case p == FailOpen && s.replicas == 0:
		cause = ErrNoReplicas
		d = s.denial(lim)
	case p == FailOpen:
		d = s.localDecide(ctx, key, lim, n)
	default:
		d = s.denial(lim)
	}
	s.account(ctx, key, lim, p, d.Allowed, cause)
	return d
}

func (s *Store) degradeMulti(ctx context.Context, reqs []sluice.Request, cause error) []sluice.Decision {
	p := s.policyOf(ctx)
	ds := make([]sluice.Decision, len(reqs))
	allowed, filled := false, false
	switch p {
	case FailOpenUnbounded:
		allowed, filled = true, true
		for i, rq := range reqs {
			ds[i] = sluice.Decision{Allowed: true, Limit: rq.Limit}
		}
	case FailOpen:
		if s.replicas == 0 {
			cause = ErrNoReplicas
			break
		}
		local := make([]sluice.Request, len(reqs))
		ok := true
		for i, rq := range reqs {
			l, valid := s.localLimit(rq.Limit)
			if !valid || rq.N > l.Capacity() {
				ok = false
				break
			}
			local[i] = sluice.Request{Key: rq.Key, Limit: l, N: rq.N}
		}
		if ok {
			if lds, err := s.local.AllowMulti(ctx, local); err == nil {
				allowed, filled = lds[0].Allowed, true
				for i := range lds {
					ds[i] = lds[i]
					ds[i].Limit = reqs[i].Limit
				}
			}
		}
	}
	if !filled {
		for i, rq := range reqs {
			ds[i] = s.denial(rq.Limit)
		}
	}
	for _, rq := range reqs {
		s.account(ctx, rq.Key, rq.Limit, p, allowed, cause)
	}
	return ds
}

func (s *Store) account(ctx context.Context, key string, lim sluice.Limit, p Policy, allowed bool, cause error) {
	if allowed {
		s.degradedAllowed.Add(1)
	} else {
		s.degradedDenied.Add(1)
	}
	s.obs.Degraded(key, lim, p, allowed, cause)
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.DebugContext(ctx, "failover: degraded decision", "key", key, "limit", lim, "policy", p, "allowed", allowed, "cause", cause)
	}
	if r := reportFrom(ctx); r != nil {
		*r = Report{Degraded: true, Policy: p, Cause: cause}
	}
}

// denial is a FailClosed decision: RetryAfter is a hint of when the
// breaker may be closed again.
func (s *Store) denial(lim sluice.Limit) sluice.Decision {
	return sluice.Decision{Limit: lim, RetryAfter: s.probeInterval}
}

// localDecide admits through the strict local limiter.
func (s *Store) localDecide(ctx context.Context, key string, lim sluice.Limit, n int) sluice.Decision {
	l, ok := s.localLimit(lim)
	if !ok || n > l.Capacity() {
		return s.denial(lim)
	}
	d, err := s.local.AllowN(ctx, key, l, n)
	if err != nil {
		return s.denial(lim)
	}
	d.Limit = lim
	return d
}

// localLimit is lim's share for one of s.replicas processes: see
// WithReplicas.
func (s *Store) localLimit(lim sluice.Limit) (sluice.Limit, bool) {
	return LocalLimit(lim, s.replicas)
}

// LocalLimit returns the share of lim that one of replicas processes admits
// under FailOpen: Rate/replicas per Period, rounded down, or 1 per
// ceil(replicas/Rate) Periods when Rate < replicas; Burst scaled the same,
// at least 1. It reports false when replicas < 1 or the share is not a
// valid limit.
func LocalLimit(lim sluice.Limit, replicas int) (sluice.Limit, bool) {
	if replicas < 1 {
		return lim, false
	}
	l := lim
	if lim.Rate >= replicas {
		l.Rate = lim.Rate / replicas
	} else {
		m := (replicas + lim.Rate - 1) / lim.Rate
		if lim.Period > time.Duration(1<<62)/time.Duration(m) {
			return lim, false
		}
		l.Rate, l.Period = 1, lim.Period*time.Duration(m)
	}
	if lim.Burst > 0 {
		l.Burst = max(lim.Burst/replicas, 1)
	}
	return l, l.Validate() == nil
}
