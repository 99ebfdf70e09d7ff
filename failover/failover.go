package failover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/bound"
	"github.com/sluicehq/sluice/internal/validate"
	"github.com/sluicehq/sluice/memstore"
)

var _ sluice.FullStore = (*Store)(nil)

// Errors that a degraded decision's cause wraps (see Observer).
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
	// ErrTimeoutBelowRTT reports a shared store that answers, but slower
	// than the deadline (WithTimeout): every call times out. The breaker,
	// open for a second, measures the store with a longer deadline, and
	// logs an error wrapping this with the measured round trip; Stats
	// reports it too.
	ErrTimeoutBelowRTT = errors.New("failover: the shared store answers slower than the timeout")
)

// Pinger is a shared store that can be probed cheaply. The prober uses Ping
// when the store has it, and a peek on the probe key otherwise.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Store is a sluice.FullStore that decides through a shared store while it
// answers, and by each limit's failure mode while it does not (under
// sluice.FailError it then decides nothing: the call returns an error
// wrapping sluice.ErrNoDecision and the cause). It passes
// every other call (AllowMulti, Reserve and Return, Reset, the
// concurrency limits) through to the shared store under the same deadline
// and breaker; what the shared store does not support comes back as that
// capability's error. It is safe for concurrent use.
type Store struct {
	shared sluice.FullStore // lifted
	pinger Pinger           // nil when shared is not one
	// enforces: shared's AllowN and Reserve keep a deadline given with
	// package bound, so that they need no timer of their own.
	enforces bool
	cfg      config
	br       breaker
	local    *memstore.Store // the FailOpen local limiter, and the local semaphore
	locals   localPermits    // the holders of the permits taken locally (semaphore.go)
	rtt      rtt             // the round trip measured on answers
	// slow is the round trip (ns) a measuring probe found above the fixed
	// deadline (0: none since the breaker last closed).
	slow atomic.Int64

	mu     sync.Mutex // guards closed
	closed bool
	isDone atomic.Bool // read by every call

	// The counters are written by every call: a cache line of their own,
	// so that the fields every call reads are not invalidated by them
	// (with two cores deciding, sharing the line cost every decision
	// about a tenth of its time while the breaker was open).
	_                               [64]byte
	sharedCalls, sharedErrors       atomic.Int64
	degradedAllowed, degradedDenied atomic.Int64
	undecidedCalls                  atomic.Int64
}

// probeLimit is the limit of the probe's peek.
var probeLimit = sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Second}

// New returns a Store deciding through shared, or an error naming the
// first invalid option. Close stops its goroutines; it does not close
// shared, which the caller owns.
func New(shared sluice.Store, opts ...Option) (*Store, error) {
	if shared == nil {
		return nil, errors.New("failover: New(nil): want a shared store")
	}
	s := &Store{shared: sluice.Lift(shared), cfg: defaults()}
	for _, o := range opts {
		if err := o(&s.cfg); err != nil {
			return nil, err
		}
	}
	s.pinger, _ = shared.(Pinger)
	if e, ok := shared.(bound.Enforcer); ok {
		s.enforces = e.EnforcesDeadline()
	}
	s.local = memstore.New(memstore.WithClock(s.cfg.now), memstore.WithMaxKeys(s.cfg.localMaxKeys))
	s.br = breaker{
		threshold: int64(s.cfg.threshold),
		ratio:     s.cfg.ratio,
		window:    s.cfg.window,
		minCalls:  int64(s.cfg.minCalls),
		interval:  s.cfg.probeInterval,
		timeout:   s.probeTimeout,
		probe:     s.probe,
		measure:   s.measure,
		onOpen:    s.opened,
		onClose:   s.reclosed,
	}
	s.br.start()
	if s.cfg.startOpen != nil {
		s.br.trip(s.cfg.startOpen)
	}
	return s, nil
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
	// Undecided counts the calls under sluice.FailError that returned an
	// error wrapping sluice.ErrNoDecision instead of a decision; Degraded
	// does not count them.
	Undecided int64
	// BreakerOpens and BreakerCloses count the breaker's changes.
	BreakerOpens, BreakerCloses int64
	// Open reports whether the breaker is open now.
	Open bool
	// SRTT and RTTVar are the round trip measured on the shared store's
	// answers, Timeout the deadline of a call now (WithTimeout's, or
	// WithAdaptiveTimeout's from the round trip).
	SRTT, RTTVar, Timeout time.Duration
	// SlowerThanTimeout, when not 0, is the round trip a measuring probe
	// found above the fixed deadline while the breaker was open
	// (ErrTimeoutBelowRTT): raise WithTimeout, or use WithAdaptiveTimeout.
	SlowerThanTimeout time.Duration
}

// Stats returns the Store's counters.
func (s *Store) Stats() Stats {
	a, d := s.degradedAllowed.Load(), s.degradedDenied.Load()
	srtt, rv, _ := s.rtt.get()
	return Stats{
		SRTT: srtt, RTTVar: rv, Timeout: s.timeout(), SlowerThanTimeout: time.Duration(s.slow.Load()),
		SharedCalls:     s.sharedCalls.Load(),
		SharedErrors:    s.sharedErrors.Load(),
		Degraded:        a + d,
		DegradedAllowed: a,
		DegradedDenied:  d,
		Undecided:       s.undecidedCalls.Load(),
		BreakerOpens:    s.br.opens.Load(),
		BreakerCloses:   s.br.closes.Load(),
		Open:            s.br.open(),
	}
}

// Ready reports whether the breaker is closed: the shared store is in use.
// Readiness probes report it.
func (s *Store) Ready() bool { return !s.br.open() && !s.isDone.Load() }

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
	s.br.stop()
	return s.local.Close()
}

// String describes the store for logs.
func (s *Store) String() string {
	if s.cfg.adaptive {
		return fmt.Sprintf("failover(%v, %v, timeout from the round trip in [%v, %v])", s.shared, s.cfg.mode, s.cfg.floor, s.cfg.cap)
	}
	return fmt.Sprintf("failover(%v, %v, timeout %v)", s.shared, s.cfg.mode, s.cfg.timeout)
}

// AllowN implements sluice.Store. The shared store validates the request;
// a degraded decision validates it first, as the shared store would.
func (s *Store) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	if s.isDone.Load() {
		return sluice.Decision{}, sluice.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return sluice.Decision{}, err
	}
	cause := ErrBreakerOpen
	if !s.br.open() {
		c := s.beginDecision(ctx)
		d, err := s.shared.AllowN(c.ctx, key, lim, n)
		failure, ok := s.end(c, err)
		if !ok {
			return sluice.Decision{}, failure
		} else if failure == nil {
			return d, nil
		}
		cause = failure
	}
	// Decided here: checked first, as the shared store would have.
	if err := validate.Request(key, lim, n); err != nil {
		return sluice.Decision{}, err
	}
	return s.degrade(ctx, key, lim, n, cause)
}

// AllowMulti implements sluice.MultiStore through the shared store (whose
// sluice.ErrMultiUnsupported, when it cannot, is returned as is). A
// degraded call is decided by the strictest failure mode of its requests
// (the store's default when none names one; sluice.Stricter's order): a
// call with one limit failing closed is denied, and one whose strictest
// mode is sluice.FailError returns an error wrapping sluice.ErrNoDecision.
func (s *Store) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	if s.isDone.Load() {
		return nil, sluice.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.br.open() {
		return s.degradeMulti(ctx, reqs, ErrBreakerOpen)
	}
	c := s.begin(ctx)
	ds, err := s.shared.AllowMulti(c.ctx, reqs)
	if err, ok := s.end(c, err); !ok {
		return nil, err
	} else if err != nil {
		return s.degradeMulti(ctx, reqs, err)
	}
	return ds, nil
}

// Reserve implements sluice.Reserver: it passes the call to the shared
// store under the deadline and the breaker. When the store cannot answer
// (the breaker is open, or the call failed), it returns a Decision with
// Degraded true and Allowed false, a zero time and a nil error: nothing
// was admitted or reserved, and the caller decides the request with
// AllowN, which applies the failure mode; its RetryAfter is how long the
// caller should decide without reserving (the probe interval). A degraded
// Reserve is not a decision: Stats and the Observer count the AllowN. A
// shared store that cannot reserve at all returns its
// sluice.ErrReserveUnsupported, passed on as is.
func (s *Store) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	if s.isDone.Load() {
		return sluice.Decision{}, time.Time{}, sluice.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return sluice.Decision{}, time.Time{}, err
	}
	if s.br.open() {
		return s.noReserve(lim), time.Time{}, nil
	}
	c := s.beginDecision(ctx)
	d, at, err := s.shared.Reserve(c.ctx, key, lim, n)
	if err, ok := s.end(c, err); !ok {
		return sluice.Decision{}, time.Time{}, err
	} else if err != nil {
		return s.noReserve(lim), time.Time{}, nil
	}
	return d, at, nil
}

// Lease is Reserve's former name.
//
// Deprecated: use Reserve.
func (s *Store) Lease(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	return s.Reserve(ctx, key, lim, n)
}

// noReserve is a degraded Reserve's answer while the shared store does not
// answer: nothing reserved, and no reservation asked for until the breaker
// may be closed again (the probe interval), so that the caller's decisions
// in the meantime each pass through this store once, by AllowN.
func (s *Store) noReserve(lim sluice.Limit) sluice.Decision {
	return sluice.Decision{Limit: lim, Degraded: true, RetryAfter: s.cfg.probeInterval}
}

// Return implements sluice.Reserver: it passes the call to the shared store
// under the deadline and the breaker. While the breaker is open it returns
// ErrBreakerOpen without calling the store (the caller may try again
// later); a failed call returns an error wrapping ErrUnavailable. Either
// way the refund is dropped, not applied to the local share: the local
// share never counted what the shared store admitted, and a dropped refund
// only makes the limit stricter. A zero at passes on as the shared store's
// time now.
func (s *Store) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	if s.isDone.Load() {
		return sluice.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.br.open() {
		return ErrBreakerOpen
	}
	c := s.begin(ctx)
	err := s.shared.Return(c.ctx, key, lim, n, at)
	err, _ = s.end(c, err)
	return err
}

// call is one shared call: begun under the store's deadline, made with
// its ctx, ended (and accounted for) with the call's error.
type call struct {
	parent, ctx context.Context
	cancel      context.CancelFunc
	start       time.Time
}

func (s *Store) begin(ctx context.Context) call {
	cctx, cancel := s.deadline(ctx, false)
	return call{parent: ctx, ctx: cctx, cancel: cancel, start: time.Now()}
}

// beginDecision is begin for AllowN and Reserve, whose deadline a shared
// store that enforces it itself (bound.Enforcer: redisstore, batching)
// is given with package bound.
func (s *Store) beginDecision(ctx context.Context) call {
	cctx, cancel := s.deadline(ctx, s.enforces)
	return call{parent: ctx, ctx: cctx, cancel: cancel, start: time.Now()}
}

// noCancel is the cancel of a call that made no context of its own.
func noCancel() {}

// end accounts for c as settle does, and returns what settle returns.
func (s *Store) end(c call, err error) (error, bool) {
	lat := time.Since(c.start)
	c.cancel()
	return s.settle(c.parent, lat, err)
}

// deadline is the context of a shared call: ctx with the store's timeout,
// or ctx itself when its own deadline comes first (Envoy sends its 20ms
// rate-limit timeout as grpc-timeout), which spares a timer per call; the
// call then ends as it would have, at the caller's deadline. With
// enforced, the shared store keeps the timeout itself: it is given as a
// deadline with package bound, without the cancellable context and timer
// of context.WithTimeout (about ten allocations per call).
func (s *Store) deadline(ctx context.Context, enforced bool) (context.Context, context.CancelFunc) {
	t := s.timeout()
	now := time.Now()
	if d, ok := ctx.Deadline(); ok && d.Sub(now) <= t {
		return ctx, noCancel
	}
	if enforced {
		return bound.With(ctx, now.Add(t)), noCancel
	}
	return context.WithTimeout(ctx, t)
}

// timeout is the deadline of a shared call: WithTimeout's, or with
// WithAdaptiveTimeout the measured round trip's.
func (s *Store) timeout() time.Duration {
	if s.cfg.adaptive {
		return s.rtt.timeout(s.cfg.floor, s.cfg.cap)
	}
	return s.cfg.timeout
}

// probeTimeout is the deadline of a probe while the breaker is open:
// WithTimeout's, or with WithAdaptiveTimeout its cap, since a store whose
// round trip grew past the measured deadline answers no call of that
// deadline again, and only an answer measures it anew.
func (s *Store) probeTimeout() time.Duration {
	if s.cfg.adaptive {
		return s.cfg.cap
	}
	return s.cfg.timeout
}

// probe is the breaker's probe: a ping whose answer is a round trip
// measured.
func (s *Store) probe(ctx context.Context) error {
	start := time.Now()
	err := s.ping(ctx)
	if err == nil {
		s.rtt.observe(time.Since(start))
	}
	return err
}

// measureTimeout is the deadline of a measuring probe.
const measureTimeout = 2 * time.Second

// measure probes the shared store under a long deadline, while the breaker
// has been open a while with a fixed deadline: a store that answers, but
// slower than the deadline, is reported (ErrTimeoutBelowRTT) with its round
// trip, rather than left as an outage.
func (s *Store) measure(ctx context.Context) {
	if s.cfg.adaptive {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, max(measureTimeout, 4*s.cfg.timeout))
	defer cancel()
	start := time.Now()
	if s.ping(ctx) != nil {
		return
	}
	lat := time.Since(start)
	s.rtt.observe(lat)
	if lat > s.cfg.timeout && s.slow.Swap(int64(lat)) == 0 {
		s.cfg.log.Error("failover: the shared store answers, but slower than the timeout: every call times out and is decided by the failure mode; set WithTimeout above the round trip, or use WithAdaptiveTimeout",
			"store", s.shared, "err", fmt.Errorf("%w: it answered a probe in %v, the timeout is %v", ErrTimeoutBelowRTT, lat, s.cfg.timeout))
	}
}

// settle accounts for one shared call. It returns ok false with the error
// to return as is (the caller's own context ended, or an error that is not
// the store's failure); ok true with a nil error for an answer; ok true with
// the cause for a failure, which the caller degrades.
func (s *Store) settle(ctx context.Context, lat time.Duration, err error) (error, bool) {
	s.sharedCalls.Add(1)
	if err == nil {
		s.rtt.observe(lat)
		s.cfg.obs.SharedLatency(lat, nil)
		s.br.success()
		return nil, true
	}
	if cerr := ctx.Err(); cerr != nil {
		// The caller's context ended first: its error is the answer. A
		// cancellation says nothing about the store; a deadline that the
		// store did not meet does.
		s.cfg.obs.SharedLatency(lat, err)
		if errors.Is(cerr, context.DeadlineExceeded) {
			s.sharedErrors.Add(1)
			s.br.failure(fmt.Errorf("%w: %w", ErrUnavailable, err))
		}
		return cerr, false
	}
	if isCallerError(err) {
		s.cfg.obs.SharedLatency(lat, nil)
		s.br.success()
		return err, false
	}
	s.sharedErrors.Add(1)
	s.cfg.obs.SharedLatency(lat, err)
	cause := fmt.Errorf("%w: %w", ErrUnavailable, err)
	s.br.failure(cause)
	return cause, true
}

// isCallerError reports errors that say something about the request, not
// about the store's health: invalid input, a closed store, a capability
// the store does not have.
func isCallerError(err error) bool {
	return validate.IsInput(err) || errors.Is(err, sluice.ErrClosed) || unsupported(err)
}

// unsupported reports an error wrapping a capability's sentinel.
func unsupported(err error) bool {
	return errors.Is(err, sluice.ErrMultiUnsupported) || errors.Is(err, sluice.ErrReserveUnsupported) ||
		errors.Is(err, sluice.ErrResetUnsupported) || errors.Is(err, sluice.ErrSemaphoreUnsupported)
}

// ping probes the shared store for the breaker.
func (s *Store) ping(ctx context.Context) error {
	var err error
	if s.pinger != nil {
		err = s.pinger.Ping(ctx)
	} else {
		_, err = s.shared.AllowN(ctx, s.cfg.probeKey, probeLimit, 0)
	}
	if err != nil {
		s.cfg.log.Debug("failover: probe failed", "store", s.shared, "err", err)
	}
	return err
}

func (s *Store) opened(cause error) {
	s.cfg.log.Warn("failover: breaker opened; deciding by failure mode", "store", s.shared, "mode", s.cfg.mode, "cause", cause)
	s.cfg.obs.BreakerOpened(cause)
}

func (s *Store) reclosed(down time.Duration) {
	s.slow.Store(0)
	s.cfg.log.Info("failover: breaker closed; shared store answers again", "store", s.shared, "downtime", down)
	s.cfg.obs.BreakerClosed(down)
}
