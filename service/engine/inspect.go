package engine

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/config"
)

// Inspection is what Inspect found for one descriptor: the limits that
// apply to it and the state of each one's counter.
type Inspection struct {
	// Known is false when the domain is not configured (Decide answers OK
	// with no limit then).
	Known bool
	// Metric is the stats name of the match ("" when nothing matched).
	Metric string
	// Rules are the limits that apply, in the order Decide takes them; a
	// rule replaced by another of the same match is left out. Empty when
	// the descriptor matches no limit.
	Rules []RuleState
}

// RuleState is one limit of an inspected descriptor and its counter.
type RuleState struct {
	Rule *config.Rule
	// Limit is the limit the rule counts with: its own, with the engine's
	// counting unless the rule sets one.
	Limit sluice.Limit
	// QuotaMode is the rule's quota_mode, or the engine's (WithQuotaMode).
	QuotaMode bool
	// Key is the counter's key in the store, CounterLimit the limit whose
	// algorithm and period name its state there (what a sluice.Resetter
	// resets). HasCounter is false for a rule with no state: an unlimited
	// rule, a requests_per_unit: 0 rule that counts what it admits.
	Key          string
	CounterLimit sluice.Limit
	HasCounter   bool
	// Decision is the counter's state, peeked (a cost of 0: nothing is
	// counted); when Over, its RetryAfter is the time until one hit is
	// admitted again (exact for fixed_window, token_bucket and gcra, the
	// time to full, an upper bound, for the sliding algorithms). For a
	// requests_per_unit: 0 rule it is the denial any cost above 0 gets.
	Decision sluice.Decision
	// Over reports that the next hit would be denied: nothing remains.
	Over bool
}

// Inspect matches one descriptor of domain as Decide matches it, and peeks
// at the state of the counter of each limit that applies, counting
// nothing: the counters are those Decide counts on. Descriptor limit
// overrides and refunds do not apply (they are the request's, not the
// configuration's). An error is a *RequestError (a missing domain, no
// entries, more entries than the bounds allow, a key the store refuses) or
// a *StoreError.
func (e *Engine) Inspect(ctx context.Context, domain string, entries []Entry) (Inspection, error) {
	if domain == "" {
		return Inspection{}, invalid("domain", "rate limit domain must not be empty")
	}
	req := &Request{Domain: domain, Descriptors: []Descriptor{{Entries: entries}}}
	if err := e.bounds.checkRequest(req); err != nil {
		return Inspection{}, &RequestError{Field: "descriptor", Msg: err.Error(), Err: err}
	}
	sts := make([]Status, 1)
	replaced, known, err := e.match(req, sts)
	if err != nil {
		return Inspection{}, err
	}
	ins := Inspection{Known: known}
	if !known {
		return ins, nil
	}
	m := sts[0].m
	if len(m.Rules) > 0 {
		ins.Metric = m.Metric
	}
	for j, r := range m.Rules {
		if r.ConfiguredName != "" && replaced[r.ConfiguredName] {
			continue
		}
		rs := RuleState{Rule: r, QuotaMode: r.QuotaMode || e.quotaMode}
		if r.Unlimited {
			ins.Rules = append(ins.Rules, rs)
			continue
		}
		rs.Limit = e.limit(r)
		rs.Key = e.stateKey(m, j)
		if err := e.peek(ctx, &rs); err != nil {
			return Inspection{}, err
		}
		ins.Rules = append(ins.Rules, rs)
	}
	return ins, nil
}

// peek fills rs's counter and its state.
func (e *Engine) peek(ctx context.Context, rs *RuleState) error {
	r := rs.Rule
	if r.Deny {
		rs.Decision, rs.Over = denyDecision(r, e.now(), 1), true
		if rs.Limit.Counting == sluice.CountAll {
			// chargeDeny's counter.
			rs.CounterLimit = sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: rs.Limit.Period, FailureMode: rs.Limit.FailureMode, Counting: sluice.CountAll}
			rs.HasCounter = true
		}
		return nil
	}
	rs.CounterLimit, rs.HasCounter = rs.Limit, true
	d, err := e.store.AllowN(ctx, rs.Key, rs.Limit, 0)
	if err != nil {
		return e.storeError(ctx, err)
	}
	rs.Over = !d.Allowed || d.Remaining == 0
	if rs.Over && d.RetryAfter == 0 {
		d.RetryAfter = retryAfter(rs.Limit, d)
	}
	rs.Decision = d
	return nil
}

// retryAfter is the time until a used-up counter admits a hit again, from
// a peek (which admits its cost of 0 and tells no retry): the window's end
// for a fixed window; for a token bucket and GCRA, the time to full less
// the refill of all but one hit; for the sliding algorithms, which the
// peek does not tell, the time to full, an upper bound.
func retryAfter(lim sluice.Limit, d sluice.Decision) time.Duration {
	switch lim.Algorithm {
	case sluice.TokenBucket, sluice.GCRA:
		interval := lim.Period / time.Duration(max(lim.Rate, 1))
		return max(d.ResetAfter-time.Duration(lim.Capacity()-1)*interval, 0)
	default:
		return d.ResetAfter
	}
}

// stateKey is the counter key of the j-th rule of match m: the match's
// key (envoyproxy/ratelimit's name of it under WithReferenceKeys), told
// apart when an earlier rule of the same node has the same algorithm and
// period (two limits of one node would otherwise share a state).
func (e *Engine) stateKey(m config.Match, j int) string {
	key := m.Key
	if e.refKeys {
		key = referenceKey(e.refPrefix, key)
	}
	r := m.Rules[j]
	for _, p := range m.Rules[:j] {
		if p.Limit.Algorithm == r.Limit.Algorithm && p.Limit.Period == r.Limit.Period {
			return key + "#" + strconv.Itoa(j)
		}
	}
	return key
}

// referenceKey is envoyproxy/ratelimit's cache key (without its window) of
// the counting key key (config.Match's "domain/k=v/k2=v2", '\\', '/', '='
// and '*' escaped): prefix, the domain, "_", and each entry as key_value_.
func referenceKey(prefix, key string) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(key) + 1)
	b.WriteString(prefix)
	escaped := false
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case escaped:
			b.WriteByte(c)
			escaped = false
		case c == '\\':
			escaped = true
		case c == '/' || c == '=':
			b.WriteByte('_')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('_')
	return b.String()
}

// InspectKey peeks at the state of key under lim in the engine's store,
// counting nothing: the state a caller deciding with that key and limit
// counts on (POST /v1/check's, with its key's namespace). It reports the
// decision (with RetryAfter as Inspect's) and whether the next hit would
// be denied. lim must be valid.
func (e *Engine) InspectKey(ctx context.Context, key string, lim sluice.Limit) (sluice.Decision, bool, error) {
	d, err := e.store.AllowN(ctx, key, lim, 0)
	if err != nil {
		return sluice.Decision{}, false, e.storeError(ctx, err)
	}
	over := !d.Allowed || d.Remaining == 0
	if over && d.RetryAfter == 0 {
		d.RetryAfter = retryAfter(lim, d)
	}
	return d, over, nil
}

// Counter is one counter of the store: its key and the limit it counts
// with.
type Counter struct {
	Key   string
	Limit sluice.Limit
}

// FixedCounters returns up to max counters of the configuration in force
// whose keys are known before any request: those of the descriptors of
// fixed values (config.FixedDescriptors), each counter once, in that
// order. Unlimited and deny-all rules have none.
func (e *Engine) FixedCounters(max int) []Counter {
	cfg := e.cfg.Load()
	var out []Counter
	seen := map[Counter]bool{}
	cfg.FixedDescriptors(func(domain string, entries []config.Entry) bool {
		m, _ := cfg.Match(domain, entries)
		for j, r := range m.Rules {
			if r.Unlimited || r.Deny {
				continue
			}
			c := Counter{Key: e.stateKey(m, j), Limit: e.limit(r)}
			if seen[c] {
				continue
			}
			if len(out) == max {
				return false
			}
			seen[c] = true
			out = append(out, c)
		}
		return true
	})
	return out
}
