package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"log/slog"
	"net/http"

	"github.com/sluicehq/sluice/service/admin"
	"github.com/sluicehq/sluice/service/server"
)

// adminFlags are the admin API's authentication.
type adminFlags struct {
	tokenFile, clientCA string
	authMetrics         bool
}

func (g *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.tokenFile, "admin-token-file", "", "authenticate the admin endpoints by a bearer token of this `file` (one a line, name:token or a bare token; re-read when it changes); without it and --admin-client-ca they answer loopback callers only")
	fs.StringVar(&g.clientCA, "admin-client-ca", "", "authenticate the admin endpoints by a client certificate issued by a CA of this PEM `file` (needs --tls-cert on the admin listener; re-read when it changes)")
	fs.BoolVar(&g.authMetrics, "admin-auth-metrics", false, "put the admin listener's /metrics behind the admin authentication too (otherwise it answers anyone who reaches the listener)")
}

func (g *adminFlags) validate() error { return nil }

// check checks the rules across groups: a client CA needs TLS on the
// admin listener.
func (g *adminFlags) check(t *tlsFlags) error {
	if g.clientCA != "" && (t.cert == "" || t.grpcOnly) {
		return errors.New("--admin-client-ca needs TLS on the admin listener: --tls-cert and --tls-key, without --tls-grpc-only")
	}
	return nil
}

// tlsConfig makes the admin listener ask for a client certificate, which
// the admin handler verifies against --admin-client-ca.
func (g *adminFlags) tlsConfig(c *tls.Config) *tls.Config {
	if g.clientCA == "" {
		return c
	}
	get := c.GetConfigForClient
	c = c.Clone()
	c.ClientAuth = max(c.ClientAuth, tls.RequestClientCert)
	if get != nil {
		c.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			cc, err := get(h)
			if err != nil || cc == nil || cc.ClientAuth >= tls.RequestClientCert {
				return cc, err
			}
			cc = cc.Clone()
			cc.ClientAuth = tls.RequestClientCert
			return cc, nil
		}
	}
	return c
}

// adminHandler serves /metrics, Go's /debug/pprof and the admin API.
func adminHandler(g *adminFlags, c *core, routes map[string]http.Handler) (http.Handler, error) {
	h, err := admin.New(admin.Options{
		Registry: c.metrics.Registry(),
		Pprof:    true,
		Engine:   c.eng,
		Store:    c.st.store,
		Config:   c.config,
		Routes:   routes,
		Auth:     admin.Auth{TokenFile: g.tokenFile, ClientCAFile: g.clientCA, Metrics: g.authMetrics},
		Log:      c.log.With(slog.String("component", "admin")),
	})
	if err != nil {
		return nil, err
	}
	return server.Recover(h, c.log, c.metrics), nil
}
