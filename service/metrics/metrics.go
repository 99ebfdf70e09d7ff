package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/topk"
)

// Metrics are the service's Prometheus metrics, on a registry they own.
// Labels are configured names (domains, rule names, algorithms, policies),
// never request keys or values, but for the rules with detailed_metric or
// value_to_metric, whose detailed names are bounded (MaxDetailedNames).
// Metrics implements engine.Observer, StoreObserver and failover.Observer.
type Metrics struct {
	reg *prometheus.Registry

	decisions  *prometheus.CounterVec
	shadowHits *prometheus.CounterVec
	totalHits  *prometheus.CounterVec
	withinHits *prometheus.CounterVec
	nearHits   *prometheus.CounterVec
	overHits   *prometheus.CounterVec
	detailed   *prometheus.CounterVec

	mu         sync.RWMutex
	rules      map[ruleKey]*ruleSeries // the series of each (domain, rule) seen
	unmatched  *prometheus.CounterVec
	checks     *prometheus.CounterVec
	permits    *prometheus.CounterVec
	storeDur   prometheus.Histogram
	storeErrs  prometheus.Counter
	sharedErrs prometheus.Counter
	degraded   *prometheus.CounterVec
	breaker    prometheus.Gauge
	breakerOps *prometheus.CounterVec
	reloads    *prometheus.CounterVec
	configOK   prometheus.Gauge
	panics     *prometheus.CounterVec

	evictions prometheus.Counter // memstore states evicted by --memory-max-keys
	info      *configInfo        // the configuration in force (configinfo.go)
	top       *topk.Tracker      // the keys denied most, never in a label
}

var (
	_ engine.Observer   = (*Metrics)(nil)
	_ StoreObserver     = (*Metrics)(nil)
	_ failover.Observer = (*Metrics)(nil)
)

// New returns the metrics registered on a new registry, together with the
// Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), rules: map[ruleKey]*ruleSeries{}}
	m.decisions = m.counterVec("sluice_rls_decisions_total",
		"Limits applied by ShouldRateLimit, /json and /v1/auth, by domain, configured rule name and result (ok, over_limit, shadow_over_limit, not_counted, unlimited, refunded).",
		"domain", "rule", "result")
	m.shadowHits = m.counterVec("sluice_rls_shadow_mode_hits_total",
		"Hits that a shadow_mode rule would have denied, by domain and rule.",
		"domain", "rule")
	m.totalHits = m.counterVec("sluice_rls_hits_total",
		"Hits asked of each limit (the reference's total_hits), by domain and rule.",
		"domain", "rule")
	m.withinHits = m.counterVec("sluice_rls_within_limit_hits_total",
		"Hits a limit admitted (the reference's within_limit), by domain and rule.",
		"domain", "rule")
	m.nearHits = m.counterVec("sluice_rls_near_limit_hits_total",
		"Hits that took a limit's count above --near-limit-ratio of its capacity, and not above the limit (the reference's near_limit), by domain and rule.",
		"domain", "rule")
	m.overHits = m.counterVec("sluice_rls_over_limit_hits_total",
		"Hits above a limit (the reference's over_limit), by domain and rule.",
		"domain", "rule")
	m.detailed = m.counterVec("sluice_rls_detailed_decisions_total",
		"Limits applied, by domain, rule, the descriptor's detailed name (for the rules with detailed_metric or value_to_metric; at most 100 names per rule, the others counted as _other) and result.",
		"domain", "rule", "descriptor", "result")
	m.unmatched = m.counterVec("sluice_rls_unmatched_descriptors_total",
		"Descriptors that matched no limit, by domain (\"\" for a domain that is not configured).",
		"domain")
	m.checks = m.counterVec("sluice_check_decisions_total",
		"Decisions of POST /v1/check by algorithm and result (allowed, denied).",
		"algorithm", "result")
	m.permits = m.counterVec("sluice_permit_operations_total",
		"Calls of POST /v1/acquire, /v1/release and /v1/extend by operation and result (acquired, denied, released, extended, lost, error, unsupported).",
		"operation", "result")
	m.storeDur = register(m.reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_store_duration_seconds",
		Help:    "Duration of store calls (AllowN, AllowMulti, or a permit's Acquire, Release or Extend).",
		Buckets: []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1},
	}))
	m.storeErrs = m.counter("sluice_store_errors_total",
		"Store calls that made no decision.")
	m.sharedErrs = m.counter("sluice_shared_store_errors_total",
		"Calls to the shared store (Redis) that failed or timed out, behind the failover breaker.")
	m.degraded = m.counterVec("sluice_degraded_decisions_total",
		"Decisions made without the shared store's answer, by failure policy and whether they admitted.",
		"policy", "allowed")
	m.breaker = m.gauge("sluice_breaker_open",
		"1 while the shared store's circuit breaker is open, else 0.")
	m.breakerOps = m.counterVec("sluice_breaker_transitions_total",
		"Circuit breaker transitions, by the state entered (open, closed).",
		"state")
	m.reloads = m.counterVec("sluice_config_reloads_total",
		"Configuration reloads by result (success, failure).",
		"result")
	m.configOK = m.gauge("sluice_config_last_reload_successful",
		"1 when the last configuration reload succeeded (or none was tried), 0 when it failed.")
	m.configOK.Set(1)
	m.panics = m.counterVec("sluice_panics_total",
		"Requests whose handler panicked and were answered 500 or Internal, by server (http, grpc).",
		"server")
	m.evictions = m.counter("sluice_memory_evictions_total",
		"Live states the memory store evicted to stay within --memory-max-keys (each forgets what it counted).")
	m.info = newConfigInfo(m.reg)
	m.top, _ = topk.New(topk.Options{}) // the defaults are valid
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// register registers c on reg and returns it.
func register[C prometheus.Collector](reg *prometheus.Registry, c C) C {
	reg.MustRegister(c)
	return c
}

func (m *Metrics) counter(name, help string) prometheus.Counter {
	return register(m.reg, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

func (m *Metrics) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return register(m.reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

func (m *Metrics) gauge(name, help string) prometheus.Gauge {
	return register(m.reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

// MemoryEvicted counts a live state the memory store evicted
// (memstore.WithOnEvict).
func (m *Metrics) MemoryEvicted() { m.evictions.Inc() }

// Top returns the summary of the keys denied most, fed by Decided with
// every over-limit decision (GET /admin/top: topk.Handler).
func (m *Metrics) Top() *topk.Tracker { return m.top }

// Registry returns the registry the metrics are registered on.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in Prometheus' exposition formats (GET
// /metrics).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// MaxDetailedNames bounds the detailed names (the descriptor label of
// sluice_rls_detailed_decisions_total) kept per rule: the names past it
// are counted under OtherDetail.
const MaxDetailedNames = 100

// OtherDetail is the descriptor label of the detailed names past
// MaxDetailedNames.
const OtherDetail = "_other"

// ruleKey names a rule's series.
type ruleKey struct{ domain, rule string }

// ruleSeries are the series of one rule, resolved once: a decision costs
// one map look-up, not one per metric.
type ruleSeries struct {
	decisions                      [nOutcomes]prometheus.Counter // by outcome, resolved on first use
	shadow                         prometheus.Counter            // resolved on first use
	total, within, near, overLimit prometheus.Counter
	details                        map[string]struct{} // detailed names seen, at most MaxDetailedNames
}

// outcomes are the engine's outcomes, indexed for ruleSeries.decisions.
var outcomes = [...]engine.Outcome{engine.OutcomeOK, engine.OutcomeOverLimit, engine.OutcomeShadowOverLimit,
	engine.OutcomeNotCounted, engine.OutcomeUnlimited, engine.OutcomeRefunded}

const nOutcomes = len(outcomes)

func outcomeIndex(o engine.Outcome) int {
	for i, x := range outcomes {
		if x == o {
			return i
		}
	}
	return 0
}

// series returns the series of rule in domain, made on first use.
func (m *Metrics) series(domain, rule string) *ruleSeries {
	k := ruleKey{domain, rule}
	m.mu.RLock()
	rs := m.rules[k]
	m.mu.RUnlock()
	if rs != nil {
		return rs
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if rs = m.rules[k]; rs == nil {
		rs = &ruleSeries{
			total:     m.totalHits.WithLabelValues(domain, rule),
			within:    m.withinHits.WithLabelValues(domain, rule),
			near:      m.nearHits.WithLabelValues(domain, rule),
			overLimit: m.overHits.WithLabelValues(domain, rule),
		}
		m.rules[k] = rs
	}
	return rs
}

// Decided implements engine.Observer.
func (m *Metrics) Decided(r engine.Report) {
	rs := m.series(r.Domain, r.Rule)
	i := outcomeIndex(r.Outcome)
	m.mu.RLock()
	c, shadow := rs.decisions[i], rs.shadow
	m.mu.RUnlock()
	if c == nil || shadow == nil && r.Outcome == engine.OutcomeShadowOverLimit {
		m.mu.Lock()
		if rs.decisions[i] == nil {
			rs.decisions[i] = m.decisions.WithLabelValues(r.Domain, r.Rule, string(r.Outcome))
		}
		if rs.shadow == nil && r.Outcome == engine.OutcomeShadowOverLimit {
			rs.shadow = m.shadowHits.WithLabelValues(r.Domain, r.Rule)
		}
		c, shadow = rs.decisions[i], rs.shadow
		m.mu.Unlock()
	}
	c.Inc()
	if r.Outcome == engine.OutcomeShadowOverLimit {
		shadow.Add(float64(r.Hits))
	}
	if r.Outcome != engine.OutcomeRefunded && r.Outcome != engine.OutcomeUnlimited {
		rs.total.Add(float64(r.Hits))
	}
	if r.Within > 0 {
		rs.within.Add(float64(r.Within))
	}
	if r.Near > 0 {
		rs.near.Add(float64(r.Near))
	}
	if r.Over > 0 {
		rs.overLimit.Add(float64(r.Over))
	}
	if r.Outcome == engine.OutcomeOverLimit {
		m.top.Denied(r.Domain, r.Rule, r.Key)
	}
	if r.Detail != "" {
		m.detailed.WithLabelValues(r.Domain, r.Rule, m.detail(rs, r.Detail), string(r.Outcome)).Inc()
	}
}

// detail returns the descriptor label of detailed name d of a rule: d
// itself for the first MaxDetailedNames names, OtherDetail past them.
func (m *Metrics) detail(rs *ruleSeries, d string) string {
	m.mu.RLock()
	_, seen := rs.details[d]
	full := len(rs.details) >= MaxDetailedNames
	m.mu.RUnlock()
	switch {
	case seen:
		return d
	case full:
		return OtherDetail
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, seen := rs.details[d]; !seen {
		if len(rs.details) >= MaxDetailedNames {
			return OtherDetail
		}
		if rs.details == nil {
			rs.details = map[string]struct{}{}
		}
		rs.details[d] = struct{}{}
	}
	return d
}

// Unmatched implements engine.Observer.
func (m *Metrics) Unmatched(domain string) { m.unmatched.WithLabelValues(domain).Inc() }

// StoreCall implements StoreObserver.
func (m *Metrics) StoreCall(d time.Duration, err error) {
	m.storeDur.Observe(d.Seconds())
	if err != nil {
		m.storeErrs.Inc()
	}
}

// Reloaded records a configuration reload.
func (m *Metrics) Reloaded(err error) {
	if err != nil {
		m.reloads.WithLabelValues("failure").Inc()
		m.configOK.Set(0)
		return
	}
	m.reloads.WithLabelValues("success").Inc()
	m.configOK.Set(1)
}

// Panicked counts a recovered panic of server ("http" or "grpc"). A nil m
// counts nothing.
func (m *Metrics) Panicked(server string) {
	if m != nil {
		m.panics.WithLabelValues(server).Inc()
	}
}

// Checked counts a decision of POST /v1/check.
func (m *Metrics) Checked(a sluice.Algorithm, allowed bool) {
	r := "denied"
	if allowed {
		r = "allowed"
	}
	m.checks.WithLabelValues(a.String(), r).Inc()
}

// Permit counts a call of POST /v1/acquire, /v1/release or /v1/extend:
// operation acquire, release or extend, and its result (acquired, denied,
// released, extended, lost, error, unsupported).
func (m *Metrics) Permit(operation, result string) {
	m.permits.WithLabelValues(operation, result).Inc()
}

// Degraded implements failover.Observer. The policy label is fail_closed,
// fail_open or fail_open_unbounded.
func (m *Metrics) Degraded(_ string, _ sluice.Limit, mode sluice.FailureMode, allowed bool, _ error) {
	a := "false"
	if allowed {
		a = "true"
	}
	m.degraded.WithLabelValues("fail_"+mode.String(), a).Inc()
}

// BreakerOpened implements failover.Observer.
func (m *Metrics) BreakerOpened(error) {
	m.breaker.Set(1)
	m.breakerOps.WithLabelValues("open").Inc()
}

// BreakerClosed implements failover.Observer.
func (m *Metrics) BreakerClosed(time.Duration) {
	m.breaker.Set(0)
	m.breakerOps.WithLabelValues("closed").Inc()
}

// SharedLatency implements failover.Observer. The store histogram already
// times every call the service makes (Observe); this counts the shared
// store's errors.
func (m *Metrics) SharedLatency(_ time.Duration, err error) {
	if err != nil {
		m.sharedErrs.Inc()
	}
}
