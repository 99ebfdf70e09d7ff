package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memcachestore"
	"github.com/sluicehq/sluice/service/certs"
	"github.com/sluicehq/sluice/service/config"
)

// memcacheFlags are memcached as the shared store, instead of Redis
// (envoyproxy/ratelimit's BACKEND_TYPE=memcache and MEMCACHE_*).
type memcacheFlags struct {
	servers      string // comma-separated host:port
	srv          string
	srvRefresh   time.Duration
	maxIdleConns int
	tls          bool
	tlsCA        string
	tlsCert      string
	tlsKey       string
	tlsName      string
	tlsSkipName  bool
}

func (g *memcacheFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.servers, "memcache", "", "shared store in memcached instead of Redis: `host:port`[,host:port...], each item on one server (the reference's MEMCACHE_HOST_PORT); fixed_window, sliding_window, token_bucket and gcra, not sliding_log")
	fs.StringVar(&g.srv, "memcache-srv", "", "memcached servers from a DNS SRV `name`, _service._proto.name, instead of --memcache (MEMCACHE_SRV)")
	fs.DurationVar(&g.srvRefresh, "memcache-srv-refresh", 0, "resolve --memcache-srv again this often; 0: only at start (MEMCACHE_SRV_REFRESH)")
	fs.IntVar(&g.maxIdleConns, "memcache-max-idle-conns", memcachestore.DefaultMaxIdleConns, "connections kept open per memcached server between calls (MEMCACHE_MAX_IDLE_CONNS)")
	fs.BoolVar(&g.tls, "memcache-tls", false, "TLS to the memcached servers (MEMCACHE_TLS)")
	fs.StringVar(&g.tlsCA, "memcache-tls-ca", "", "PEM `file` of the CAs of the memcached servers' certificates; the system's when empty (MEMCACHE_TLS_CACERT)")
	fs.StringVar(&g.tlsCert, "memcache-tls-cert", "", "PEM `file` of a client certificate for memcached, with --memcache-tls-key (MEMCACHE_TLS_CLIENT_CERT)")
	fs.StringVar(&g.tlsKey, "memcache-tls-key", "", "PEM `file` of the key of --memcache-tls-cert (MEMCACHE_TLS_CLIENT_KEY)")
	fs.StringVar(&g.tlsName, "memcache-tls-server-name", "", "`name` the memcached servers' certificates must hold; each server's host when empty")
	fs.BoolVar(&g.tlsSkipName, "memcache-tls-skip-name-check", false, "verify the memcached servers' certificate chains against --memcache-tls-ca (or the system's CAs) but not the names they hold (MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION)")
}

// set reports whether memcached is the shared store.
func (g *memcacheFlags) set() bool { return g.servers != "" || g.srv != "" }

func (g *memcacheFlags) validate() error {
	tlsSet := g.tlsCA != "" || g.tlsCert != "" || g.tlsKey != "" || g.tlsName != "" || g.tlsSkipName
	switch {
	case !g.set() && (g.srvRefresh != 0 || g.tls || tlsSet):
		return errors.New("--memcache-* need --memcache or --memcache-srv")
	case g.servers != "" && g.srv != "":
		return errors.New("--memcache and --memcache-srv are alternatives: set one")
	case g.srvRefresh != 0 && g.srv == "":
		return errors.New("--memcache-srv-refresh needs --memcache-srv")
	case tlsSet && !g.tls:
		return errors.New("--memcache-tls-* need --memcache-tls")
	case (g.tlsCert == "") != (g.tlsKey == ""):
		return errors.New("--memcache-tls-cert and --memcache-tls-key go together")
	case g.maxIdleConns < 1 || g.maxIdleConns > memcachestore.MaxConnsLimit:
		return fmt.Errorf("--memcache-max-idle-conns %d: want 1 to %d", g.maxIdleConns, memcachestore.MaxConnsLimit)
	}
	return nil
}

// options are memcachestore's Options of the flags; prefix starts every
// item name, timeout bounds every call, and refKeys keeps fixed windows
// under envoyproxy/ratelimit's item names (Options.ReferenceKeys).
func (g *memcacheFlags) options(prefix string, timeout time.Duration, refKeys bool, log *slog.Logger) (memcachestore.Options, error) {
	o := memcachestore.Options{SRV: g.srv, SRVRefresh: g.srvRefresh, MaxIdleConns: g.maxIdleConns,
		Prefix: prefix, Timeout: timeout, ReferenceKeys: refKeys}
	if g.maxIdleConns > memcachestore.DefaultMaxConns {
		o.MaxConns = g.maxIdleConns
	}
	if g.servers != "" {
		for s := range strings.SplitSeq(g.servers, ",") {
			o.Servers = append(o.Servers, strings.TrimSpace(s))
		}
	}
	if g.tls {
		c, err := certs.NewClient(certs.ClientOptions{CAFile: g.tlsCA, CertFile: g.tlsCert, KeyFile: g.tlsKey, ServerName: g.tlsName, SkipNameCheck: g.tlsSkipName, Log: log})
		if err != nil {
			return o, fmt.Errorf("--memcache-tls: %w", err)
		}
		o.TLS = &memcachestore.TLS{Config: c}
	}
	return o, nil
}

// openMemcache returns the memcached store of the flags. A server that does
// not answer at start is logged, and the store returned with the error
// (down), for failover to start with its breaker open: its first call to
// each server dials again.
func openMemcache(ctx context.Context, g *memcacheFlags, prefix string, timeout time.Duration, refKeys bool, log *slog.Logger) (st *memcachestore.Store, down, err error) {
	o, err := g.options(prefix, timeout, refKeys, log)
	if err != nil {
		return nil, nil, err
	}
	octx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	st, err = memcachestore.New(octx, o)
	if err != nil {
		return nil, nil, fmt.Errorf("--memcache: %w", err)
	}
	if err := st.Ping(octx); err != nil {
		if ctx.Err() != nil {
			st.Close()
			return nil, nil, ctx.Err()
		}
		log.Warn("memcached unreachable at start: deciding by the failure policy until it answers", "err", err)
		return st, err, nil
	}
	return st, nil, nil
}

// checkMemcacheAlgorithms refuses, at load, a rule whose algorithm
// memcached cannot decide (sliding_log), rather than an error at each
// request.
func checkMemcacheAlgorithms(c *config.Config, f *serveFlags) error {
	if !f.redis.memcache.set() {
		return nil
	}
	for _, r := range c.Rules() {
		if !r.Unlimited && !memcachestore.Supports(r.Limit.Algorithm) {
			return fmt.Errorf("rule %s: algorithm %s: the memcached store (--memcache) cannot decide it atomically; use sliding_window", r.Name, r.Limit.Algorithm)
		}
	}
	return nil
}

var _ sluice.FullStore = (*memcachestore.Store)(nil)
