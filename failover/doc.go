// Package failover wraps a shared sluice.Store (Redis, through redisstore)
// with a deliberate answer for when it fails: a deadline on every shared
// call, a circuit breaker that stops waiting on a store that does not
// answer, and a failure mode, carried by each limit, for the decisions made
// without it.
//
// # Deadline and breaker
//
// Every shared call runs under a deadline (DefaultTimeout, WithTimeout). A
// failed call (an error other than invalid input, or the deadline) counts
// towards the breaker, which opens after WithFailureThreshold consecutive
// failures or when the failures exceed a ratio of the calls in a window
// (WithErrorRate). While it is open no decision touches the shared store:
// each is made at once by its failure mode, in microseconds. One background
// goroutine probes the shared store every WithProbeInterval (a Ping when the
// store has one, otherwise a peek, AllowN with n = 0, on a probe key) and
// closes the breaker at the first answer; callers' requests never probe.
//
// A shared store in another region answers in tens to hundreds of
// milliseconds, above DefaultTimeout: every call would time out and be
// decided by the failure mode. WithAdaptiveTimeout sets each call's
// deadline from the round trip measured on the store's answers (SRTT plus
// four times its variation, as TCP does, within a floor and a cap). With a
// fixed deadline, a breaker open for a second measures the store under a
// long deadline, and when it answers slower than the deadline logs an error
// wrapping ErrTimeoutBelowRTT and reports the round trip in
// Stats.SlowerThanTimeout, rather than leave the outage unexplained.
//
// # Failure modes
//
// A degraded decision (one made without the shared store's answer) has
// Decision.Degraded set and follows the limit's sluice.FailureMode
// (Limit.FailureMode; FailDefault means the store's default, set by
// WithDefaultMode, FailClosed unless named). An AllowMulti call follows the
// strictest mode of its requests.
//
//   - FailClosed denies: the Decision has Allowed false,
//     Remaining 0 and RetryAfter the probe interval (a hint of when to ask
//     again, not an exact wait, so that Limiter.Wait neither spins nor sleeps
//     long). A denial rather than an error, because a caller of a rate limiter
//     already handles denials (429, back-off) and an outage must not turn into
//     500s; the cause is reported to the Observer and to the logger.
//   - FailOpen admits through a strict local limiter: the same algorithm at
//     Rate/Replicas per Period, Replicas being set by WithReplicas, so that
//     the fleet as a whole stays within the quota during an outage. Without
//     WithReplicas, FailOpen denies (with cause ErrNoReplicas): the full
//     quota per process is exactly what it must never admit.
//   - FailUncounted decides each request as if nothing had been counted
//     for its key (memstore's Untouched) and counts nothing: a request
//     within the limit's capacity is admitted, with the Remaining and
//     resets of an untouched state. It is envoyproxy/ratelimit's answer
//     while its memcached does not answer; it bounds a request, not the
//     traffic. Only ever used when named.
//   - FailOpenUnbounded admits everything. It is only ever used when named.
//
// The shared store validates the requests it is given (its errors are
// returned as they are, and are not failures); a degraded decision checks
// the request first, with the same errors.
//
// # Every capability, passed through
//
// Store is a sluice.FullStore: AllowMulti, Reserve and Return, Reset and
// the concurrency limits pass to the shared store under the same deadline
// and breaker, whatever the shared store is (failover lifts it with
// sluice.Lift). A capability the shared store lacks comes back as that
// capability's error (sluice.ErrMultiUnsupported, ...), which is not a
// failure of the store and never opens the breaker; while the breaker is
// open failover cannot ask, and decides as for a store that has it.
//
// A Reserve that the shared store cannot answer admits and reserves
// nothing: it returns a Decision with Degraded set, Allowed false and no
// error, and the caller decides the request with AllowN, which applies
// the failure mode; its RetryAfter (the probe interval) is how long the
// caller should decide without reserving. A Return while the breaker is
// open is ErrBreakerOpen, without a call: the refund is dropped, not given
// to the local share (which never counted what the shared store
// admitted), and a dropped refund only makes the limit stricter.
//
// # Limits that count every hit
//
// A limit with Counting sluice.CountAll passes through like any other.
// While degraded, FailOpen charges it to the strict local share as
// memstore does (a charge above the share's capacity is recorded and
// denied, and a cost of 0 checks the local debt); FailClosed denies it,
// a cost of 0 included; FailUncounted charges it to an untouched state
// (above the capacity: denied); FailOpenUnbounded admits it. A charge decided
// without the shared store is not recorded there.
//
// # Observing
//
// Every degraded decision (one made without the shared store's answer) is
// counted in Stats and reported to the Observer (NopObserver by default) and
// to the *slog.Logger of WithLogger (discarding by default). Ready reports
// whether the breaker is closed, for readiness probes.
//
// What counts as a failure: any error of the shared store but invalid input
// and sluice.ErrClosed; the deadline; and the caller's own deadline when it
// expires during the call (the store did not answer in the time it was
// given). A caller's cancellation is not counted, and returns its error.
// A shared call that timed out may still have been counted by the store
// (Redis runs the script when it gets it; nothing is replayed), so a
// FailOpen decision after a timeout can admit a request that the store
// also counted: at most one per timed-out call.
//
// One breaker covers the whole shared store. On a Redis Cluster a failed
// master makes its share of the calls fail (and, with the default
// cluster-require-full-coverage, the whole cluster refuses queries from the
// moment it marks the master failed until a replica is promoted). With a
// low failure threshold that share opens the breaker for every key; the
// probe (a peek on one key) may reach a live master and close it, and it
// opens again: the fault test of a master killed in a 3-master cluster
// reports how often. Decisions stay correct in every failure mode; a higher
// WithFailureThreshold leaves the opening to the error rate, so that the
// live masters' keys keep being served.
//
// # Concurrency limits
//
// Store has the concurrency limits of its shared store (over one without
// them, its calls return the shared store's sluice.ErrSemaphoreUnsupported).
// Acquire, Release and Extend pass to the shared store under the deadline
// and the breaker, as AllowN does. A call that timed out is never retried:
// the shared store may have taken the permit all the same (the reply was
// lost), which leaves at most one TTL of one slot taken, freed when that
// TTL ends (under FailOpen, the Acquire may then also be admitted
// locally).
//
// While the shared store does not answer, Acquire follows the store's
// default failure mode (WithDefaultMode; a ConcurrencyLimit carries none):
//
//   - FailClosed denies: Acquired false, Degraded, RetryAfter the probe
//     interval.
//   - FailOpen admits through a local semaphore of max(Max/Replicas, 1)
//     permits per key (WithReplicas), so that the fleet as a whole stays
//     near Max; without WithReplicas it denies (cause ErrNoReplicas).
//   - FailOpenUnbounded and FailUncounted admit through a local semaphore
//     of sluice.MaxPermits permits per key.
//
// A permit taken locally is marked Degraded, and the Store remembers its
// holder: its Release and Extend are made locally, also once the shared
// store answers again (which never counted it: while local permits taken
// during an outage are held, at most one TTL unless extended, the fleet
// may hold the shared Max plus the local shares). Release of a shared
// permit while the shared store does not answer returns an error wrapping
// ErrUnavailable (its slot frees when its TTL ends); Extend of one returns a Degraded decision and an error
// wrapping ErrUnavailable, not sluice.ErrPermitLost: the permit may still
// be held until its Expires, and the holder may try again before.
//
// Degraded permit decisions are counted in Stats and logged; the Observer's
// Degraded, whose argument is a rate limit, is not called for them.
//
// # Composition
//
// With package tiered, put the breaker inside: tiered(failover(shared)),
// which package stack builds (stack.New). Spends from tiered's leases and cached denials
// are then decided by tiered without a deadline, with the breaker closed or
// open (units leased before an outage were admitted by the shared store and
// are spent as usual); only the calls that need the shared store go through
// the deadline and the breaker, and tiered keeps no degraded answer.
package failover
