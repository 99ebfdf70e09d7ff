package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/service/config"
)

// maxHits bounds a cost: anything larger exceeds every capacity, and it is
// the most a counting-all limit may be charged at once.
const maxHits = sluice.MaxCharge

// check is one limit applied to one descriptor of a request.
type check struct {
	desc int
	rule *config.Rule
	lim  sluice.Limit // the rule's limit, with the counting in force
	key  string
	n    int
	sum  int // n and the request's earlier costs on the same counter (enforced, counting admitted)
	d    sluice.Decision
	over bool // this limit denied (or could never admit n)
	// cached: denied by the local cache of over-limit keys, without a
	// store call (WithLocalCache)
	cached bool
	// counted: the store recorded n (an admitted request, or a limit
	// counting all)
	counted bool
}

// Decide decides req. An error is a *RequestError (the request cannot be
// decided as sent) or a *StoreError (the store made no decision); a denial
// is a Result.
func (e *Engine) Decide(ctx context.Context, req *Request) (Result, error) {
	var res Result
	if err := e.DecideInto(ctx, req, &res); err != nil {
		return Result{}, err
	}
	return res, nil
}

// DecideInto is Decide with the Result written to res, whose Statuses'
// array is reused when it has room: a caller that keeps a Result per
// request (a pool) decides without allocating it. The engine keeps no
// reference to req or res once it returns. On an error, res holds nothing
// of use. The observer is told of the request (Requested) once decided.
func (e *Engine) DecideInto(ctx context.Context, req *Request, res *Result) error {
	rr := RequestReport{Domain: req.Domain, Descriptors: len(req.Descriptors)}
	err := e.decideInto(ctx, req, res, &rr)
	rr.Err = err
	e.obs.Requested(rr)
	return err
}

// decideInto is DecideInto; it fills rr's UnknownDomain and ShadowOverride.
func (e *Engine) decideInto(ctx context.Context, req *Request, res *Result, rr *RequestReport) error {
	if req.Domain == "" {
		return invalid("domain", "rate limit domain must not be empty")
	}
	descs := req.Descriptors
	if len(descs) == 0 {
		return invalid("descriptors", "rate limit descriptor list must not be empty")
	}
	if err := e.bounds.checkRequest(req); err != nil {
		re := &RequestError{Msg: err.Error(), Err: err}
		if be, ok := errors.AsType[*BoundError](err); ok {
			re.Field = be.Field
		}
		return re
	}
	domain := req.Domain
	sts := res.Statuses[:0]
	if cap(sts) < len(descs) {
		sts = make([]Status, len(descs))
	} else {
		sts = sts[:len(descs)]
		clear(sts)
	}
	*res = Result{Code: OK, Statuses: sts}
	replaced, known, err := e.match(req, res.Statuses)
	if err != nil {
		return err
	}
	if !known {
		// The reference answers OK, with no limit, for a domain it does not
		// know: Envoy's filter may be configured before the service is.
		rr.UnknownDomain = e.cfg.Load() != nil
		for i := range res.Statuses {
			res.Statuses[i] = Status{Code: OK}
			e.obs.Unmatched("")
		}
		if e.tr != nil {
			e.annotate(ctx, req, res, false)
		}
		return nil
	}
	sc := getScratch()
	defer putScratch(sc)
	enforced, advisory, refunds := e.checks(sc, domain, descs, res.Statuses, replaced)
	if e.multi && len(enforced) > sluice.MaxMultiRequests {
		// One all-or-nothing decision takes at most MaxMultiRequests limits.
		return invalid("descriptors", fmt.Sprintf("the descriptors apply %d limits, more than %d in one decision", len(enforced), sluice.MaxMultiRequests))
	}
	// Refunds first, so that a request that gives back and spends sees
	// what it gave back.
	if err := e.refund(ctx, refunds); err != nil {
		if _, ok := errors.AsType[*RequestError](err); ok {
			return err
		}
		return e.storeError(ctx, err)
	}
	admitted, err := e.decideCached(ctx, sc, enforced)
	if err != nil {
		return e.storeError(ctx, err)
	}
	if err := e.decideAdvisory(ctx, advisory, admitted); err != nil {
		return e.storeError(ctx, err)
	}
	e.report(domain, res.Statuses, enforced, advisory, refunds, admitted)
	if !admitted {
		res.Code, res.Denied = OverLimit, true
	}
	e.statuses(domain, res.Statuses, enforced, advisory, refunds)
	if e.shadowMode {
		rr.ShadowOverride = res.Code == OverLimit
		res.Code = OK
	}
	if e.tr != nil {
		e.annotate(ctx, req, res, true, enforced, advisory, refunds)
	}
	return nil
}

// scratch is a decision's working memory, reused across decisions
// (sync.Pool): the checks, and the store requests and decisions of the
// limits decided together.
type scratch struct {
	enforced, advisory, refunds []check
	reqs                        []sluice.Request
	idx                         []int
	sums                        map[counter]int // precheck's, empty between uses
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// maxPooledChecks bounds the checks a pooled scratch keeps room for, so
// that one request of many limits does not pin its memory.
const maxPooledChecks = 64

func getScratch() *scratch { return scratches.Get().(*scratch) }

func putScratch(sc *scratch) {
	if cap(sc.enforced) > maxPooledChecks || cap(sc.advisory) > maxPooledChecks || cap(sc.refunds) > maxPooledChecks ||
		cap(sc.reqs) > maxPooledChecks || cap(sc.idx) > maxPooledChecks {
		return
	}
	// Drop the references to the configuration and the keys.
	clear(sc.enforced[:cap(sc.enforced)])
	clear(sc.advisory[:cap(sc.advisory)])
	clear(sc.refunds[:cap(sc.refunds)])
	clear(sc.reqs[:cap(sc.reqs)])
	sc.enforced, sc.advisory, sc.refunds = sc.enforced[:0], sc.advisory[:0], sc.refunds[:0]
	sc.reqs, sc.idx = sc.reqs[:0], sc.idx[:0]
	scratches.Put(sc)
}

// match matches every descriptor of req in the configuration in force and
// keeps its match and cost in sts. It returns the names that the matched
// rules replace, and false when the domain is not configured.
func (e *Engine) match(req *Request, sts []Status) (replaced map[string]bool, known bool, err error) {
	reqHits := uint64(max(req.Hits, 1))
	cfg := e.cfg.Load()
	known = cfg != nil
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		st := &sts[i]
		st.Code = OK
		if len(d.Entries) == 0 {
			return nil, false, invalid("descriptors["+strconv.Itoa(i)+"]", fmt.Sprintf("descriptors[%d] has no entries", i))
		}
		h := reqHits
		if d.HasHits {
			h = d.Hits
		}
		st.hits = int(min(h, maxHits))
		if !known {
			continue
		}
		m, ok := cfg.Match(req.Domain, d.Entries)
		if !ok {
			known = false
			continue
		}
		if d.Limit != nil {
			r, err := overrideRule(d.Limit)
			if err != nil {
				return nil, false, invalid(field(i, "limit"), fmt.Sprintf("descriptors[%d].limit: %v", i, err))
			}
			// The reference counts an override on the counter of the
			// descriptor's entries and unit, which the configured limit of
			// the same entries and unit shares.
			m = config.Match{Rules: []*config.Rule{r}, Key: config.CountingKey(req.Domain, d.Entries), Metric: overrideMetric(req.Domain, d.Entries)}
		}
		st.m = m
		for _, r := range m.Rules {
			for _, rp := range r.Replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[rp] = true
			}
		}
	}
	return replaced, known, nil
}

// checks lists the limits that apply to each descriptor, in descriptor
// order: the enforcing ones, the shadow and quota-mode ones (advisory), and
// those of the descriptors that give hits back. An unlimited rule marks its
// status instead.
func (e *Engine) checks(sc *scratch, domain string, descs []Descriptor, sts []Status, replaced map[string]bool) (enforced, advisory, refunds []check) {
	enforced, advisory, refunds = sc.enforced[:0], sc.advisory[:0], sc.refunds[:0]
	defer func() { sc.enforced, sc.advisory, sc.refunds = enforced, advisory, refunds }()
	for i := range sts {
		st := &sts[i]
		m := st.m
		for j, r := range m.Rules {
			if r.ConfiguredName != "" && replaced[r.ConfiguredName] {
				continue
			}
			if r.Unlimited {
				st.Unlimited = true
				e.obs.Decided(Report{Domain: domain, Rule: r.Name, Detail: detail(m), Metric: m.Metric, MetricValues: m.Detailed, Outcome: OutcomeUnlimited, Hits: st.hits})
				continue
			}
			c := check{desc: i, rule: r, lim: e.limit(r), key: e.stateKey(m, j), n: st.hits}
			switch {
			case descs[i].NegativeHits:
				refunds = append(refunds, c)
			case r.ShadowMode || r.QuotaMode || e.quotaMode:
				advisory = append(advisory, c)
			default:
				enforced = append(enforced, c)
			}
		}
	}
	return enforced, advisory, refunds
}

// overrideMetric is the reference's statistics name of a request's own
// limit: the domain and the descriptor's entries, key_value (key alone when
// the value is empty), joined by dots.
func overrideMetric(domain string, entries []Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// detail is the detailed stats name of match m when its path asks for it
// (detailed_metric, value_to_metric), else "".
func detail(m config.Match) string {
	if m.Detailed {
		return m.Metric
	}
	return ""
}

// refund gives the hits of each refund check back to its limit. A store
// that cannot give hits back makes the request invalid: the refunds come
// before any other store call, so nothing has been counted then.
func (e *Engine) refund(ctx context.Context, cs []check) error {
	for k := range cs {
		c := &cs[k]
		if c.n == 0 || c.rule.Deny {
			continue // nothing to give back
		}
		err := e.store.Return(ctx, c.key, c.lim, c.n, time.Time{})
		if errors.Is(err, sluice.ErrReserveUnsupported) {
			return invalid(field(c.desc, "is_negative_hits"), fmt.Sprintf("descriptors[%d].is_negative_hits: the store cannot give hits back", c.desc))
		}
		if err != nil {
			return err
		}
		c.counted = true
	}
	return nil
}

// decideEnforced decides the enforcing limits. Those that count all are
// charged, each its hits whatever the others decide. Those that count
// what they admit are decided together: all admit and count, or none
// counts; a denial by a counting-all limit denies them too (they then only
// peek). It reports whether the request is admitted.
//
// With a store that decides AllowMulti, all of them are one store call
// (decideTogether); otherwise, or when they cannot be one call, the
// charges come first, one call each, then the others.
func (e *Engine) decideEnforced(ctx context.Context, sc *scratch, cs []check) (bool, error) {
	if len(cs) == 0 {
		return true, nil
	}
	if e.multi && !e.chargesApart && foldable(cs) {
		admitted, err := e.decideTogether(ctx, sc, cs)
		if !errors.Is(err, sluice.ErrMultiUnsupported) {
			return admitted, err
		}
		// These requests cannot be decided together (keys of different
		// Redis Cluster slots): nothing was counted; decide them apart.
		for k := range cs {
			cs[k].d, cs[k].over, cs[k].counted, cs[k].sum = sluice.Decision{}, false, false, 0
		}
	}
	admitted, err := e.chargeAll(ctx, cs)
	if err != nil {
		return false, err
	}
	return e.decideAdmitted(ctx, sc, cs, admitted)
}

// foldable reports whether the enforcing limits cs can be decided in one
// AllowMulti with the same result as apart: some count all (else there is
// nothing to fold); none of those is a requests_per_unit: 0 rule (charged
// on a limit of its own); none shares its state with a limit counting
// admitted hits (a store refuses one state of two countings in a call);
// and all have one failure mode, which a failover store applies to all the
// requests of a call that it cannot make.
func foldable(cs []check) bool {
	all := false
	for k := range cs {
		c := &cs[k]
		if c.lim.Counting != sluice.CountAll {
			continue
		}
		if c.rule.Deny {
			return false
		}
		all = true
	}
	if !all {
		return false
	}
	for k := range cs {
		c := &cs[k]
		if c.lim.FailureMode != cs[0].lim.FailureMode {
			return false
		}
		if c.lim.Counting != sluice.CountAll || c.rule.Deny {
			continue
		}
		for j := range cs {
			o := &cs[j]
			if o.lim.Counting != sluice.CountAll && o.key == c.key && o.lim.Algorithm == c.lim.Algorithm && o.lim.Period == c.lim.Period {
				return false
			}
		}
	}
	return true
}

// decideTogether decides the enforcing limits cs (foldable) in one
// AllowMulti: the charges of the limits counting all, and the limits
// counting admitted hits, which only peek when a charge, a
// requests_per_unit: 0 rule or a capacity already denies. The store charges
// the former whatever it decides and denies the call when one of them
// denies; a charge's own answer is its RetryAfter (a charge denies with a
// wait, always). The result is that of charging first and deciding the
// others after (chargeAll, decideAdmitted): when a charge denied a call
// whose other limits asked to count, those that blocked too are peeked
// again, so that they report their state as a peek does.
func (e *Engine) decideTogether(ctx context.Context, sc *scratch, cs []check) (bool, error) {
	pre, _ := e.precheck(sc, cs, true)
	reqs, idx := sc.reqs[:0], sc.idx[:0]
	for k := range cs {
		c := &cs[k]
		if c.rule.Deny {
			continue // counting admitted hits: decided by precheck
		}
		n := c.n
		if c.lim.Counting != sluice.CountAll && !pre {
			n = 0
		}
		reqs = append(reqs, sluice.Request{Key: c.key, Limit: c.lim, N: n})
		idx = append(idx, k)
	}
	sc.reqs, sc.idx = reqs, idx
	ds, err := e.store.AllowMulti(ctx, reqs)
	if err != nil {
		return false, err
	}
	if len(ds) != len(reqs) {
		return false, fmt.Errorf("engine: the store answered %d decisions for %d requests", len(ds), len(reqs))
	}
	charged := true
	for j, k := range idx {
		c := &cs[k]
		if c.lim.Counting != sluice.CountAll {
			continue
		}
		d := ds[j]
		d.Allowed = d.Allowed || d.RetryAfter == 0
		c.d, c.counted = d, true
		if !d.Allowed {
			c.over, charged = true, false
		}
	}
	st := settler{admitted: pre && charged, shortcut: !(pre && charged)}
	st.anyBlocker = st.shortcut
	for j, k := range idx {
		c := &cs[k]
		if c.lim.Counting == sluice.CountAll {
			continue
		}
		d := ds[j]
		if pre && !charged && d.RetryAfter > 0 {
			// It asked to count and blocked too: what it reports is a peek
			// at its state, as apart.
			if d, err = e.store.AllowN(ctx, c.key, c.lim, 0); err != nil {
				return false, err
			}
		}
		st.settle(c, d)
	}
	return st.finish(cs), nil
}

// chargeAll charges each enforcing limit that counts all its hits, and
// reports whether they all admitted.
func (e *Engine) chargeAll(ctx context.Context, cs []check) (bool, error) {
	admitted := true
	for k := range cs {
		c := &cs[k]
		if c.lim.Counting != sluice.CountAll {
			continue
		}
		if c.rule.Deny {
			if err := e.chargeDeny(ctx, c, c.n); err != nil {
				return false, err
			}
			admitted = admitted && !c.over
			continue
		}
		d, err := e.store.AllowN(ctx, c.key, c.lim, c.n)
		if err != nil {
			return false, err
		}
		c.d, c.counted = d, true
		if !d.Allowed {
			c.over, admitted = true, false
		}
	}
	return admitted, nil
}

// precheck decides the enforcing limits counting admitted hits that deny
// without asking the store whether they would admit: a requests_per_unit:
// 0 rule asked for a cost above 0, and a cost that the limit could never
// admit at once, with the request's earlier costs on the same counter (a
// descriptor sent twice): waiting never helps. It sets each one's sum,
// and reports whether the request is still admitted and how many limits
// count admitted hits.
func (e *Engine) precheck(sc *scratch, cs []check, admitted bool) (bool, int) {
	var sums map[counter]int // the costs so far per counter
	some := 0                // the limits counting admitted
	for k := range cs {
		c := &cs[k]
		if c.lim.Counting == sluice.CountAll {
			continue
		}
		some++
		if c.rule.Deny {
			c.over, c.d = c.n > 0, denyDecision(c.rule, e.now(), c.n)
			admitted = admitted && !c.over
			continue
		}
		// The request's earlier costs on the same counter, summed as the
		// checks go: one map look-up per limit, not a scan of the earlier
		// ones.
		sc2 := counter{c.key, c.lim.Algorithm, c.lim.Period}
		if sums == nil && len(cs) > 1 {
			if sc.sums == nil {
				sc.sums = make(map[counter]int, len(cs))
			}
			sums = sc.sums
		}
		c.sum = c.n
		if sums != nil {
			c.sum += sums[sc2]
			sums[sc2] = c.sum
		}
		if c.sum > c.lim.Capacity() {
			c.over, admitted = true, false
		}
	}
	if sums != nil {
		clear(sums)
	}
	return admitted, some
}

// settler records the store's decisions of the limits counting admitted
// hits of one request.
type settler struct {
	// admitted: the request is admitted so far; shortcut: it was denied
	// before these were asked, and they only peeked; anyBlocker: a limit
	// named itself the blocker (a RetryAfter).
	admitted, shortcut, anyBlocker bool
}

// settle records the store's decision d of check c.
func (st *settler) settle(c *check, d sluice.Decision) {
	c.d = d
	if st.shortcut {
		// A peek: a limit that could not admit its own cost now,
		// after the request's earlier costs on its counter, is over
		// too, as the reference reports it.
		c.over = c.over || c.n > 0 && c.d.Remaining < c.sum
		return
	}
	if !d.Allowed {
		st.admitted = false
		if d.RetryAfter > 0 {
			c.over, st.anyBlocker = true, true
		}
	}
}

// finish marks the limits counting admitted hits over when the store
// denied and named no blocker, every check counted when the request is
// admitted, and reports whether it is.
func (st *settler) finish(cs []check) bool {
	if !st.admitted && !st.anyBlocker { // a store that names no blocker: all are
		for k := range cs {
			if cs[k].lim.Counting != sluice.CountAll {
				cs[k].over = true
			}
		}
	}
	if st.admitted {
		for k := range cs {
			cs[k].counted = true
		}
	}
	return st.admitted
}

// decideAdmitted decides the enforcing limits that count admitted hits,
// all or nothing; admitted is false when a limit counting all denied the
// request, and they then only peek. It reports whether the request is
// admitted.
func (e *Engine) decideAdmitted(ctx context.Context, sc *scratch, cs []check, admitted bool) (bool, error) {
	admitted, some := e.precheck(sc, cs, admitted)
	if some == 0 {
		return admitted, nil
	}
	st := settler{admitted: admitted, shortcut: !admitted} // shortcut: every store call below is a peek
	st.anyBlocker = st.shortcut
	asks, last := 0, -1 // the limits the store decides
	for k := range cs {
		if c := &cs[k]; !c.rule.Deny && c.lim.Counting != sluice.CountAll {
			asks, last = asks+1, k
		}
	}
	switch {
	case asks == 1:
		// One limit, the usual request: one store call, nothing to gather.
		c := &cs[last]
		n := c.n
		if st.shortcut {
			n = 0
		}
		d, err := e.store.AllowN(ctx, c.key, c.lim, n)
		if err != nil {
			return false, err
		}
		st.settle(c, d)
	case asks > 1:
		reqs, idx := sc.reqs[:0], sc.idx[:0]
		for k, c := range cs {
			if c.rule.Deny || c.lim.Counting == sluice.CountAll {
				continue
			}
			n := c.n
			if st.shortcut {
				n = 0
			}
			reqs = append(reqs, sluice.Request{Key: c.key, Limit: c.lim, N: n})
			idx = append(idx, k)
		}
		sc.reqs, sc.idx = reqs, idx
		ds, err := e.allowMulti(ctx, reqs)
		if err != nil {
			return false, err
		}
		for j, k := range idx {
			st.settle(&cs[k], ds[j])
		}
	}
	return st.finish(cs), nil
}

// decideAdvisory decides the shadow and quota-mode limits, after the
// enforcing ones: a limit counting admitted hits counts them only when the
// request is admitted, one counting all always.
func (e *Engine) decideAdvisory(ctx context.Context, cs []check, admitted bool) error {
	var now int64
	if e.lc != nil {
		now = e.now().UnixMicro()
	}
	for k := range cs {
		c := &cs[k]
		if e.lc != nil && cacheable(c) && e.lc.lookup(c, now) {
			continue
		}
		all := c.lim.Counting == sluice.CountAll
		n := c.n
		if !admitted && !all {
			n = 0 // a denied request is counted by no limit that counts admitted hits
		}
		if c.rule.Deny {
			if all {
				if err := e.chargeDeny(ctx, c, n); err != nil {
					return err
				}
				continue
			}
			c.over, c.d = n > 0, denyDecision(c.rule, e.now(), n)
			continue
		}
		if !all && n > c.lim.Capacity() {
			c.over, n = true, 0
		}
		d, err := e.store.AllowN(ctx, c.key, c.lim, n)
		if err != nil {
			return err
		}
		c.d, c.counted = d, n > 0 && (all || d.Allowed)
		c.over = c.over || !d.Allowed
		if e.lc != nil && cacheable(c) {
			e.lc.remember(cs[k:k+1], now)
		}
	}
	return nil
}

// counter names the state a limit counts on: a key, an algorithm and a
// period.
type counter struct {
	key    string
	alg    sluice.Algorithm
	period time.Duration
}

// allowMulti decides reqs (two or more) all or nothing.
func (e *Engine) allowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	ds, err := e.store.AllowMulti(ctx, reqs)
	if !errors.Is(err, sluice.ErrMultiUnsupported) {
		return ds, err
	}
	// A store without AllowMulti: one call per limit, stopping at the first
	// denial. Limits decided before it stay counted; the all-or-nothing
	// guarantee needs a MultiStore.
	ds = make([]sluice.Decision, len(reqs))
	denied := false
	for k, r := range reqs {
		n := r.N
		if denied {
			n = 0
		}
		d, err := e.store.AllowN(ctx, r.Key, r.Limit, n)
		if err != nil {
			return nil, err
		}
		if denied {
			d.Allowed = false
		}
		ds[k] = d
		denied = denied || !d.Allowed
	}
	return ds, nil
}

// storeError is the error of a failed store call: the context's own error
// when it ended, else the store's, classified (storeError).
func (e *Engine) storeError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return &StoreError{Err: ctx.Err()}
	}
	if errors.Is(err, sluice.ErrNoDecision) {
		// The failure mode error, asked for: failover logs the outage
		// once (its breaker), not each request.
		e.log.Debug("store made no decision", "err", err)
	} else {
		e.log.Warn("store failed", "err", err)
	}
	return storeError(err)
}

// chargeDeny decides a requests_per_unit: 0 rule that counts all, as the
// reference does: its counter counts every hit, and it is over its limit
// when it has counted any in its window (a cost of 0 included). The store
// counts on the rule's key with a stand-in rate of 1, which nothing else
// shares: nothing remains once anything is counted.
func (e *Engine) chargeDeny(ctx context.Context, c *check, n int) error {
	c.over, c.d = n > 0, denyDecision(c.rule, e.now(), n)
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: c.lim.Period, FailureMode: c.lim.FailureMode, Counting: sluice.CountAll}
	d, err := e.store.AllowN(ctx, c.key, lim, n)
	if err != nil {
		return err
	}
	c.counted = n > 0
	c.over = c.over || d.Remaining == 0
	return nil
}

// denyDecision is the answer of a requests_per_unit: 0 rule to a cost of n,
// which blocks its descriptor: over the limit, nothing remaining, reset at
// the end of the rule's epoch-aligned window as the reference reports it.
// A cost of 0 asks for nothing, and is admitted (as the reference's 0 hits
// on a limit of 0).
func denyDecision(r *config.Rule, now time.Time, n int) sluice.Decision {
	left := windowLeft(r.Limit.Period, now)
	if n == 0 {
		return sluice.Decision{Allowed: true, Limit: r.Limit, ResetAfter: left}
	}
	return sluice.Decision{Limit: r.Limit, RetryAfter: left, ResetAfter: left}
}

// windowLeft is the time from now to the end of the epoch-aligned window of
// period p that holds now, where a fixed window resets: algo.WindowLeft, in
// the microseconds that the stores count in.
func windowLeft(p time.Duration, now time.Time) time.Duration {
	if p < time.Microsecond {
		p = time.Second
	}
	return time.Duration(algo.WindowLeft(now.UnixMicro(), p.Microseconds())) * time.Microsecond
}

// overrideRule is the fixed-window limit of a descriptor's limit override.
func overrideRule(o *Override) (*config.Rule, error) {
	if o.Period == 0 {
		return nil, fmt.Errorf("unit %s is not supported", o.Unit)
	}
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: int(o.RequestsPerUnit), Period: o.Period}
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	return &config.Rule{Name: "override", Limit: lim, Unit: o.Unit, Override: true}, nil
}
