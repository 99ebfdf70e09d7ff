package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"log/slog"
	"strings"

	"github.com/sluicehq/sluice/service/certs"
)

// tlsFlags are the TLS settings of the listeners and of the Redis client.
type tlsFlags struct {
	cert, key, clientCA, clientSAN string
	grpcOnly                       bool

	redisCA, redisCert, redisKey, redisServerName string
	redisSkipName                                 bool
}

func (g *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.cert, "tls-cert", "", "serve TLS on every listener (HTTP, gRPC, admin) with this PEM certificate chain `file`; re-read when it changes")
	fs.StringVar(&g.key, "tls-key", "", "PEM private key `file` of --tls-cert; re-read when it changes")
	fs.StringVar(&g.clientCA, "tls-client-ca", "", "with --tls-cert: require a client certificate issued by a CA of this PEM `file` (mTLS); re-read when it changes")
	fs.StringVar(&g.clientSAN, "tls-client-san", "", "with --tls-client-ca: the client certificate must also carry one of these comma-separated `SANs` (DNS name, URI such as spiffe://..., email or IP)")
	fs.BoolVar(&g.grpcOnly, "tls-grpc-only", false, "with --tls-cert: serve TLS on the gRPC listener only; HTTP and admin stay plain (as the reference's GRPC_SERVER_USE_TLS)")
	fs.StringVar(&g.redisCA, "redis-tls-ca", "", "with a rediss:// --redis: verify Redis's certificate with the CAs of this PEM `file` instead of the system's")
	fs.StringVar(&g.redisCert, "redis-tls-cert", "", "with a rediss:// --redis: present this PEM client certificate `file` to Redis; re-read when it changes")
	fs.StringVar(&g.redisKey, "redis-tls-key", "", "PEM private key `file` of --redis-tls-cert")
	fs.StringVar(&g.redisServerName, "redis-tls-server-name", "", "with a rediss:// --redis: the `name` to verify in Redis's certificate (and to send as SNI); the URL's host when empty")
	fs.BoolVar(&g.redisSkipName, "redis-tls-skip-name-check", false, "with a rediss:// --redis: verify Redis's certificate chain against --redis-tls-ca (or the system's CAs) but not the name it holds")
}

func (g *tlsFlags) validate() error {
	switch {
	case (g.cert == "") != (g.key == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case g.clientCA != "" && g.cert == "":
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key (mTLS is TLS with client certificates)")
	case g.clientSAN != "" && g.clientCA == "":
		return errors.New("--tls-client-san needs --tls-client-ca")
	case g.grpcOnly && g.cert == "":
		return errors.New("--tls-grpc-only needs --tls-cert and --tls-key")
	case (g.redisCert == "") != (g.redisKey == ""):
		return errors.New("--redis-tls-cert and --redis-tls-key go together")
	}
	for _, s := range g.sans() {
		if s == "" {
			return errors.New("--tls-client-san: an empty name in the list")
		}
	}
	return nil
}

func (g *tlsFlags) sans() []string {
	if g.clientSAN == "" {
		return nil
	}
	s := strings.Split(g.clientSAN, ",")
	for i := range s {
		s[i] = strings.TrimSpace(s[i])
	}
	return s
}

// server returns the listeners' certificates, nil without --tls-cert.
func (g *tlsFlags) server(log *slog.Logger) (*certs.Server, error) {
	if g.cert == "" {
		return nil, nil
	}
	return certs.NewServer(certs.ServerOptions{CertFile: g.cert, KeyFile: g.key, ClientCAFile: g.clientCA, ClientSANs: g.sans(), Log: log})
}

// redisSet reports whether a --redis-tls-* flag is set.
func (g *tlsFlags) redisSet() bool {
	return g.redisCA != "" || g.redisCert != "" || g.redisServerName != "" || g.redisSkipName
}

// redis returns the Redis client's tls.Config, nil without --redis-tls-*.
func (g *tlsFlags) redis(log *slog.Logger) (*tls.Config, error) {
	if !g.redisSet() {
		return nil, nil
	}
	return certs.NewClient(certs.ClientOptions{CAFile: g.redisCA, CertFile: g.redisCert, KeyFile: g.redisKey, ServerName: g.redisServerName, SkipNameCheck: g.redisSkipName, Log: log})
}
