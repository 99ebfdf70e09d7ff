package rls

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync"
	"sync/atomic"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
)

// Option configures a Service.
type Option func(*Service)

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

// Header names of WithResponseHeaders, the reference's defaults.
const (
	HeaderLimit     = "RateLimit-Limit"
	HeaderRemaining = "RateLimit-Remaining"
	HeaderReset     = "RateLimit-Reset"
)

// Service implements pb.RateLimitServiceServer: it translates each request
// into an engine.Request and the engine's Result into the response. It is
// safe for concurrent use; the engine's configuration may change between
// any two requests (engine.SetConfig).
type Service struct {
	pb.UnimplementedRateLimitServiceServer

	eng *engine.Engine

	headers                          bool
	metadata                         bool // WithDynamicMetadata
	hdrLimit, hdrRemaining, hdrReset string

	// limits caches the current_limit of each rule of one configuration:
	// protobuf messages are safe to marshal concurrently, so responses
	// share them. A new configuration in the engine starts a new cache.
	limits atomic.Pointer[limitCache]
}

// limitCache is the current_limit of each rule of cfg.
type limitCache struct {
	cfg *config.Config
	m   sync.Map // *config.Rule -> *pb.RateLimitResponse_RateLimit
}

var _ pb.RateLimitServiceServer = (*Service)(nil)

// New returns a Service that decides by eng.
func New(eng *engine.Engine, opts ...Option) *Service {
	s := &Service{eng: eng, hdrLimit: HeaderLimit, hdrRemaining: HeaderRemaining, hdrReset: HeaderReset}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Engine returns the engine that decides the Service's requests.
func (s *Service) Engine() *engine.Engine { return s.eng }

// cache returns the current_limit cache of the engine's configuration.
func (s *Service) cache() *limitCache {
	cfg := s.eng.Config()
	c := s.limits.Load()
	if c == nil || c.cfg != cfg {
		n := &limitCache{cfg: cfg}
		if s.limits.CompareAndSwap(c, n) {
			return n
		}
		c = s.limits.Load()
	}
	return c
}

// ShouldRateLimit implements pb.RateLimitServiceServer.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	er := request(req)
	res, err := s.eng.Decide(ctx, &er)
	if err != nil {
		return nil, grpcError(ctx, err)
	}
	resp := &pb.RateLimitResponse{
		OverallCode: code(res.Code),
		Statuses:    make([]*pb.RateLimitResponse_DescriptorStatus, len(res.Statuses)),
	}
	var limits *limitCache
	for i := range res.Statuses {
		st := &res.Statuses[i]
		ps := &pb.RateLimitResponse_DescriptorStatus{Code: code(st.Code)}
		switch {
		case st.Unlimited:
			ps.LimitRemaining = math.MaxUint32
		case st.Rule != nil:
			if limits == nil {
				limits = s.cache()
			}
			ps.CurrentLimit = limits.currentLimit(st.Rule)
			ps.LimitRemaining = st.Remaining
			if st.HasReset {
				ps.DurationUntilReset = durationpb.New(st.UntilReset)
			}
		}
		resp.Statuses[i] = ps
	}
	if s.headers {
		resp.ResponseHeadersToAdd = s.responseHeaders(&res, resp)
	}
	if s.metadata {
		resp.DynamicMetadata = dynamicMetadata(req, &res)
	}
	return resp, nil
}

// request translates a RateLimitRequest into the engine's. The entries of
// all descriptors share one array.
func request(req *pb.RateLimitRequest) engine.Request {
	descs := req.GetDescriptors()
	er := engine.Request{Domain: req.GetDomain(), Hits: req.GetHitsAddend()}
	if len(descs) == 0 {
		return er
	}
	total := 0
	for _, d := range descs {
		total += len(d.GetEntries())
	}
	er.Descriptors = make([]engine.Descriptor, len(descs))
	entries := make([]engine.Entry, 0, total)
	for i, d := range descs {
		if d == nil {
			continue
		}
		start := len(entries)
		for _, e := range d.Entries {
			entries = append(entries, engine.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		ed := &er.Descriptors[i]
		ed.Entries = entries[start:len(entries):len(entries)]
		if h := d.HitsAddend; h != nil {
			ed.Hits, ed.HasHits = h.Value, true
		}
		ed.NegativeHits = d.IsNegativeHits
		if o := d.Limit; o != nil {
			u := pb.RateLimitResponse_RateLimit_Unit(o.Unit)
			ed.Limit = &engine.Override{RequestsPerUnit: o.RequestsPerUnit, Unit: u.String(), Period: unitPeriod(u)}
		}
	}
	return er
}

// grpcError is the gRPC status of an engine error for a call whose
// context is ctx: InvalidArgument for a request that cannot be decided as
// sent; the context's code when the call's own context ended; when the
// store made no decision, Unknown under the failure mode error
// (sluice.ErrNoDecision: the code envoyproxy/ratelimit answers while its
// Redis fails, which Envoy's filter decides by its failure_mode_deny),
// also when a store's own deadline (--redis-timeout) passed; else
// Unavailable (or the code of a store's deadline).
func grpcError(ctx context.Context, err error) error {
	var re *engine.RequestError
	if errors.As(err, &re) {
		return status.Error(codes.InvalidArgument, re.Error())
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if errors.Is(err, sluice.ErrNoDecision) {
		return status.Error(codes.Unknown, err.Error())
	}
	var se *engine.StoreError
	if errors.As(err, &se) && (errors.Is(se.Err, context.Canceled) || errors.Is(se.Err, context.DeadlineExceeded)) {
		return status.FromContextError(se.Err).Err()
	}
	return status.Error(codes.Unavailable, err.Error())
}

func code(c engine.Code) pb.RateLimitResponse_Code {
	if c == engine.OverLimit {
		return pb.RateLimitResponse_OVER_LIMIT
	}
	return pb.RateLimitResponse_OK
}

// currentLimit returns the rule's current_limit, cached unless the rule is
// a request's own override.
func (c *limitCache) currentLimit(r *config.Rule) *pb.RateLimitResponse_RateLimit {
	if r.Override {
		return CurrentLimit(r)
	}
	if cl, ok := c.m.Load(r); ok {
		return cl.(*pb.RateLimitResponse_RateLimit)
	}
	cl := CurrentLimit(r)
	c.m.Store(r, cl)
	return cl
}

// CurrentLimit is the current_limit that reports rule (engine.LimitOf).
func CurrentLimit(r *config.Rule) *pb.RateLimitResponse_RateLimit {
	l := engine.LimitOf(r)
	cl := &pb.RateLimitResponse_RateLimit{
		Name:            l.Name,
		RequestsPerUnit: l.RequestsPerUnit,
		Unit:            pb.RateLimitResponse_RateLimit_Unit(pb.RateLimitResponse_RateLimit_Unit_value[l.Unit]),
	}
	if l.Multiplier > 1 {
		cl.UnitMultiplier = wrapperspb.UInt32(l.Multiplier)
	}
	return cl
}

// responseHeaders builds the RateLimit-* headers, under their configured
// names, for the descriptor closest to its limit (a denying one when the
// request is denied).
func (s *Service) responseHeaders(res *engine.Result, resp *pb.RateLimitResponse) []*core.HeaderValue {
	i := res.Closest(res.Denied)
	if i < 0 {
		return nil
	}
	st := &res.Statuses[i]
	return []*core.HeaderValue{
		{Key: s.hdrLimit, Value: strconv.FormatUint(uint64(resp.Statuses[i].CurrentLimit.RequestsPerUnit), 10)},
		{Key: s.hdrRemaining, Value: strconv.FormatUint(uint64(st.Remaining), 10)},
		{Key: s.hdrReset, Value: strconv.FormatInt(engine.CeilSeconds(st.UntilReset), 10)},
	}
}
