// Package server is the HTTP side of sluice serve: the reference's POST
// /json, sluice's POST /v1/check, GET /v1/auth for nginx auth_request and
// Traefik ForwardAuth, POST /v1/acquire, /v1/release and /v1/extend for
// concurrency limits, health and readiness probes, and Prometheus metrics.
package server

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/metrics"
	"github.com/sluicehq/sluice/service/problem"
	"github.com/sluicehq/sluice/service/rls"
	"github.com/sluicehq/sluice/service/tracing"
)

// DefaultMaxBody is the largest request body accepted (413 beyond).
const DefaultMaxBody = 1 << 20

// Server serves the HTTP endpoints. Create it with New.
type Server struct {
	svc     *rls.Service
	eng     *engine.Engine // svc's
	store   sluice.Store
	metrics *metrics.Metrics
	log     *slog.Logger
	maxBody int64
	auth    Auth
	ready   func() (bool, string)
	tr      *tracing.Tracer // nil: no tracing

	draining     atomic.Bool
	authLogged   atomic.Int64 // unix nanoseconds of the last /v1/auth identity warning
	permitLogged atomic.Int64 // of the last warning of a permit endpoint's store failure
	permits      *permitClients
	mux          *http.ServeMux
}

// Option configures a Server.
type Option func(*Server)

// WithMetrics serves m on /metrics and counts the decisions of /v1/check
// and the permit operations in it.
func WithMetrics(m *metrics.Metrics) Option { return func(s *Server) { s.metrics = m } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithMaxBody sets the largest request body (default DefaultMaxBody).
func WithMaxBody(n int64) Option { return func(s *Server) { s.maxBody = n } }

// WithAuth configures GET /v1/auth (default DefaultAuth).
func WithAuth(a Auth) Option { return func(s *Server) { s.auth = a } }

// WithReadiness adds a readiness condition to /readyz: when check reports
// false, /readyz answers 503 with the reason. The failover breaker is one.
func WithReadiness(check func() (ok bool, reason string)) Option {
	return func(s *Server) { s.ready = check }
}

// WithTracer puts each decision endpoint (/json, /v1/check, /v1/auth) in
// a server span of t, continued from the caller's traceparent header; nil
// (the default) traces nothing.
func WithTracer(t *tracing.Tracer) Option { return func(s *Server) { s.tr = t } }

// New returns a Server deciding RLS requests through svc and /v1/check
// requests through store, and taking permits of store. The store is the
// service's, as observed (service/metrics.Observe): the Server times no
// store call itself.
func New(svc *rls.Service, store sluice.Store, opts ...Option) *Server {
	s := &Server{svc: svc, store: store, log: slog.New(slog.DiscardHandler), maxBody: DefaultMaxBody, auth: DefaultAuth(), permits: newPermitClients()}
	for _, o := range opts {
		o(s)
	}
	if svc != nil {
		s.eng = svc.Engine()
	}
	mux := http.NewServeMux()
	s.handle(mux, "POST /json", s.handleJSON)
	s.handle(mux, "POST /v1/check", s.handleCheck)
	s.handle(mux, "POST /v1/acquire", s.handleAcquire)
	s.handle(mux, "POST /v1/release", s.handleRelease)
	s.handle(mux, "POST /v1/extend", s.handleExtend)
	s.handle(mux, "GET /v1/auth", s.handleAuth)
	s.handle(mux, "HEAD /v1/auth", s.handleAuth)
	mux.HandleFunc("GET /healthz", s.handleHealthz)
	mux.HandleFunc("GET /healthcheck", s.handleReadyz) // the reference's probe fails while shutting down
	mux.HandleFunc("GET /readyz", s.handleReadyz)
	if s.metrics != nil {
		mux.Handle("GET /metrics", s.metrics.Handler())
	}
	s.mux = mux
	return s
}

// handle serves the decision endpoint route on mux, in a span when tracing.
func (s *Server) handle(mux *http.ServeMux, route string, h http.HandlerFunc) {
	if s.tr == nil {
		mux.HandleFunc(route, h)
		return
	}
	mux.Handle(route, s.tr.Handler(route, h))
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Drain makes /readyz (and /healthcheck) answer 503 from now on, so that
// load balancers stop sending new requests before the server shuts down.
func (s *Server) Drain() { s.draining.Store(true) }

func (s *Server) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("OK\n"))
}

func (s *Server) handleReadyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("draining\n"))
		return
	}
	if s.ready != nil {
		if ok, why := s.ready(); !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(why + "\n"))
			return
		}
	}
	w.Write([]byte("OK\n"))
}

// writeProblem answers an error as problem+json, naming the field.
var writeProblem = problem.Write

// readBody reads r's body, of at most maxBody bytes, or answers why not
// (bodyError). A body whose Content-Length is beyond the limit is refused
// before any of it is read: a client that sent Expect: 100-continue (curl
// does for large bodies) gets its 413 without sending the body, and no
// other client's answer depends on how much of it the server read before
// it closed the connection.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength > s.maxBody {
		s.bodyError(w, &http.MaxBytesError{Limit: s.maxBody})
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		s.bodyError(w, err)
		return nil, false
	}
	return body, true
}

// bodyError answers a body that could not be read: 413 beyond the limit,
// 400 otherwise.
func (s *Server) bodyError(w http.ResponseWriter, err error) {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		writeProblem(w, http.StatusRequestEntityTooLarge, "", "request body is larger than "+strconv.FormatInt(mb.Limit, 10)+" bytes")
		return
	}
	writeProblem(w, http.StatusBadRequest, "", "reading request body: "+err.Error())
}
