package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sluicehq/sluice/service/certs"
	"github.com/sluicehq/sluice/service/source"
	"github.com/sluicehq/sluice/service/xds"
)

// xdsFlags configure the configuration's subscription over xDS, the
// alternative to --config.
type xdsFlags struct {
	server, nodeID, nodeMetadata, headers string

	tls                                   bool
	tlsCA, tlsCert, tlsKey, tlsServerName string

	backoffInitial, backoffMax time.Duration
	backoffRandomFactor        float64
	backoffJitter              bool
	maxMessageSize             byteSize
	forceStart                 bool
}

func (g *xdsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.server, "xds-server", "", "take the configuration from this xDS control plane (`HOST:PORT`): RateLimitConfig resources over ADS, state of the world, as envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW; an alternative to --config")
	fs.StringVar(&g.nodeID, "xds-node-id", "default", "the xDS node `id` sent to the control plane, which serves a snapshot per node id")
	fs.StringVar(&g.nodeMetadata, "xds-node-metadata", "", "the xDS node's metadata, string values, comma-separated: `k=v,k2:v2`")
	fs.StringVar(&g.headers, "xds-headers", "", "gRPC metadata sent to the control plane on every stream, comma-separated: `k=v,k2:v2` (names are lower-cased)")
	fs.BoolVar(&g.tls, "xds-tls", false, "connect to the control plane over TLS (the system's CAs unless --xds-tls-ca)")
	fs.StringVar(&g.tlsCA, "xds-tls-ca", "", "with --xds-tls: verify the control plane's certificate with the CAs of this PEM `file`")
	fs.StringVar(&g.tlsCert, "xds-tls-cert", "", "with --xds-tls: present this PEM client certificate `file` to the control plane (mTLS); re-read when it changes")
	fs.StringVar(&g.tlsKey, "xds-tls-key", "", "PEM private key `file` of --xds-tls-cert")
	fs.StringVar(&g.tlsServerName, "xds-tls-server-name", "", "with --xds-tls: the `name` to verify in the control plane's certificate (and to send as SNI); the host of --xds-server when empty")
	fs.DurationVar(&g.backoffInitial, "xds-backoff-initial", xds.DefaultBackoff.Initial, "the first delay before reconnecting to the control plane; each failed attempt doubles it, up to --xds-backoff-max")
	fs.DurationVar(&g.backoffMax, "xds-backoff-max", xds.DefaultBackoff.Max, "the longest delay before reconnecting to the control plane")
	fs.Float64Var(&g.backoffRandomFactor, "xds-backoff-random-factor", xds.DefaultBackoff.RandomFactor, "with --xds-backoff-jitter: each delay is drawn within ±this `fraction` (0 to 1) of its value")
	fs.BoolVar(&g.backoffJitter, "xds-backoff-jitter", xds.DefaultBackoff.Jitter, "randomize the reconnection delays by --xds-backoff-random-factor")
	g.maxMessageSize = xds.DefaultMaxMessageSize
	fs.Var(&g.maxMessageSize, "xds-max-message-size", "the largest response accepted from the control plane (`bytes`, e.g. 16MiB)")
	fs.BoolVar(&g.forceStart, "xds-force-start", false, "serve before the first configuration arrives from the control plane (with no domain configured, /readyz and gRPC health not ready until it does) instead of waiting for it")
}

func (g *xdsFlags) validate() error {
	if g.server == "" {
		if g.nodeMetadata != "" || g.headers != "" || g.tls || g.tlsSet() || g.forceStart {
			return errors.New("--xds-* need --xds-server")
		}
		return nil
	}
	if _, err := splitPairs("--xds-node-metadata", g.nodeMetadata); err != nil {
		return err
	}
	if _, err := splitPairs("--xds-headers", g.headers); err != nil {
		return err
	}
	switch {
	case g.tlsSet() && !g.tls:
		return errors.New("--xds-tls-* need --xds-tls")
	case (g.tlsCert == "") != (g.tlsKey == ""):
		return errors.New("--xds-tls-cert and --xds-tls-key go together")
	case g.backoffInitial <= 0 || g.backoffMax < g.backoffInitial:
		return errors.New("--xds-backoff-initial must be > 0 and --xds-backoff-max >= it")
	case !(g.backoffRandomFactor >= 0 && g.backoffRandomFactor <= 1):
		return errors.New("--xds-backoff-random-factor must be within [0, 1]")
	case g.maxMessageSize == 0 || g.maxMessageSize > xds.MaxMessageSize:
		return fmt.Errorf("--xds-max-message-size must be within 1B and %s", ptr(byteSize(xds.MaxMessageSize)).String())
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

func (g *xdsFlags) tlsSet() bool {
	return g.tlsCA != "" || g.tlsCert != "" || g.tlsKey != "" || g.tlsServerName != ""
}

// splitPairs parses "k=v,k2:v2": each entry is split at its first '=' or
// ':'; empty entries are skipped.
func splitPairs(flagName, s string) (map[string]string, error) {
	m := map[string]string{}
	for e := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(e) == "" {
			continue
		}
		i := strings.IndexAny(e, "=:")
		if i <= 0 {
			return nil, fmt.Errorf("%s: entry %q: want key=value or key:value", flagName, e)
		}
		m[strings.TrimSpace(e[:i])] = strings.TrimSpace(e[i+1:])
	}
	return m, nil
}

// options are the xDS client's options (source.StartXDS sets their Apply).
func (g *xdsFlags) options(log *slog.Logger) (xds.Options, error) {
	md, _ := splitPairs("--xds-node-metadata", g.nodeMetadata)
	hs, _ := splitPairs("--xds-headers", g.headers)
	headers := make(map[string]string, len(hs))
	for k, v := range hs {
		headers[strings.ToLower(k)] = v
	}
	o := xds.Options{Server: g.server, NodeID: g.nodeID, NodeMetadata: md, Headers: headers,
		Backoff:        xds.Backoff{Initial: g.backoffInitial, Max: g.backoffMax, RandomFactor: g.backoffRandomFactor, Jitter: g.backoffJitter},
		MaxMessageSize: int(g.maxMessageSize), Log: log}
	if g.tls {
		tc, err := certs.NewClient(certs.ClientOptions{CAFile: g.tlsCA, CertFile: g.tlsCert, KeyFile: g.tlsKey, ServerName: g.tlsServerName, Log: log})
		if err != nil {
			return o, fmt.Errorf("--xds-tls-*: %w", err)
		}
		o.TLS = tc
	}
	return o, nil
}

// startXDS subscribes to the configuration over xDS, each update put in
// force through ap, and, unless --xds-force-start, waits for the first
// one, as envoyproxy/ratelimit does before it serves; a signal ends the
// wait.
func startXDS(ctx context.Context, f *serveFlags, ap *source.Applier, c *core) (*source.XDS, error) {
	o, err := f.xds.options(c.log)
	if err != nil {
		return nil, err
	}
	read, _ := f.config.read.options() // checked by validate
	src, err := source.StartXDS(o, read, ap)
	if err != nil {
		return nil, err
	}
	c.configReady = src.Ready
	if f.xds.forceStart {
		c.log.Info("serving before a first configuration from xds (--xds-force-start)", "server", f.xds.server, "node", f.xds.nodeID)
		return src, nil
	}
	c.log.Info("waiting for the first configuration from xds", "server", f.xds.server, "node", f.xds.nodeID)
	if err := src.Wait(ctx); err != nil {
		src.Stop()
		return nil, err
	}
	return src, nil
}

// configName is the configuration's name in the log.
func (f *serveFlags) configName() string {
	if f.xds.server != "" {
		return "xds " + f.xds.server
	}
	return f.config.name()
}
