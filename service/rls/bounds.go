package rls

import (
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/service/config"
)

// unitPeriod is the period of a protocol unit (config's unit of the same
// name), 0 for UNKNOWN.
func unitPeriod(u pb.RateLimitResponse_RateLimit_Unit) time.Duration {
	cu, _ := config.LookupUnit(u.String())
	return cu.Period
}
