package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/engine"
)

// Options configure the admin handler.
type Options struct {
	// Registry is served at GET /metrics; nil serves no /metrics.
	Registry *prometheus.Registry
	// Pprof serves Go's /debug/pprof.
	Pprof bool
	// Engine is the decision whose rules inspect and reset match, and whose
	// configuration GET /admin/v1/config shows. Nil serves no /admin/v1.
	Engine *engine.Engine
	// Store is the store the engine decides through: reset needs it to be
	// a sluice.Resetter.
	Store sluice.Store
	// Config tells where the configuration in force came from; nil shows
	// none.
	Config *ConfigState
	// Routes are more handlers behind the same authentication, by
	// http.ServeMux pattern ("GET /admin/top").
	Routes map[string]http.Handler
	// Auth is how callers are authenticated.
	Auth Auth
	// Log logs resets and token file reloads (default: discard).
	Log *slog.Logger
}

// New returns the admin handler. It fails when the authentication's files
// do not load or a route's pattern is invalid or taken.
func New(o Options) (_ http.Handler, err error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Engine != nil && o.Store == nil {
		return nil, errors.New("admin: an engine needs its store")
	}
	a, err := newAuthenticator(o.Auth, "the admin endpoints", o.Log)
	if err != nil {
		return nil, err
	}
	open := http.NewServeMux()   // answers without authentication
	closed := http.NewServeMux() // behind a
	if o.Registry != nil {
		m := promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{Registry: o.Registry})
		if o.Auth.Metrics {
			closed.Handle("GET /metrics", m)
		} else {
			open.Handle("GET /metrics", m)
		}
	}
	if o.Pprof {
		closed.HandleFunc("/debug/pprof/", pprof.Index)
		closed.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		closed.HandleFunc("/debug/pprof/profile", pprof.Profile)
		closed.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		closed.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if o.Engine != nil {
		api := &api{eng: o.Engine, store: o.Store, config: o.Config, log: o.Log}
		closed.HandleFunc("GET /admin/v1/inspect", api.inspect)
		closed.HandleFunc("POST /admin/v1/inspect", api.inspect)
		closed.HandleFunc("POST /admin/v1/reset", api.reset)
		closed.HandleFunc("GET /admin/v1/config", api.configuration)
	}
	defer func() {
		// ServeMux panics on an invalid or conflicting pattern.
		if p := recover(); p != nil {
			err = fmt.Errorf("admin: route: %v", p)
		}
	}()
	for pattern, h := range o.Routes {
		closed.Handle(pattern, h)
	}
	open.Handle("/", a.wrap(problems(closed)))
	return open, nil
}

// problems answers the requests that mux has no route for (404, 405) with
// problem+json.
func problems(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := &statusOnly{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		code := rec.code
		if code == 0 || code < 400 {
			mux.ServeHTTP(w, r) // a redirect, say: as the mux answers it
			return
		}
		detail := "no admin endpoint at " + r.URL.Path
		if code == http.StatusMethodNotAllowed {
			detail = r.Method + " is not allowed on " + r.URL.Path + " (allowed: " + rec.header.Get("Allow") + ")"
		}
		writeProblem(w, code, "", detail)
	})
}

// statusOnly keeps a response's status and headers, and drops its body.
type statusOnly struct {
	header http.Header
	code   int
}

func (s *statusOnly) Header() http.Header { return s.header }
func (s *statusOnly) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
}
func (s *statusOnly) Write(b []byte) (int, error) {
	s.WriteHeader(http.StatusOK)
	return len(b), nil
}
