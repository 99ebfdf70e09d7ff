package engine

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// Bounds are the largest values a caller may send: in a request (and so in
// ShouldRateLimit, POST /json and GET /v1/auth) and in a POST /v1/check
// limit. They are checked before any store call, and an excess is an
// invalid request (gRPC InvalidArgument, HTTP 400) naming the bound. A zero
// field is no bound.
type Bounds struct {
	MaxRate              int           // a limit's rate: /v1/check rate, an override's requests_per_unit
	MaxLogRate           int           // a sliding_log limit's rate: /v1/check rate (overrides are fixed windows)
	MaxBurst             int           // /v1/check burst
	MaxPeriod            time.Duration // /v1/check period, an override's unit
	MaxHits              int           // hits_addend (request and descriptor), /v1/check cost
	MaxDescriptors       int           // descriptors per request
	MaxDescriptorEntries int           // entries per descriptor
	MaxPermits           int           // max of /v1/acquire and /v1/extend
	MaxPermitLease       time.Duration // lease of /v1/acquire and /v1/extend
	MaxPermitsPerClient  int           // permits one client holds at once through /v1/acquire
}

// DefaultBounds are the bounds of an Engine without WithBounds, and the
// defaults of sluice serve's flags (docs/bounds.md says why):
//   - rate and burst 1e9: a monthly budget of LLM tokens fits, and every
//     algorithm's arithmetic stays exact far beyond;
//   - a sliding log's rate 500: its log keeps an entry per time of
//     admission, up to the rate, so that the rate bounds what one key of a
//     caller's choosing can hold (8 KB in memory, about 50 KB in Redis at
//     500); the rules of the configuration are the operator's, of any rate;
//   - period 366 days: the reference's YEAR unit, with room for a leap year;
//   - hits 1e9: LLM token costs run to millions per request, and no limit
//     admits more than its rate at once;
//   - 16 descriptors of at most 16 entries: Envoy sends one descriptor per
//     rate_limits action of a route, rarely more than a handful, and each
//     entry is one level of the configuration's tree; the limits that one
//     request applies (a descriptor may carry several) are decided all or
//     nothing, at most sluice.MaxMultiRequests (16) of them;
//   - permits 10000 (sluice.MaxPermits): a store keeps one entry per held
//     permit;
//   - a permit's lease 10 minutes: work that takes longer extends its
//     permit, and a permit whose holder died frees within it;
//   - 1000 permits held by one client: the store's table of permits is
//     shared, and a client holding many keys for long fills it for all.
var DefaultBounds = Bounds{
	MaxRate:              1_000_000_000,
	MaxLogRate:           500,
	MaxBurst:             1_000_000_000,
	MaxPeriod:            366 * 24 * time.Hour,
	MaxHits:              1_000_000_000,
	MaxDescriptors:       16,
	MaxDescriptorEntries: 16,
	MaxPermits:           sluice.MaxPermits,
	MaxPermitLease:       10 * time.Minute,
	MaxPermitsPerClient:  1000,
}

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

// over reports whether v exceeds bound (a zero bound is none); the error
// and its field's name are only built then, off the path of every request.
func over(v int64, bound int) bool { return bound > 0 && v > int64(bound) }

// CheckLimit checks a limit and cost that a caller sent (POST /v1/check):
// rate (and a sliding log's rate), burst, period and cost against b.
// Fields are named as in the request: rate, burst, period, cost.
func (b Bounds) CheckLimit(lim sluice.Limit, cost int) error {
	if err := exceeds("rate", int64(lim.Rate), "--max-rate", b.MaxRate); err != nil {
		return err
	}
	if lim.Algorithm == sluice.SlidingLog {
		if err := exceeds("rate", int64(lim.Rate), "--max-log-rate", b.MaxLogRate); err != nil {
			return err
		}
	}
	if err := exceeds("burst", int64(lim.Burst), "--max-burst", b.MaxBurst); err != nil {
		return err
	}
	if b.MaxPeriod > 0 && lim.Period > b.MaxPeriod {
		return &BoundError{Field: "period", Value: int64(lim.Period), Flag: "--max-period", Max: int64(b.MaxPeriod), dur: true}
	}
	return exceeds("cost", int64(cost), "--max-hits", b.MaxHits)
}

// checkRequest checks a request against b before anything is matched or
// counted: the number of descriptors and of their entries, the hits, the
// overrides' rates and units. Entry keys and values are keyed by their
// bytes: the protocols that decode requests refuse strings that are not
// UTF-8 (protobuf and protojson do), and GET /v1/auth passes header bytes
// as they are, so two different values never share a counter.
func (b Bounds) checkRequest(req *Request) error {
	if err := exceeds("descriptors", int64(len(req.Descriptors)), "--max-descriptors", b.MaxDescriptors); err != nil {
		return err
	}
	if err := exceeds("hits_addend", int64(req.Hits), "--max-hits", b.MaxHits); err != nil {
		return err
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		if n := int64(len(d.Entries)); over(n, b.MaxDescriptorEntries) {
			return exceeds(field(i, "entries"), n, "--max-descriptor-entries", b.MaxDescriptorEntries)
		}
		if h := int64(min(d.Hits, 1<<62)); d.HasHits && over(h, b.MaxHits) {
			return exceeds(field(i, "hits_addend"), h, "--max-hits", b.MaxHits)
		}
		if o := d.Limit; o != nil {
			if err := b.checkOverride(i, o); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b Bounds) checkOverride(i int, o *Override) error {
	if v := int64(o.RequestsPerUnit); over(v, b.MaxRate) {
		return exceeds(field(i, "limit.requests_per_unit"), v, "--max-rate", b.MaxRate)
	}
	if b.MaxPeriod > 0 && o.Period > b.MaxPeriod {
		return &BoundError{Field: field(i, "limit.unit"), Value: int64(o.Period), Flag: "--max-period", Max: int64(b.MaxPeriod), dur: true}
	}
	return nil
}

// field names a field of descriptor i: descriptors[i].name.
func field(i int, name string) string {
	return "descriptors[" + strconv.Itoa(i) + "]." + name
}
