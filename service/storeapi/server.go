package storeapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice"
	storev1 "github.com/sluicehq/sluice/api/sluice/store/v1"
	"github.com/sluicehq/sluice/internal/storewire"
	"github.com/sluicehq/sluice/service/admin"
	"github.com/sluicehq/sluice/service/engine"
)

// MaxMessageSize is the largest request the store API reads, in bytes
// (gRPC ResourceExhausted beyond). The largest valid request, an
// AllowMulti of sluice.MaxMultiRequests requests with keys of
// sluice.MaxKeyLen bytes, is about 18 KiB.
const MaxMessageSize = 64 << 10

// MaxHeaderListSize bounds the metadata of a call (its headers: the
// bearer token, at most admin.MaxTokenLen bytes, and gRPC's own), in
// bytes.
const MaxHeaderListSize = 16 << 10

// Server is the store API over a store. It is safe for concurrent use.
type Server struct {
	storev1.UnimplementedStoreServer
	store   sluice.FullStore
	granter sluice.Granter // nil: Grant is Unimplemented
	bounds  engine.Bounds
	auth    *admin.Authenticator
	metrics *metrics // nil: none
	log     *slog.Logger
	caps    capabilities
}

// Option configures a Server.
type Option func(*Server) error

// WithBounds sets the bounds that requests are checked against before the
// store is called (engine.Bounds: MaxRate, MaxLogRate, MaxBurst, MaxPeriod,
// MaxHits, MaxPermits, MaxPermitLease; a zero field is no bound). By default only the library's
// bounds apply, which every store checks itself.
func WithBounds(b engine.Bounds) Option {
	return func(s *Server) error { s.bounds = b; return nil }
}

// WithGranter answers Grant with g (the served store's own grants: the
// Redis or memory store under its failover, which a grant must not pass
// through, since a grant cannot be decided by a failure mode). By default
// Grant is answered by the store given to New when it is a sluice.Granter,
// and is Unimplemented otherwise.
func WithGranter(g sluice.Granter) Option {
	return func(s *Server) error {
		if g == nil {
			return errors.New("storeapi: WithGranter(nil)")
		}
		s.granter = g
		return nil
	}
}

// WithAuthenticator authenticates every call by a (see
// admin.NewAuthenticator). By default only loopback callers are answered.
func WithAuthenticator(a *admin.Authenticator) Option {
	return func(s *Server) error {
		if a == nil {
			return errors.New("storeapi: WithAuthenticator(nil)")
		}
		s.auth = a
		return nil
	}
}

// WithMetrics counts the calls, by method and status code, and their
// durations, in reg (sluice_store_api_requests_total,
// sluice_store_api_request_duration_seconds).
func WithMetrics(reg prometheus.Registerer) Option {
	return func(s *Server) error {
		m, err := newMetrics(reg)
		if err != nil {
			return err
		}
		s.metrics = m
		return nil
	}
}

// WithLogger logs refused callers (at debug level: anyone who reaches the
// listener can cause them) and failed capability probes (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(s *Server) error {
		if l == nil {
			return errors.New("storeapi: WithLogger(nil)")
		}
		s.log = l
		return nil
	}
}

// New returns the store API over store, which it lifts (sluice.Lift): a
// capability the store lacks is answered Unimplemented. The caller keeps
// owning the store.
func New(store sluice.Store, opts ...Option) (*Server, error) {
	if store == nil {
		return nil, errors.New("storeapi: nil store")
	}
	s := &Server{store: sluice.Lift(store), log: slog.New(slog.DiscardHandler)}
	if g, ok := store.(sluice.Granter); ok {
		s.granter = g
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.auth == nil {
		a, err := admin.NewAuthenticator(admin.Auth{}, "the store API's methods", s.log)
		if err != nil {
			return nil, err
		}
		s.auth = a
	}
	return s, nil
}

// Register registers the Store service on g.
func (s *Server) Register(g grpc.ServiceRegistrar) { storev1.RegisterStoreServer(g, s) }

// ServerOptions are the options a gRPC server serving s needs: its bounds
// on messages and metadata, and the interceptors that count and
// authenticate every call (after those already set: a panic guard, a
// default deadline).
func (s *Server) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageSize),
		grpc.MaxHeaderListSize(MaxHeaderListSize),
		grpc.ChainUnaryInterceptor(s.observe, s.authenticate),
	}
}

// Capabilities implements storev1.StoreServer.
func (s *Server) Capabilities(ctx context.Context, _ *storev1.CapabilitiesRequest) (*storev1.CapabilitiesResponse, error) {
	r := s.caps.get(ctx, s.store, s.log)
	r.Grant = s.granter != nil
	return r, nil
}

// Grant implements storev1.StoreServer: every field is checked, against
// the server's bounds and the library's, before the granter is called.
func (s *Server) Grant(ctx context.Context, req *storev1.GrantRequest) (*storev1.GrantResponse, error) {
	if s.granter == nil {
		return nil, storewire.Status(storewire.Unsupported(sluice.ErrGrantUnsupported, "the store API's store"))
	}
	key, lim, r, err := s.grant(req)
	if err != nil {
		return nil, storewire.Status(err)
	}
	g, err := s.granter.Grant(ctx, key, lim, r)
	if err != nil {
		return nil, storewire.Status(err)
	}
	return storewire.GrantResponse(g, lim), nil
}

// AllowN implements storev1.StoreServer.
func (s *Server) AllowN(ctx context.Context, req *storev1.AllowNRequest) (*storev1.AllowNResponse, error) {
	key, lim, n, err := s.request(req.GetKey(), req.GetLimit(), req.GetN())
	if err != nil {
		return nil, storewire.Status(err)
	}
	d, err := s.store.AllowN(ctx, key, lim, n)
	if err != nil {
		return nil, storewire.Status(err)
	}
	return &storev1.AllowNResponse{Decision: storewire.Decision(d, lim)}, nil
}

// AllowMulti implements storev1.StoreServer.
func (s *Server) AllowMulti(ctx context.Context, req *storev1.AllowMultiRequest) (*storev1.AllowMultiResponse, error) {
	reqs, err := s.multi(req.GetRequests())
	if err != nil {
		return nil, storewire.Status(err)
	}
	ds, err := s.store.AllowMulti(ctx, reqs)
	if err != nil {
		return nil, storewire.Status(err)
	}
	if len(ds) != len(reqs) {
		return nil, storewire.Status(fmt.Errorf("storeapi: the store answered %d decisions to %d requests", len(ds), len(reqs)))
	}
	out := make([]*storev1.Decision, len(ds))
	for i, d := range ds {
		out[i] = storewire.Decision(d, reqs[i].Limit)
	}
	return &storev1.AllowMultiResponse{Decisions: out}, nil
}

// Reserve implements storev1.StoreServer.
func (s *Server) Reserve(ctx context.Context, req *storev1.ReserveRequest) (*storev1.ReserveResponse, error) {
	key, lim, n, err := s.request(req.GetKey(), req.GetLimit(), req.GetN())
	if err != nil {
		return nil, storewire.Status(err)
	}
	d, at, err := s.store.Reserve(ctx, key, lim, n)
	if err != nil {
		return nil, storewire.Status(err)
	}
	return &storev1.ReserveResponse{Decision: storewire.Decision(d, lim), At: storewire.Time(at)}, nil
}

// Return implements storev1.StoreServer.
func (s *Server) Return(ctx context.Context, req *storev1.ReturnRequest) (*storev1.ReturnResponse, error) {
	key, lim, n, err := s.request(req.GetKey(), req.GetLimit(), req.GetN())
	if err != nil {
		return nil, storewire.Status(err)
	}
	if err := s.store.Return(ctx, key, lim, n, storewire.ToTime(req.GetAt())); err != nil {
		return nil, storewire.Status(err)
	}
	return &storev1.ReturnResponse{}, nil
}

// Reset implements storev1.StoreServer.
func (s *Server) Reset(ctx context.Context, req *storev1.ResetRequest) (*storev1.ResetResponse, error) {
	key, lim, _, err := s.request(req.GetKey(), req.GetLimit(), 0)
	if err != nil {
		return nil, storewire.Status(err)
	}
	if err := s.store.Reset(ctx, key, lim); err != nil {
		return nil, storewire.Status(err)
	}
	return &storev1.ResetResponse{}, nil
}

// Acquire implements storev1.StoreServer.
func (s *Server) Acquire(ctx context.Context, req *storev1.AcquireRequest) (*storev1.AcquireResponse, error) {
	key, lim, holder, err := s.permit(req.GetKey(), req.GetLimit(), req.GetHolder())
	if err != nil {
		return nil, storewire.Status(err)
	}
	d, err := s.store.Acquire(ctx, key, lim, holder)
	if err != nil {
		return nil, storewire.Status(err)
	}
	return &storev1.AcquireResponse{Decision: storewire.Permit(d, lim)}, nil
}

// Release implements storev1.StoreServer.
func (s *Server) Release(ctx context.Context, req *storev1.ReleaseRequest) (*storev1.ReleaseResponse, error) {
	key, err := checkKey(req.GetKey())
	if err != nil {
		return nil, storewire.Status(err)
	}
	holder, err := checkHolder(req.GetHolder())
	if err != nil {
		return nil, storewire.Status(err)
	}
	if err := s.store.Release(ctx, key, holder); err != nil {
		return nil, storewire.Status(err)
	}
	return &storev1.ReleaseResponse{}, nil
}

// Extend implements storev1.StoreServer. A permit no longer held is an
// answer with permit_lost, not an error; any other error travels with the
// store's decision when it made one (failover's degraded Extend).
func (s *Server) Extend(ctx context.Context, req *storev1.ExtendRequest) (*storev1.ExtendResponse, error) {
	key, lim, holder, err := s.permit(req.GetKey(), req.GetLimit(), req.GetHolder())
	if err != nil {
		return nil, storewire.Status(err)
	}
	d, err := s.store.Extend(ctx, key, lim, holder)
	switch {
	case err == nil:
		return &storev1.ExtendResponse{Decision: storewire.Permit(d, lim)}, nil
	case errors.Is(err, sluice.ErrPermitLost):
		return &storev1.ExtendResponse{Decision: storewire.Permit(d, lim), PermitLost: true}, nil
	case d != (sluice.PermitDecision{}):
		return nil, storewire.StatusWith(err, storewire.Permit(d, lim))
	}
	return nil, storewire.Status(err)
}
