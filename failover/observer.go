package failover

import (
	"time"

	"github.com/sluicehq/sluice"
)

// Observer receives the store's events; metrics adapters implement it. Its
// methods are called synchronously on the deciding goroutine (or the
// prober), so they must be fast and safe for concurrent use. Embed
// NopObserver to implement only some of them.
type Observer interface {
	// Degraded reports a decision made without the shared store's answer:
	// by failure mode m (lim's own, or the store's default), admitted or
	// not, because of cause (which wraps ErrBreakerOpen, ErrUnavailable or
	// ErrNoReplicas). Under sluice.FailError no decision was made: m is
	// FailError, allowed is false, and the caller got an error wrapping
	// sluice.ErrNoDecision and cause.
	Degraded(key string, lim sluice.Limit, m sluice.FailureMode, allowed bool, cause error)
	// BreakerOpened reports that the breaker opened because of cause.
	BreakerOpened(cause error)
	// BreakerClosed reports that the shared store answered a probe again,
	// after being left alone for downtime.
	BreakerClosed(downtime time.Duration)
	// SharedLatency reports the duration of one shared call and its error
	// (nil when the store answered, whatever the decision).
	SharedLatency(d time.Duration, err error)
}

// NopObserver ignores every event. It is the default Observer.
type NopObserver struct{}

var _ Observer = NopObserver{}

// Degraded implements Observer.
func (NopObserver) Degraded(string, sluice.Limit, sluice.FailureMode, bool, error) {}

// BreakerOpened implements Observer.
func (NopObserver) BreakerOpened(error) {}

// BreakerClosed implements Observer.
func (NopObserver) BreakerClosed(time.Duration) {}

// SharedLatency implements Observer.
func (NopObserver) SharedLatency(time.Duration, error) {}
