package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
)

// Result is how one configured limit took part in a decision; it labels
// metrics.
type Result string

const (
	// ResultOK: the limit admitted the request and counted it.
	ResultOK Result = "ok"
	// ResultOverLimit: the limit denied the request (for a quota_mode limit,
	// the descriptor is OVER_LIMIT but the request is not denied).
	ResultOverLimit Result = "over_limit"
	// ResultShadowOverLimit: a shadow_mode limit would have denied; the
	// request was answered OK.
	ResultShadowOverLimit Result = "shadow_over_limit"
	// ResultNotCounted: another limit of the request denied it, so this one
	// did not count it.
	ResultNotCounted Result = "not_counted"
	// ResultUnlimited: an unlimited descriptor, never counted.
	ResultUnlimited Result = "unlimited"
)

// Observer receives every decision, for metrics. Its methods are called on
// the deciding goroutine and must be fast and safe for concurrent use.
type Observer interface {
	// Decided reports the part one configured limit (rule) took in a
	// decision in domain, for hits requested units.
	Decided(domain, rule string, r Result, hits int)
	// Unmatched reports a descriptor that matched no limit; domain is ""
	// when the request's domain is not configured.
	Unmatched(domain string)
	// StoreCall reports the duration and error of one store call.
	StoreCall(d time.Duration, err error)
}

// NopObserver ignores everything; the default Observer.
type NopObserver struct{}

// Decided implements Observer.
func (NopObserver) Decided(string, string, Result, int) {}

// Unmatched implements Observer.
func (NopObserver) Unmatched(string) {}

// StoreCall implements Observer.
func (NopObserver) StoreCall(time.Duration, error) {}

// Option configures a Service.
type Option func(*Service)

// WithObserver sets the Observer (default NopObserver).
func WithObserver(o Observer) Option { return func(s *Service) { s.obs = o } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(s *Service) { s.log = l } }

// WithClock sets the clock that places fixed windows for the resets the
// service computes itself (a requests_per_unit: 0 rule, a window with
// nothing counted yet); default time.Now.
func WithClock(now func() time.Time) Option { return func(s *Service) { s.now = now } }

// WithResponseHeaders makes every response carry RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset in response_headers_to_add for the
// descriptor closest to its limit, as the reference does with
// LIMIT_RESPONSE_HEADERS_ENABLED.
func WithResponseHeaders(on bool) Option { return func(s *Service) { s.headers = on } }

// WithHeaderNames renames the three headers of WithResponseHeaders, as the
// reference's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
// LIMIT_RESET_HEADER do; an empty name keeps the default.
func WithHeaderNames(limit, remaining, reset string) Option {
	return func(s *Service) {
		for _, x := range []struct {
			dst *string
			v   string
		}{{&s.hdrLimit, limit}, {&s.hdrRemaining, remaining}, {&s.hdrReset, reset}} {
			if x.v != "" {
				*x.dst = x.v
			}
		}
	}
}

// WithShadowMode answers every request OK, as the reference's SHADOW_MODE:
// the statuses still say which descriptors are over their limits, the
// limits decide and count as they would, and metrics count the denials;
// only the overall code admits. For trying limits on live traffic.
func WithShadowMode(on bool) Option { return func(s *Service) { s.shadowMode = on } }

// WithQuotaMode puts every limit in quota_mode, as the reference's
// QUOTA_MODE: a descriptor over its limit is reported (OK, remaining 0) but
// never denies the request.
func WithQuotaMode(on bool) Option { return func(s *Service) { s.quotaMode = on } }

// Header names of WithResponseHeaders, the reference's defaults.
const (
	HeaderLimit     = "RateLimit-Limit"
	HeaderRemaining = "RateLimit-Remaining"
	HeaderReset     = "RateLimit-Reset"
)

// Service implements pb.RateLimitServiceServer. It is safe for concurrent
// use; SetConfig swaps the configuration atomically.
type Service struct {
	pb.UnimplementedRateLimitServiceServer

	store   sluice.Store
	multi   sluice.MultiStore // store, when it decides all-or-nothing
	cfg     atomic.Pointer[config.Config]
	obs     Observer
	log     *slog.Logger
	headers bool
	now     func() time.Time

	hdrLimit, hdrRemaining, hdrReset string
	shadowMode, quotaMode            bool
	bounds                           Bounds

	// limits caches the current_limit of each configured rule: protobuf
	// messages are safe to marshal concurrently, so responses share them.
	limits sync.Map // *config.Rule -> *pb.RateLimitResponse_RateLimit
}

var _ pb.RateLimitServiceServer = (*Service)(nil)

// New returns a Service deciding through store with configuration cfg.
func New(store sluice.Store, cfg *config.Config, opts ...Option) *Service {
	s := &Service{store: store, obs: NopObserver{}, log: slog.New(slog.DiscardHandler), now: time.Now,
		hdrLimit: HeaderLimit, hdrRemaining: HeaderRemaining, hdrReset: HeaderReset, bounds: DefaultBounds}
	s.multi, _ = store.(sluice.MultiStore)
	for _, o := range opts {
		o(s)
	}
	s.cfg.Store(cfg)
	return s
}

// SetConfig replaces the configuration; requests already being decided
// finish with the one they started with.
func (s *Service) SetConfig(c *config.Config) {
	s.cfg.Store(c)
	s.limits.Clear()
}

// Bounds returns the bounds of what callers send (WithBounds).
func (s *Service) Bounds() Bounds { return s.bounds }

// Config returns the configuration in force.
func (s *Service) Config() *config.Config { return s.cfg.Load() }

// check is one limit applied to one descriptor of a request.
type check struct {
	desc int
	rule *config.Rule
	key  string
	n    int
	sum  int // n and the request's earlier costs on the same counter (enforced limits)
	d    sluice.Decision
	over bool // this limit denied (or could never admit n)
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
// period p that holds now: where a fixed window resets.
func windowLeft(p time.Duration, now time.Time) time.Duration {
	if p <= 0 {
		p = time.Second
	}
	return p - time.Duration(now.UnixNano()%int64(p))
}

// maxHits bounds a hits_addend: anything larger exceeds every capacity.
const maxHits = math.MaxInt32

// ShouldRateLimit implements pb.RateLimitServiceServer.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if err := s.bounds.checkRequest(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	reqHits := uint64(max(req.GetHitsAddend(), 1))
	cfg := s.cfg.Load()
	domain := req.Domain

	resp := &pb.RateLimitResponse{
		OverallCode: pb.RateLimitResponse_OK,
		Statuses:    make([]*pb.RateLimitResponse_DescriptorStatus, len(descs)),
	}
	matches := make([]config.Match, len(descs))
	hits := make([]int, len(descs))
	var entries []config.Descriptor
	known := cfg != nil
	var replaced map[string]bool
	for i, d := range descs {
		if d == nil || len(d.Entries) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d] has no entries", i)
		}
		if d.IsNegativeHits {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d].is_negative_hits is not supported: sluice never returns quota", i)
		}
		h := reqHits
		if d.HitsAddend != nil {
			h = d.HitsAddend.Value
		}
		hits[i] = int(min(h, maxHits))
		if !known {
			continue
		}
		entries = entries[:0]
		for _, e := range d.Entries {
			entries = append(entries, config.Descriptor{Key: e.GetKey(), Value: e.GetValue()})
		}
		m, ok := cfg.Match(domain, entries)
		if !ok {
			known = false
			continue
		}
		if d.Limit != nil {
			r, err := overrideRule(d.Limit)
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d].limit: %v", i, err)
			}
			// The reference counts an override on the counter of the
			// descriptor's entries and unit, which the configured limit of
			// the same entries and unit shares.
			m = config.Match{Rules: []*config.Rule{r}, Key: config.CountingKey(domain, entries)}
		}
		matches[i] = m
		for _, r := range m.Rules {
			for _, rp := range r.Replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[rp] = true
			}
		}
	}
	if !known {
		// The reference answers OK, with no limit, for a domain it does not
		// know: Envoy's filter may be configured before the service is.
		for i := range resp.Statuses {
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
			s.obs.Unmatched("")
		}
		return resp, nil
	}

	var enforced, advisory []check
	unlimited := make([]bool, len(descs))
	for i := range descs {
		m := matches[i]
		for j, r := range m.Rules {
			if r.ConfiguredName != "" && replaced[r.ConfiguredName] {
				continue
			}
			if r.Unlimited {
				unlimited[i] = true
				s.obs.Decided(domain, r.Name, ResultUnlimited, hits[i])
				continue
			}
			key := m.Key
			for _, p := range m.Rules[:j] { // two limits of one node sharing a state
				if p.Limit.Algorithm == r.Limit.Algorithm && p.Limit.Period == r.Limit.Period {
					key += "#" + strconv.Itoa(j)
					break
				}
			}
			c := check{desc: i, rule: r, key: key, n: hits[i]}
			if r.ShadowMode || r.QuotaMode || s.quotaMode {
				advisory = append(advisory, c)
			} else {
				enforced = append(enforced, c)
			}
		}
	}
	if s.multi != nil && len(enforced) > sluice.MaxMultiRequests {
		// One all-or-nothing decision takes at most MaxMultiRequests limits.
		return nil, status.Errorf(codes.InvalidArgument, "the descriptors apply %d limits, more than %d in one decision", len(enforced), sluice.MaxMultiRequests)
	}
	admitted, err := s.decideEnforced(ctx, enforced)
	if err != nil {
		return nil, s.storeError(ctx, err)
	}
	for k := range advisory {
		c := &advisory[k]
		n := c.n
		if !admitted {
			n = 0 // a denied request is counted by no limit
		}
		if c.rule.Deny {
			c.over, c.d = n > 0, denyDecision(c.rule, s.now(), n)
			continue
		}
		if n > c.rule.Limit.Capacity() {
			c.over, n = true, 0
		}
		d, err := s.allowN(ctx, c.key, c.rule.Limit, n)
		if err != nil {
			return nil, s.storeError(ctx, err)
		}
		c.d = d
		c.over = c.over || !d.Allowed
	}

	// Report, per limit and per descriptor.
	for _, c := range enforced {
		r := ResultOK
		switch {
		case c.over:
			r = ResultOverLimit
		case !admitted:
			r = ResultNotCounted
		}
		s.obs.Decided(domain, c.rule.Name, r, c.n)
	}
	for _, c := range advisory {
		r := ResultOK
		switch {
		case !admitted && !c.over:
			r = ResultNotCounted
		case c.over && c.rule.ShadowMode:
			r = ResultShadowOverLimit
		case c.over:
			r = ResultOverLimit
		}
		s.obs.Decided(domain, c.rule.Name, r, c.n)
	}
	if !admitted {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	var quotaOver []int
	// The checks are in descriptor order: each descriptor's are the next
	// run of each list, so that reporting is linear in the checks.
	var ei, ai int
	for i := range descs {
		ej, aj := ei, ai
		for ej < len(enforced) && enforced[ej].desc == i {
			ej++
		}
		for aj < len(advisory) && advisory[aj].desc == i {
			aj++
		}
		en, ad := enforced[ei:ej], advisory[ai:aj]
		ei, ai = ej, aj
		switch {
		case unlimited[i]:
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
			continue
		}
		rep := pick(en, ad)
		if rep == nil {
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
			s.obs.Unmatched(domain)
			continue
		}
		// A shadow-mode limit is OK already: quota mode leaves it as it
		// is, as the reference's.
		quota := !rep.rule.ShadowMode && (rep.rule.QuotaMode || s.quotaMode)
		resp.Statuses[i] = descriptorStatus(rep, s.currentLimit(rep.rule), quota, s.now)
		if rep.over && quota {
			quotaOver = append(quotaOver, i)
		}
	}
	if s.headers {
		resp.ResponseHeadersToAdd = s.responseHeaders(resp)
	}
	if s.shadowMode {
		// After the headers, which still describe the denying descriptor,
		// as the reference's.
		resp.OverallCode = pb.RateLimitResponse_OK
	}
	// The reference keeps a quota-mode descriptor over its limit OK, with
	// its limit, nothing remaining and no reset; its headers still tell the
	// reset.
	for _, i := range quotaOver {
		resp.Statuses[i].DurationUntilReset = nil
	}
	return resp, nil
}

// decideEnforced decides the enforcing limits together: all admit and count,
// or none counts. It reports whether the request is admitted.
func (s *Service) decideEnforced(ctx context.Context, cs []check) (bool, error) {
	if len(cs) == 0 {
		return true, nil
	}
	// Some limits deny without asking the store whether they would admit:
	// a requests_per_unit: 0 rule asked for a cost above 0, and a cost that
	// the limit could never admit at once, with the request's earlier costs
	// on the same counter (a descriptor sent twice): waiting never helps.
	admitted := true
	var sums map[counter]int // the costs so far per counter
	for k := range cs {
		c := &cs[k]
		if c.rule.Deny {
			c.over, c.d = c.n > 0, denyDecision(c.rule, s.now(), c.n)
			admitted = admitted && !c.over
			continue
		}
		// The request's earlier costs on the same counter, summed as the
		// checks go: one map look-up per limit, not a scan of the earlier
		// ones.
		sc := counter{c.key, c.rule.Limit.Algorithm, c.rule.Limit.Period}
		if sums == nil && len(cs) > 1 {
			sums = make(map[counter]int, len(cs))
		}
		c.sum = c.n
		if sums != nil {
			c.sum += sums[sc]
			sums[sc] = c.sum
		}
		if c.sum > c.rule.Limit.Capacity() {
			c.over, admitted = true, false
		}
	}
	shortcut := !admitted // then every store call below is a peek
	reqs := make([]sluice.Request, 0, len(cs))
	idx := make([]int, 0, len(cs))
	for k, c := range cs {
		if c.rule.Deny {
			continue
		}
		n := c.n
		if shortcut {
			n = 0
		}
		reqs = append(reqs, sluice.Request{Key: c.key, Limit: c.rule.Limit, N: n})
		idx = append(idx, k)
	}
	ds := []sluice.Decision{}
	if len(reqs) > 0 {
		var err error
		ds, err = s.allowMulti(ctx, reqs)
		if err != nil {
			return false, err
		}
	}
	anyBlocker := shortcut
	for j, k := range idx {
		c := &cs[k]
		c.d = ds[j]
		if shortcut {
			// A peek: a limit that could not admit its own cost now,
			// after the request's earlier costs on its counter, is over
			// too, as the reference reports it.
			c.over = c.over || c.n > 0 && c.d.Remaining < c.sum
			continue
		}
		if !ds[j].Allowed {
			admitted = false
			if ds[j].RetryAfter > 0 {
				c.over, anyBlocker = true, true
			}
		}
	}
	if !admitted && !anyBlocker { // a store that names no blocker: all are
		for k := range cs {
			cs[k].over = true
		}
	}
	return admitted, nil
}

// counter names the state a limit counts on: a key, an algorithm and a
// period.
type counter struct {
	key    string
	alg    sluice.Algorithm
	period time.Duration
}

func (s *Service) allowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	if len(reqs) == 1 {
		d, err := s.allowN(ctx, reqs[0].Key, reqs[0].Limit, reqs[0].N)
		if err != nil {
			return nil, err
		}
		return []sluice.Decision{d}, nil
	}
	start := time.Now()
	if s.multi != nil {
		ds, err := s.multi.AllowMulti(ctx, reqs)
		s.obs.StoreCall(time.Since(start), err)
		return ds, err
	}
	// A store without AllowMulti: one call per limit, stopping at the first
	// denial. Limits decided before it stay counted; the all-or-nothing
	// guarantee needs a MultiStore.
	ds := make([]sluice.Decision, len(reqs))
	denied := false
	for k, r := range reqs {
		n := r.N
		if denied {
			n = 0
		}
		d, err := s.store.AllowN(ctx, r.Key, r.Limit, n)
		if err != nil {
			s.obs.StoreCall(time.Since(start), err)
			return nil, err
		}
		if denied {
			d.Allowed = false
		}
		ds[k] = d
		denied = denied || !d.Allowed
	}
	s.obs.StoreCall(time.Since(start), nil)
	return ds, nil
}

func (s *Service) allowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	start := time.Now()
	d, err := s.store.AllowN(ctx, key, lim, n)
	s.obs.StoreCall(time.Since(start), err)
	return d, err
}

// storeError turns a store failure into a gRPC status: the context's own
// code when it ended, Unavailable otherwise.
func (s *Service) storeError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	s.log.Warn("store failed", "err", err)
	if errors.Is(err, sluice.ErrInvalidLimit) || errors.Is(err, sluice.ErrInvalidKey) {
		return status.Errorf(codes.InvalidArgument, "%v", err)
	}
	return status.Errorf(codes.Unavailable, "store: %v", err)
}

// pick returns the check that reports a descriptor, given its enforced and
// advisory checks: the first that denied (or a quota-mode one over its
// limit), else the one with the least remaining; nil when no limit applies.
func pick(enforced, advisory []check) *check {
	var best *check
	for _, cs := range [][]check{enforced, advisory} {
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

// currentLimit returns the rule's current_limit, cached unless the rule is
// a request's own override.
func (s *Service) currentLimit(r *config.Rule) *pb.RateLimitResponse_RateLimit {
	if r.Override {
		return CurrentLimit(r)
	}
	if cl, ok := s.limits.Load(r); ok {
		return cl.(*pb.RateLimitResponse_RateLimit)
	}
	cl := CurrentLimit(r)
	s.limits.Store(r, cl)
	return cl
}

func descriptorStatus(c *check, cl *pb.RateLimitResponse_RateLimit, quota bool, now func() time.Time) *pb.RateLimitResponse_DescriptorStatus {
	st := &pb.RateLimitResponse_DescriptorStatus{
		Code:           pb.RateLimitResponse_OK,
		CurrentLimit:   cl,
		LimitRemaining: uint32(min(max(c.d.Remaining, 0), math.MaxUint32)),
	}
	reset := c.d.ResetAfter
	if c.over {
		st.LimitRemaining = 0
		if c.d.RetryAfter > 0 {
			reset = c.d.RetryAfter
		}
		if !c.rule.ShadowMode && !quota {
			st.Code = pb.RateLimitResponse_OVER_LIMIT
		}
	}
	if reset == 0 && c.rule.Limit.Algorithm == sluice.FixedWindow {
		// A fixed window with nothing counted yet resets with its window,
		// as the reference reports it, not "now".
		reset = windowLeft(c.rule.Limit.Period, now())
	}
	st.DurationUntilReset = durationpb.New(untilReset(reset, c.rule.Limit.Period))
	return st
}

// untilReset is duration_until_reset: whole seconds, rounded up, as the
// reference reports them, for limits of a second or more; exact below.
func untilReset(d, period time.Duration) time.Duration {
	if period < time.Second {
		return d
	}
	return time.Duration(CeilSeconds(d)) * time.Second
}

var units = []struct {
	d time.Duration
	u pb.RateLimitResponse_RateLimit_Unit
}{
	{365 * 24 * time.Hour, pb.RateLimitResponse_RateLimit_YEAR},
	{30 * 24 * time.Hour, pb.RateLimitResponse_RateLimit_MONTH},
	{7 * 24 * time.Hour, pb.RateLimitResponse_RateLimit_WEEK},
	{24 * time.Hour, pb.RateLimitResponse_RateLimit_DAY},
	{time.Hour, pb.RateLimitResponse_RateLimit_HOUR},
	{time.Minute, pb.RateLimitResponse_RateLimit_MINUTE},
	{time.Second, pb.RateLimitResponse_RateLimit_SECOND},
}

// CurrentLimit is the current_limit that reports rule. A reference unit is
// reported as is (with unit_multiplier when the rule has one). A `window` extension is reported in the largest unit that
// divides it, with unit_multiplier the number of units (30s is 5 per
// SECOND×30, 2h is HOUR×2); a window that is not a whole number of seconds
// is reported as the same sustained rate per SECOND, rounded up.
func CurrentLimit(r *config.Rule) *pb.RateLimitResponse_RateLimit {
	cl := &pb.RateLimitResponse_RateLimit{Name: r.ConfiguredName, RequestsPerUnit: uint32(min(r.Limit.Rate, math.MaxUint32))}
	p := r.Limit.Period
	for _, u := range units {
		if (r.Unit == "" || r.Unit == u.u.String()) && p >= u.d && p%u.d == 0 {
			cl.Unit = u.u
			if m := p / u.d; m > 1 {
				cl.UnitMultiplier = wrapperspb.UInt32(uint32(min(m, math.MaxUint32)))
			}
			return cl
		}
	}
	// Sub-second or fractional seconds: the rate per second, rounded up.
	perSec := (int64(r.Limit.Rate)*int64(time.Second) + int64(p) - 1) / int64(p)
	cl.Unit = pb.RateLimitResponse_RateLimit_SECOND
	cl.RequestsPerUnit = uint32(min(perSec, math.MaxUint32))
	return cl
}

// responseHeaders builds the RateLimit-* headers, under their configured
// names, for the descriptor closest to its limit (a denying one when the
// request is denied).
func (s *Service) responseHeaders(resp *pb.RateLimitResponse) []*core.HeaderValue {
	st := Closest(resp)
	if st == nil {
		return nil
	}
	return []*core.HeaderValue{
		{Key: s.hdrLimit, Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
		{Key: s.hdrRemaining, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
		{Key: s.hdrReset, Value: strconv.FormatInt(CeilSeconds(st.DurationUntilReset.AsDuration()), 10)},
	}
}

// Closest returns the status that headers describe, as the reference picks
// it: the last OVER_LIMIT descriptor when the request is denied, else the
// first limited descriptor with the least remaining; nil when no descriptor
// has a limit.
func Closest(resp *pb.RateLimitResponse) *pb.RateLimitResponse_DescriptorStatus {
	var best, over *pb.RateLimitResponse_DescriptorStatus
	for _, st := range resp.GetStatuses() {
		if st.GetCurrentLimit() == nil {
			continue
		}
		if st.Code == pb.RateLimitResponse_OVER_LIMIT {
			over = st
		}
		if best == nil || st.LimitRemaining < best.LimitRemaining {
			best = st
		}
	}
	if over != nil && resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
		return over
	}
	return best
}

// CeilSeconds rounds d up to whole seconds, as Retry-After and
// RateLimit-Reset want.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// overrideRule is the fixed-window limit of a descriptor's `limit` override.
func overrideRule(o *rlpb.RateLimitDescriptor_RateLimitOverride) (*config.Rule, error) {
	u := pb.RateLimitResponse_RateLimit_Unit(o.Unit)
	var period time.Duration
	for _, x := range units {
		if x.u == u {
			period = x.d
		}
	}
	if period == 0 {
		return nil, fmt.Errorf("unit %v is not supported", o.Unit)
	}
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: int(o.RequestsPerUnit), Period: period}
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	return &config.Rule{Name: "override", Limit: lim, Unit: u.String(), Override: true}, nil
}
