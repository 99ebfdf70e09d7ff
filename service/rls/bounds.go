package rls

import (
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/service/engine"
)

// unitPeriod is the period of a reference unit, 0 for an unknown one.
func unitPeriod(u pb.RateLimitResponse_RateLimit_Unit) time.Duration {
	return engine.UnitPeriod(u.String())
}
