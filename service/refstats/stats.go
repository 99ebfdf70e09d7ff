package refstats

import (
	"errors"
	"sync"

	"github.com/sluicehq/sluice/service/engine"
)

// MaxValueNames bounds the names that hold request values (those of
// detailed_metric and value_to_metric rules, and of requests' own limits)
// kept per rule: past it, a rule's hits are counted under its domain's
// OtherKey. It is sluice's own bound on detailed names
// (sluice_rls_detailed_decisions_total), for the same reason.
const MaxValueNames = 100

// MaxUnknownDomains bounds the domains of domain_not_found: past it, the
// requests of other unknown domains are counted under OtherKey.
const MaxUnknownDomains = 100

// OtherKey is the key of the statistics past MaxValueNames and
// MaxUnknownDomains: ratelimit.service.rate_limit.<domain>._other.total_hits,
// ratelimit.service.rate_limit._other.domain_not_found.
const OtherKey = "_other"

// The reference's scopes.
const (
	rateLimitScope = "ratelimit.service.rate_limit."
	serviceScope   = "ratelimit.service."
	serverScope    = "ratelimit_server."
)

// Stats are envoyproxy/ratelimit's statistics, under its names, fed by
// sluice's decisions: it is an engine.Observer; UnaryInterceptor counts the
// gRPC calls, ConfigLoaded the configurations. Names are bounded:
// configured paths, and at most MaxValueNames request-valued names per
// rule and MaxUnknownDomains unknown domains.
type Stats struct {
	st   *Store
	tags Tags

	mu      sync.RWMutex
	limits  map[string]*limitStats // by Report.Metric
	perRule map[ruleKey]int        // value names made per rule
	other   map[string]*limitStats // the overflow of each domain
	unknown map[string]*Counter    // domain_not_found by domain
	methods sync.Map               // gRPC full method -> *method
	service serviceStats
	loader  loaderStats // set by the first FilesRead
	runtime *runtimeStats
}

var _ engine.Observer = (*Stats)(nil)

type ruleKey struct{ domain, rule string }

// limitStats are the statistics of one limit's name.
type limitStats struct {
	total, within, near, over, shadow, overLocal *Counter
}

type serviceStats struct {
	configOK, configErr, shadow, redisErr, serviceErr *Counter
	unknownOther                                      *Counter
}

// New returns the statistics, tagged with tags, in st.
func New(st *Store, tags Tags) *Stats {
	s := &Stats{st: st, tags: tags, limits: map[string]*limitStats{}, perRule: map[ruleKey]int{},
		other: map[string]*limitStats{}, unknown: map[string]*Counter{}}
	c := func(name string) *Counter { return st.Counter(tags.Name(name)) }
	s.service = serviceStats{
		configOK:   c(serviceScope + "config_load_success"),
		configErr:  c(serviceScope + "config_load_error"),
		shadow:     c(serviceScope + "global_shadow_mode"),
		redisErr:   c(serviceScope + "call.should_rate_limit.redis_error"),
		serviceErr: c(serviceScope + "call.should_rate_limit.service_error"),
	}
	s.runtime = newRuntimeStats(st, tags)
	st.generate(s.runtime.generate)
	return s
}

func (s *Stats) counter(name string) *Counter { return s.st.Counter(s.tags.Name(name)) }

// newLimit makes the statistics of a limit's name (a key already
// sanitized).
func (s *Stats) newLimit(key string) *limitStats {
	p := rateLimitScope + key + "."
	return &limitStats{
		total:  s.counter(p + "total_hits"),
		within: s.counter(p + "within_limit"),
		near:   s.counter(p + "near_limit"),
		over:   s.counter(p + "over_limit"),
		shadow: s.counter(p + "shadow_mode"),
		// The limits denied by the local cache of over-limit keys,
		// counted in over_limit too.
		overLocal: s.counter(p + "over_limit_with_local_cache"),
	}
}

// limit returns the statistics of r's limit: by its name, made on first
// use; past MaxValueNames request-valued names of its rule, its domain's
// OtherKey.
func (s *Stats) limit(r *engine.Report) *limitStats {
	s.mu.RLock()
	ls := s.limits[r.Metric]
	s.mu.RUnlock()
	if ls != nil {
		return ls
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ls = s.limits[r.Metric]; ls != nil {
		return ls
	}
	if r.MetricValues {
		k := ruleKey{r.Domain, r.Rule}
		if s.perRule[k] >= MaxValueNames {
			if ls = s.other[r.Domain]; ls == nil {
				ls = s.newLimit(sanitize(r.Domain) + "." + OtherKey)
				s.other[r.Domain] = ls
			}
			return ls
		}
		s.perRule[k]++
	}
	ls = s.newLimit(sanitize(r.Metric))
	s.limits[r.Metric] = ls
	return ls
}

// Decided implements engine.Observer: a limit's hits, split as the
// reference splits them. An unlimited descriptor and a refund count
// nothing, as in the reference (which has no refunds).
func (s *Stats) Decided(r engine.Report) {
	if r.Outcome == engine.OutcomeUnlimited || r.Outcome == engine.OutcomeRefunded {
		return
	}
	ls := s.limit(&r)
	add := func(c *Counter, n int) {
		if n > 0 {
			c.Add(uint64(n))
		}
	}
	add(ls.total, r.Hits)
	add(ls.within, r.Within)
	add(ls.near, r.Near)
	add(ls.over, r.Over)
	if r.Outcome == engine.OutcomeShadowOverLimit {
		add(ls.shadow, r.Over)
	}
	if r.LocalCache {
		add(ls.overLocal, r.Over)
	}
}

// Unmatched implements engine.Observer; the reference counts nothing for
// a descriptor that matches no limit of a known domain.
func (*Stats) Unmatched(string) {}

// Requested implements engine.Observer: domain_not_found per descriptor
// of an unknown domain, the errors by kind, and the denials that the
// service's shadow mode turned into OK.
func (s *Stats) Requested(r engine.RequestReport) {
	switch {
	case r.Err != nil:
		if _, ok := errors.AsType[*engine.StoreError](r.Err); ok {
			s.service.redisErr.Inc()
		} else {
			s.service.serviceErr.Inc()
		}
	case r.UnknownDomain:
		s.notFound(r.Domain).Add(uint64(r.Descriptors))
	case r.ShadowOverride:
		s.service.shadow.Inc()
	}
}

// notFound is the domain_not_found counter of domain; past
// MaxUnknownDomains, OtherKey's.
func (s *Stats) notFound(domain string) *Counter {
	s.mu.RLock()
	c := s.unknown[domain]
	s.mu.RUnlock()
	if c != nil {
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c = s.unknown[domain]; c != nil {
		return c
	}
	if len(s.unknown) >= MaxUnknownDomains {
		if s.service.unknownOther == nil {
			s.service.unknownOther = s.counter(rateLimitScope + OtherKey + ".domain_not_found")
		}
		return s.service.unknownOther
	}
	c = s.counter(rateLimitScope + sanitize(domain) + ".domain_not_found")
	s.unknown[domain] = c
	return c
}

// ConfigLoaded counts a configuration loaded (err nil) or refused, at
// start, on a reload, or from xDS.
func (s *Stats) ConfigLoaded(err error) {
	if err != nil {
		s.service.configErr.Inc()
		return
	}
	s.service.configOK.Inc()
}
