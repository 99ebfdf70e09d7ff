package rls

import (
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/engine"
)

// Bounds are the largest values a caller may send (engine.Bounds).
type Bounds = engine.Bounds

// BoundError is a value beyond a Bounds field (engine.BoundError).
type BoundError = engine.BoundError

// DefaultBounds are the bounds of a Service without WithBounds
// (engine.DefaultBounds).
var DefaultBounds = engine.DefaultBounds

// WithBounds sets the bounds of what callers send (default DefaultBounds).
func WithBounds(b Bounds) Option { return engineOption(engine.WithBounds(b)) }

// unitPeriod is the period of a reference unit, 0 for an unknown one.
func unitPeriod(u pb.RateLimitResponse_RateLimit_Unit) time.Duration {
	return engine.UnitPeriod(u.String())
}
