package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/service/admin"
	"github.com/sluicehq/sluice/service/certs"
	"github.com/sluicehq/sluice/service/listen"
	"github.com/sluicehq/sluice/service/storeapi"
)

// storeAPIFlags are the store API's listener and its authentication.
type storeAPIFlags struct {
	addr      string
	tokenFile string
	clientCA  string
}

func (g *storeAPIFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "store-api-addr", "", "serve the store API (gRPC sluice.store.v1: this sluice's store, for the remotestore package and other sluices' --remote-store) on this `address`; off when empty")
	fs.StringVar(&g.tokenFile, "store-api-token-file", "", "authenticate the store API's callers by a bearer token of this `file` (one a line, name:token or a bare token; re-read when it changes); without it and --store-api-client-ca the store API answers loopback callers only")
	fs.StringVar(&g.clientCA, "store-api-client-ca", "", "authenticate the store API's callers by a client certificate issued by a CA of this PEM `file` (needs --tls-cert; re-read when it changes)")
}

func (g *storeAPIFlags) validate() error {
	if g.addr == "" && (g.tokenFile != "" || g.clientCA != "") {
		return errors.New("--store-api-token-file and --store-api-client-ca need --store-api-addr")
	}
	return nil
}

// check checks the rules across groups: a client CA needs TLS.
func (g *storeAPIFlags) check(t *tlsFlags) error {
	if g.clientCA != "" && t.cert == "" {
		return errors.New("--store-api-client-ca needs TLS: --tls-cert and --tls-key")
	}
	return nil
}

// storeAPIServer is the store API's gRPC server on its listener.
type storeAPIServer struct {
	g   *grpc.Server
	lis net.Listener
}

// startStoreAPI serves the store API over c's store on --store-api-addr,
// with the transport limits of the other gRPC listener, TLS with
// --tls-cert (also under --tls-grpc-only: it is gRPC), and the
// connection cap; a server that stops serving is sent to errc. It returns
// nil without --store-api-addr.
func startStoreAPI(f *serveFlags, c *core, srvCerts *certs.Server, cm *connMetrics, errc chan<- error) (*storeAPIServer, error) {
	g := &f.storeAPI
	if g.addr == "" {
		return nil, nil
	}
	log := c.log.With(slog.String("component", "store-api"))
	auth, err := admin.NewAuthenticator(admin.Auth{TokenFile: g.tokenFile, ClientCAFile: g.clientCA}, "the store API's methods", log)
	if err != nil {
		return nil, fmt.Errorf("--store-api-*: %w", err)
	}
	aopts := []storeapi.Option{storeapi.WithBounds(f.limits.bounds()), storeapi.WithAuthenticator(auth),
		storeapi.WithMetrics(c.metrics.Registry()), storeapi.WithLogger(log)}
	if c.st.granter != nil {
		aopts = append(aopts, storeapi.WithGranter(c.st.granter))
	}
	api, err := storeapi.New(c.st.store, aopts...)
	if err != nil {
		return nil, err
	}
	opts := f.transport.grpcOptions(c.log, c.metrics, c.tr, cm)
	if srvCerts != nil {
		// gRPC's own TLS, not a TLS listener: the handler sees the client's
		// certificate.
		tc := srvCerts.Config("h2")
		if g.clientCA != "" {
			tc = (&adminFlags{clientCA: g.clientCA}).tlsConfig(tc) // ask for a certificate; the authenticator verifies it
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	} else if g.tokenFile != "" && !loopbackAddr(g.addr) {
		log.Warn("the store API's bearer tokens travel in the clear: serve it with --tls-cert, or on loopback behind a proxy that encrypts", "addr", g.addr)
	}
	// TLS is gRPC's (above), not the listener's: the handler sees the
	// client's certificate.
	l, err := listen.Listen(g.addr, f.transport.listenOptions("store_api", cm), nil)
	if err != nil {
		return nil, fmt.Errorf("--store-api-addr: %w", err)
	}
	s := &storeAPIServer{g: grpc.NewServer(append(opts, api.ServerOptions()...)...), lis: l}
	api.Register(s.g)
	go func() { errc <- fmt.Errorf("store API: %w", s.g.Serve(s.lis)) }()
	log.Info("store API listening", "addr", s.lis.Addr().String(), "tls", srvCerts != nil,
		"auth", authName(g), "store", c.st.name)
	return s, nil
}

// authName says how the store API authenticates, for the log.
func authName(g *storeAPIFlags) string {
	switch {
	case g.tokenFile != "" && g.clientCA != "":
		return "token or client certificate"
	case g.tokenFile != "":
		return "token"
	case g.clientCA != "":
		return "client certificate"
	}
	return "loopback callers only"
}

// loopbackAddr reports whether a listen address is on loopback only.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// grpcServers are the gRPC servers to drain: the data plane's, and the
// store API's when it serves.
func (s *servers) grpcServers() []grpcServer {
	if s.storeAPI == nil {
		return []grpcServer{s.grpc}
	}
	return []grpcServer{s.grpc, s.storeAPI.g}
}

// addrs are the listeners' addresses, for --ready-file: the store API's
// as "store_api".
func (s *servers) addrs() map[string]string {
	m := s.ls.addrs()
	if s.storeAPI != nil {
		m["store_api"] = s.storeAPI.lis.Addr().String()
	}
	return m
}

// close closes the listeners, for a start that failed after opening them.
func (ls *listeners) close() {
	ls.http.Close()
	ls.grpc.Close()
	if ls.admin != nil {
		ls.admin.Close()
	}
}
