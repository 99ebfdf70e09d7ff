package rls

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

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
	rb := getRequest()
	defer putRequest(rb)
	rb.fill(req)
	res := &rb.res
	if err := s.eng.DecideInto(ctx, &rb.er, res); err != nil {
		return nil, grpcError(err)
	}
	resp, boxes := newResponse(len(res.Statuses))
	resp.OverallCode = code(res.Code)
	var limits *limitCache
	for i := range res.Statuses {
		st := &res.Statuses[i]
		ps := &boxes[i].st
		ps.Code = code(st.Code)
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
				// durationpb.New, in the status's box.
				dur := &boxes[i].dur
				dur.Seconds, dur.Nanos = int64(st.UntilReset/time.Second), int32(st.UntilReset%time.Second)
				ps.DurationUntilReset = dur
			}
		}
	}
	if s.headers {
		resp.ResponseHeadersToAdd = s.responseHeaders(res, resp)
	}
	return resp, nil
}

// statusBox holds a descriptor's status and its duration_until_reset, so
// that a response takes one allocation for all its statuses.
type statusBox struct {
	st  pb.RateLimitResponse_DescriptorStatus
	dur durationpb.Duration
}

// oneResponse is the response of a request of one descriptor, the usual,
// in one allocation.
type oneResponse struct {
	resp pb.RateLimitResponse
	ptr  [1]*pb.RateLimitResponse_DescriptorStatus
	box  [1]statusBox
}

// newResponse returns a response with n empty statuses, and their boxes:
// in one allocation for one descriptor, in three for more. (Responses are
// marshalled after ShouldRateLimit returns, so they are never pooled.)
func newResponse(n int) (*pb.RateLimitResponse, []statusBox) {
	if n == 1 {
		o := &oneResponse{}
		o.ptr[0] = &o.box[0].st
		o.resp.Statuses = o.ptr[:]
		return &o.resp, o.box[:]
	}
	resp := &pb.RateLimitResponse{Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, n)}
	boxes := make([]statusBox, n)
	for i := range boxes {
		resp.Statuses[i] = &boxes[i].st
	}
	return resp, boxes
}

// requestBuf holds a request's translation and the engine's result,
// reused across requests (sync.Pool): the engine keeps nothing of either
// after DecideInto returns.
type requestBuf struct {
	er      engine.Request
	descs   []engine.Descriptor
	entries []engine.Entry
	res     engine.Result
}

var requestBufs = sync.Pool{New: func() any { return new(requestBuf) }}

// maxPooledEntries bounds the entries (and descriptors) a pooled buffer
// keeps room for: a larger request's buffer is left to the garbage
// collector, so that one large request does not pin memory.
const maxPooledEntries = 64

func getRequest() *requestBuf { return requestBufs.Get().(*requestBuf) }

func putRequest(rb *requestBuf) {
	if cap(rb.entries) > maxPooledEntries || cap(rb.descs) > maxPooledEntries || cap(rb.res.Statuses) > maxPooledEntries {
		return
	}
	// Drop every reference to the request and the configuration.
	clear(rb.descs[:cap(rb.descs)])
	clear(rb.entries[:cap(rb.entries)])
	clear(rb.res.Statuses[:cap(rb.res.Statuses)])
	rb.er = engine.Request{}
	rb.res = engine.Result{Statuses: rb.res.Statuses[:0]}
	requestBufs.Put(rb)
}

// fill translates req into rb.er, in rb's descriptors and entries. The
// entries of all descriptors share one array.
func (rb *requestBuf) fill(req *pb.RateLimitRequest) {
	descs := req.GetDescriptors()
	rb.er = engine.Request{Domain: req.GetDomain(), Hits: req.GetHitsAddend()}
	if len(descs) == 0 {
		return
	}
	total := 0
	for _, d := range descs {
		total += len(d.GetEntries())
	}
	if cap(rb.descs) < len(descs) {
		rb.descs = make([]engine.Descriptor, len(descs))
	}
	if cap(rb.entries) < total {
		rb.entries = make([]engine.Entry, 0, total)
	}
	rb.er.Descriptors = rb.descs[:len(descs)]
	entries := rb.entries[:0]
	for i, d := range descs {
		ed := &rb.er.Descriptors[i]
		*ed = engine.Descriptor{}
		if d == nil {
			continue
		}
		start := len(entries)
		for _, e := range d.Entries {
			entries = append(entries, engine.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
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
