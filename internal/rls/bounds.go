package rls

import (
	"fmt"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
)

// Bounds are the largest values a caller may send: in a ShouldRateLimit
// request (and so in POST /json and GET /v1/auth) and in a POST /v1/check
// limit. They are checked before any store call, and an excess is an
// InvalidArgument (HTTP 400) naming the bound. A zero field is no bound.
// One type serves the RLS service and the HTTP server (internal/server),
// which take it by WithBounds.
type Bounds struct {
	MaxRate              int           // a limit's rate: /v1/check rate, an override's requests_per_unit
	MaxBurst             int           // /v1/check burst
	MaxPeriod            time.Duration // /v1/check period, an override's unit
	MaxHits              int           // hits_addend (request and descriptor), /v1/check cost
	MaxDescriptors       int           // descriptors per ShouldRateLimit request
	MaxDescriptorEntries int           // entries per descriptor
}

// DefaultBounds are the bounds of a Service or Server without WithBounds,
// and the defaults of sluice serve's flags (docs/bounds.md says why):
//   - rate and burst 1e9: a monthly budget of LLM tokens fits, and every
//     algorithm's arithmetic stays exact far beyond;
//   - period 366 days: the reference's YEAR unit, with room for a leap year;
//   - hits 1e9: LLM token costs run to millions per request, and no limit
//     admits more than its rate at once;
//   - 16 descriptors of at most 16 entries: Envoy sends one descriptor per
//     rate_limits action of a route, rarely more than a handful, and each
//     entry is one level of the configuration's tree; the limits that one
//     request applies (a descriptor may carry several) are decided all or
//     nothing, at most sluice.MaxMultiRequests (16) of them.
var DefaultBounds = Bounds{
	MaxRate:              1_000_000_000,
	MaxBurst:             1_000_000_000,
	MaxPeriod:            366 * 24 * time.Hour,
	MaxHits:              1_000_000_000,
	MaxDescriptors:       16,
	MaxDescriptorEntries: 16,
}

// WithBounds sets the bounds of what callers send (default DefaultBounds).
func WithBounds(b Bounds) Option { return func(s *Service) { s.bounds = b } }

// BoundError is a value beyond a Bounds field: Field names the request
// field, Flag the bound.
type BoundError struct {
	Field string // "rate", "descriptors[2].hits_addend", ...
	Value int64  // the value sent (a count, or a duration in nanoseconds for a period)
	Flag  string // "--max-rate", ...
	Max   int64
	dur   bool
}

func (e *BoundError) Error() string {
	if e.dur {
		return fmt.Sprintf("%s %v exceeds %s %v", e.Field, time.Duration(e.Value), e.Flag, time.Duration(e.Max))
	}
	return fmt.Sprintf("%s %d exceeds %s %d", e.Field, e.Value, e.Flag, e.Max)
}

func exceeds(field string, v int64, flag string, bound int) error {
	if bound > 0 && v > int64(bound) {
		return &BoundError{Field: field, Value: v, Flag: flag, Max: int64(bound)}
	}
	return nil
}

// CheckLimit checks a limit and cost that a caller sent (POST /v1/check):
// rate, burst, period and cost against b. Fields are named as in the
// request: rate, burst, period, cost.
func (b Bounds) CheckLimit(lim sluice.Limit, cost int) error {
	if err := exceeds("rate", int64(lim.Rate), "--max-rate", b.MaxRate); err != nil {
		return err
	}
	if err := exceeds("burst", int64(lim.Burst), "--max-burst", b.MaxBurst); err != nil {
		return err
	}
	if b.MaxPeriod > 0 && lim.Period > b.MaxPeriod {
		return &BoundError{Field: "period", Value: int64(lim.Period), Flag: "--max-period", Max: int64(b.MaxPeriod), dur: true}
	}
	return exceeds("cost", int64(cost), "--max-hits", b.MaxHits)
}

// checkRequest checks a ShouldRateLimit request against b before anything
// is matched or counted: the number of descriptors and of their entries,
// the hits, the overrides' rates and units. Entry keys and values are keyed
// by their bytes: gRPC and POST /json refuse strings that are not UTF-8
// when they decode a request (protobuf and protojson do), and GET /v1/auth
// passes header bytes as they are, so two different values never share a
// counter.
func (b Bounds) checkRequest(req *pb.RateLimitRequest) error {
	descs := req.GetDescriptors()
	if err := exceeds("descriptors", int64(len(descs)), "--max-descriptors", b.MaxDescriptors); err != nil {
		return err
	}
	if err := exceeds("hits_addend", int64(req.GetHitsAddend()), "--max-hits", b.MaxHits); err != nil {
		return err
	}
	for i, d := range descs {
		if err := exceeds(fmt.Sprintf("descriptors[%d].entries", i), int64(len(d.GetEntries())), "--max-descriptor-entries", b.MaxDescriptorEntries); err != nil {
			return err
		}
		if h := d.GetHitsAddend(); h != nil {
			if err := exceeds(fmt.Sprintf("descriptors[%d].hits_addend", i), int64(min(h.Value, 1<<62)), "--max-hits", b.MaxHits); err != nil {
				return err
			}
		}
		if o := d.GetLimit(); o != nil {
			if err := b.checkOverride(i, o); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b Bounds) checkOverride(i int, o *rlpb.RateLimitDescriptor_RateLimitOverride) error {
	if err := exceeds(fmt.Sprintf("descriptors[%d].limit.requests_per_unit", i), int64(o.GetRequestsPerUnit()), "--max-rate", b.MaxRate); err != nil {
		return err
	}
	if p := unitPeriod(pb.RateLimitResponse_RateLimit_Unit(o.GetUnit())); b.MaxPeriod > 0 && p > b.MaxPeriod {
		return &BoundError{Field: fmt.Sprintf("descriptors[%d].limit.unit", i), Value: int64(p), Flag: "--max-period", Max: int64(b.MaxPeriod), dur: true}
	}
	return nil
}

// unitPeriod is the period of a reference unit, 0 for an unknown one.
func unitPeriod(u pb.RateLimitResponse_RateLimit_Unit) time.Duration {
	for _, x := range units {
		if x.u == u {
			return x.d
		}
	}
	return 0
}
