package engine

import "math"

// Outcome is how one configured limit took part in a decision; it labels
// metrics.
type Outcome string

const (
	// OutcomeOK: the limit admitted the request and counted it.
	OutcomeOK Outcome = "ok"
	// OutcomeOverLimit: the limit denied the request (for a quota_mode
	// limit, the descriptor is over its limit but the request is not
	// denied).
	OutcomeOverLimit Outcome = "over_limit"
	// OutcomeShadowOverLimit: a shadow_mode limit would have denied; the
	// request was answered OK.
	OutcomeShadowOverLimit Outcome = "shadow_over_limit"
	// OutcomeNotCounted: another limit of the request denied it, so this
	// one did not count it.
	OutcomeNotCounted Outcome = "not_counted"
	// OutcomeUnlimited: an unlimited descriptor, never counted.
	OutcomeUnlimited Outcome = "unlimited"
	// OutcomeRefunded: a descriptor with NegativeHits gave its hits back
	// to the limit.
	OutcomeRefunded Outcome = "refunded"
)

// Report is the part one configured limit took in a decision.
type Report struct {
	Domain string
	Rule   string // the rule's Name: its configured name, else its generated stats name
	// Detail is the reference's detailed stats name of the match (the
	// descriptor's path with the request's values) when the rule has
	// detailed_metric or value_to_metric, else "". It holds request
	// values: an observer must bound what it keeps of it.
	Detail string
	// Key is the descriptor's counting key: the domain and the request's
	// entries, domain/key=value/..., with '\', '/', '=' and '*' escaped
	// by a backslash. It holds request values: an observer must bound what it
	// keeps of it, and never use it as a metric label.
	Key string
	// Metric is the reference's statistics name of the match
	// (config.Match.Metric): "domain.key_value.key2", the path of the rule,
	// with the request's values for detailed_metric and value_to_metric;
	// for a request's own limit (an override), the descriptor's entries
	// with their values, as the reference names them.
	Metric string
	// MetricValues reports that Metric holds request values (a detailed
	// name, or an override's): an observer must bound what it keeps of it.
	MetricValues bool
	Outcome      Outcome
	// Hits is the limit's cost in the request. Within, Near and Over split
	// it as the reference's within_limit, near_limit and over_limit
	// statistics do: Within is the hits of an admitted limit; Near the part
	// of the hits that took the limit's count above the near-limit
	// threshold (WithNearLimitRatio of its capacity) and not above the
	// limit; Over the part above the limit.
	Hits, Within, Near, Over int
	// LocalCache reports a limit denied by the local cache of over-limit
	// keys, without a store call (WithLocalCache): its hits are all Over,
	// and counted in no store.
	LocalCache bool
}

// Observer receives every decision, for metrics (service/metrics holds the
// sinks). Its methods are called on the deciding goroutine and must be fast
// and safe for concurrent use. The store calls are observed by the store
// the engine decides through (service/metrics.Observe), not here.
type Observer interface {
	// Decided reports the part one configured limit took in a decision.
	Decided(Report)
	// Unmatched reports a descriptor that matched no limit; domain is ""
	// when the request's domain is not configured.
	Unmatched(domain string)
	// Requested reports what one request came to, after its Decided and
	// Unmatched reports.
	Requested(RequestReport)
}

// RequestReport is what one request came to.
type RequestReport struct {
	// Domain is the request's. It is a request value: an observer must
	// bound what it keeps of it.
	Domain string
	// UnknownDomain says that a configuration is in force and has no
	// Domain (every descriptor matched nothing; none was counted).
	UnknownDomain bool
	// Descriptors is the number of descriptors of the request.
	Descriptors int
	// Err is the error that ended the request (a *RequestError or a
	// *StoreError), nil when it was decided.
	Err error
	// ShadowOverride says that the request was over a limit and answered
	// OK because the service is in shadow mode (WithShadowMode).
	ShadowOverride bool
}

// NopObserver ignores everything; the default Observer.
type NopObserver struct{}

// Decided implements Observer.
func (NopObserver) Decided(Report) {}

// Unmatched implements Observer.
func (NopObserver) Unmatched(string) {}

// Requested implements Observer.
func (NopObserver) Requested(RequestReport) {}

// DefaultNearLimitRatio is the default of WithNearLimitRatio, the
// reference's NEAR_LIMIT_RATIO.
const DefaultNearLimitRatio = 0.8

// split divides the hits of a limit whose count went from before to after
// (after = before + hits) as the reference's statistics do, with the
// near-limit threshold at ratio of the limit's capacity: an admitted limit
// counts its hits within, and those above the threshold near; a denied one
// counts the hits above the limit over and, when it was below the limit
// before, the part between the threshold and the limit near.
func split(capacity, before, hits int, denied bool, ratio float32) (within, near, over int) {
	limit := int64(capacity)
	// float32 as the reference computes it, so that the same ratio gives
	// the same threshold.
	nearT := int64(math.Floor(float64(float32(limit) * ratio)))
	b, a := int64(before), int64(before)+int64(hits)
	if !denied {
		if a > nearT {
			if b >= nearT {
				near = hits
			} else {
				near = int(a - nearT)
			}
		}
		return hits, near, 0
	}
	if b >= limit {
		return 0, 0, hits
	}
	return 0, int(limit - max(nearT, b)), int(a - limit)
}
