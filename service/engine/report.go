package engine

import (
	"math"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/service/config"
)

// report tells the observer the part each limit took in the decision.
func (e *Engine) report(domain string, sts []Status, enforced, advisory, refunds []check, admitted bool) {
	for k := range enforced {
		c := &enforced[k]
		o := OutcomeOK
		switch {
		case c.over:
			o = OutcomeOverLimit
		case !admitted && c.lim.Counting != sluice.CountAll:
			o = OutcomeNotCounted
		}
		e.observe(domain, sts, c, o)
	}
	for k := range advisory {
		c := &advisory[k]
		o := OutcomeOK
		switch {
		case !admitted && !c.over && c.lim.Counting != sluice.CountAll:
			o = OutcomeNotCounted
		case c.over && c.rule.ShadowMode:
			o = OutcomeShadowOverLimit
		case c.over:
			o = OutcomeOverLimit
		}
		e.observe(domain, sts, c, o)
	}
	for k := range refunds {
		c := &refunds[k]
		m := &sts[c.desc].m
		e.obs.Decided(Report{Domain: domain, Rule: c.rule.Name, Detail: detail(*m), Key: m.Key, Metric: m.Metric, MetricValues: m.Detailed || c.rule.Override,
			Outcome: OutcomeRefunded, Hits: c.n})
	}
}

// observe reports check c with outcome o, its hits split as the
// reference's statistics split them.
func (e *Engine) observe(domain string, sts []Status, c *check, o Outcome) {
	m := &sts[c.desc].m
	r := Report{Domain: domain, Rule: c.rule.Name, Detail: detail(*m), Key: m.Key, Metric: m.Metric, MetricValues: m.Detailed || c.rule.Override,
		Outcome: o, Hits: c.n, LocalCache: c.cached}
	if o != OutcomeNotCounted {
		r.Within, r.Near, r.Over = split(c.lim.Capacity(), c.before(), c.n, c.over, e.nearRatio)
	}
	e.obs.Decided(r)
}

// before is the limit's count before c's hits, as far as the decision
// tells it: the capacity less what remained after the hits were counted,
// or, when they were not, less what remains. A counting-all limit charged
// over its limit does not tell how far over it was: the count before is
// taken at the limit then, so that all its hits count over.
func (c *check) before() int {
	used := c.lim.Capacity() - c.d.Remaining
	switch {
	case c.counted && c.over:
		return c.lim.Capacity()
	case c.counted:
		return max(used-c.n, 0)
	}
	return max(used, 0)
}

// statuses fills the status of every descriptor from its checks.
func (e *Engine) statuses(domain string, sts []Status, enforced, advisory, refunds []check) {
	// The checks are in descriptor order: each descriptor's are the next
	// run of each list, so that reporting is linear in the checks.
	var ei, ai, ri int
	for i := range sts {
		st := &sts[i]
		ej, aj, rj := ei, ai, ri
		for ej < len(enforced) && enforced[ej].desc == i {
			ej++
		}
		for aj < len(advisory) && advisory[aj].desc == i {
			aj++
		}
		for rj < len(refunds) && refunds[rj].desc == i {
			rj++
		}
		en, ad, rf := enforced[ei:ej], advisory[ai:aj], refunds[ri:rj]
		ei, ai, ri = ej, aj, rj
		switch {
		case st.Unlimited:
			st.Code, st.Rule = OK, nil
			continue
		case len(rf) > 0:
			st.Code, st.Rule, st.Refund = OK, rf[0].rule, true
			continue
		}
		rep := pick(en, ad)
		if rep == nil {
			st.Code, st.Rule = OK, nil
			e.obs.Unmatched(domain)
			continue
		}
		// A shadow-mode limit is OK already: quota mode leaves it as it
		// is, as the reference's.
		quota := !rep.rule.ShadowMode && (rep.rule.QuotaMode || e.quotaMode)
		e.status(st, rep, quota)
	}
}

// pick returns the check that reports a descriptor, given its enforced and
// advisory checks: the first that denied (or a quota-mode one over its
// limit), else the one with the least remaining; nil when no limit applies.
func pick(enforced, advisory []check) *check {
	var best *check
	for _, cs := range [2][]check{enforced, advisory} {
		for k := range cs {
			c := &cs[k]
			if c.over && !c.rule.ShadowMode {
				return c
			}
			if best == nil || c.d.Remaining < best.d.Remaining {
				best = c
			}
		}
	}
	return best
}

// status sets st from the check c that reports it; quota says that the
// descriptor is in quota mode (over its limit, it is OK with no reset).
func (e *Engine) status(st *Status, c *check, quota bool) {
	st.Code = OK
	st.Rule = c.rule
	st.Remaining = uint32(min(max(c.d.Remaining, 0), math.MaxUint32))
	st.HasReset = true
	reset := c.d.ResetAfter
	if c.over {
		st.Remaining = 0
		if c.d.RetryAfter > 0 {
			reset = c.d.RetryAfter
		}
		switch {
		case quota:
			// The reference keeps a quota-mode descriptor over its limit
			// OK, with its limit, nothing remaining and no reset; its
			// headers still tell the reset.
			st.HasReset = false
			st.QuotaOver = true
		case !c.rule.ShadowMode:
			st.Code = OverLimit
		}
	}
	if reset == 0 && c.lim.Algorithm == sluice.FixedWindow {
		// A fixed window with nothing counted yet resets with its window,
		// as the reference reports it, not "now".
		reset = windowLeft(c.lim.Period, e.now())
	}
	st.UntilReset = untilReset(reset, c.lim.Period)
}

// untilReset is duration_until_reset: whole seconds, rounded up, as the
// reference reports them, for limits of a second or more; exact below.
func untilReset(d, period time.Duration) time.Duration {
	if period < time.Second {
		return d
	}
	return time.Duration(CeilSeconds(d)) * time.Second
}

// CeilSeconds rounds d up to whole seconds, as Retry-After and
// RateLimit-Reset want.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// CurrentLimit is a rule's limit as the reference's protocol reports it
// (current_limit): RequestsPerUnit per Multiplier × Unit, a unit's name as
// the reference spells it.
type CurrentLimit struct {
	Name            string // the rule's configured name, "" when it has none
	RequestsPerUnit uint32
	Unit            string // SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR
	Multiplier      uint32 // 0 or 1: one unit
}

// LimitOf is the current_limit that reports rule r. A reference unit is
// reported as is (with the multiplier when the rule has one). A `window`
// extension is reported in the largest unit that divides it, with the
// multiplier the number of units (30s is 5 per SECOND×30, 2h is HOUR×2); a
// window that is not a whole number of seconds is reported as the same
// sustained rate per SECOND, rounded up.
func LimitOf(r *config.Rule) CurrentLimit {
	cl := CurrentLimit{Name: r.ConfiguredName, RequestsPerUnit: uint32(min(r.Limit.Rate, math.MaxUint32))}
	p := r.Limit.Period
	u, ok := config.LookupUnit(r.Unit)
	if !ok {
		u, ok = config.LargestUnit(p)
	}
	if ok {
		cl.Unit = u.Name
		if m := p / u.Period; m > 1 {
			cl.Multiplier = uint32(min(m, math.MaxUint32))
		}
		return cl
	}
	// Sub-second or fractional seconds: the rate per second, rounded up,
	// which is what the limit refills in a second. (A rate of 0, a
	// requests_per_unit: 0 rule, refills nothing.)
	perSec, ok := algo.RefillWithin(int64(r.Limit.Rate), p.Microseconds(), time.Second.Microseconds())
	if !ok && r.Limit.Rate > 0 {
		perSec = math.MaxUint32
	}
	cl.Unit = "SECOND"
	cl.RequestsPerUnit = uint32(min(perSec, math.MaxUint32))
	return cl
}
