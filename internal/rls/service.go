package rls

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/engine"
)

// Observer receives every decision, for metrics (engine.Observer).
type Observer = engine.Observer

// NopObserver ignores everything; the default Observer.
type NopObserver = engine.NopObserver

// Option configures a Service.
type Option func(*Service)

// engineOption is an Option of the Service's engine.
func engineOption(o engine.Option) Option {
	return func(s *Service) { s.eopts = append(s.eopts, o) }
}

// WithObserver sets the Observer (default NopObserver).
func WithObserver(o Observer) Option { return engineOption(engine.WithObserver(o)) }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return engineOption(engine.WithLogger(l)) }

// WithClock sets the clock that places fixed windows for the resets the
// service computes itself (a requests_per_unit: 0 rule, a window with
// nothing counted yet); default time.Now.
func WithClock(now func() time.Time) Option { return engineOption(engine.WithClock(now)) }

// WithShadowMode answers every request OK, as the reference's SHADOW_MODE
// (engine.WithShadowMode).
func WithShadowMode(on bool) Option { return engineOption(engine.WithShadowMode(on)) }

// WithQuotaMode puts every limit in quota_mode, as the reference's
// QUOTA_MODE (engine.WithQuotaMode).
func WithQuotaMode(on bool) Option { return engineOption(engine.WithQuotaMode(on)) }

// WithCounting sets the counting of the rules that do not set their own
// (engine.WithCounting).
func WithCounting(c sluice.Counting) Option { return engineOption(engine.WithCounting(c)) }

// WithNearLimitRatio sets the near-limit threshold of the metrics
// (engine.WithNearLimitRatio).
func WithNearLimitRatio(r float64) Option { return engineOption(engine.WithNearLimitRatio(r)) }

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
// safe for concurrent use; SetConfig swaps the configuration atomically.
type Service struct {
	pb.UnimplementedRateLimitServiceServer

	eng   *engine.Engine
	eopts []engine.Option

	headers                          bool
	hdrLimit, hdrRemaining, hdrReset string

	// limits caches the current_limit of each configured rule: protobuf
	// messages are safe to marshal concurrently, so responses share them.
	limits sync.Map // *config.Rule -> *pb.RateLimitResponse_RateLimit
}

var _ pb.RateLimitServiceServer = (*Service)(nil)

// New returns a Service deciding through store with configuration cfg.
func New(store sluice.Store, cfg *config.Config, opts ...Option) *Service {
	s := &Service{hdrLimit: HeaderLimit, hdrRemaining: HeaderRemaining, hdrReset: HeaderReset}
	for _, o := range opts {
		o(s)
	}
	s.eng = engine.New(store, cfg, s.eopts...)
	s.eopts = nil
	return s
}

// SetConfig replaces the configuration; requests already being decided
// finish with the one they started with.
func (s *Service) SetConfig(c *config.Config) {
	s.eng.SetConfig(c)
	s.limits.Clear()
}

// Bounds returns the bounds of what callers send (WithBounds).
func (s *Service) Bounds() Bounds { return s.eng.Bounds() }

// Config returns the configuration in force.
func (s *Service) Config() *config.Config { return s.eng.Config() }

// Engine returns the engine that decides the Service's requests, for the
// other protocols (the HTTP endpoints) to share.
func (s *Service) Engine() *engine.Engine { return s.eng }

// ShouldRateLimit implements pb.RateLimitServiceServer.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	er := request(req)
	res, err := s.eng.Decide(ctx, &er)
	if err != nil {
		return nil, grpcError(err)
	}
	resp := &pb.RateLimitResponse{
		OverallCode: code(res.Code),
		Statuses:    make([]*pb.RateLimitResponse_DescriptorStatus, len(res.Statuses)),
	}
	for i := range res.Statuses {
		st := &res.Statuses[i]
		ps := &pb.RateLimitResponse_DescriptorStatus{Code: code(st.Code)}
		switch {
		case st.Unlimited:
			ps.LimitRemaining = math.MaxUint32
		case st.Rule != nil:
			ps.CurrentLimit = s.currentLimit(st.Rule)
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

// grpcError is the gRPC status of an engine error: InvalidArgument for a
// request that cannot be decided as sent, the context's code when it
// ended, Unavailable when the store made no decision.
func grpcError(err error) error {
	var re *engine.RequestError
	if errors.As(err, &re) {
		return status.Error(codes.InvalidArgument, re.Error())
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
