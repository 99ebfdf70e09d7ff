package memcachestore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"time"
)

// Defaults and bounds of Options (docs/bounds.md lists them).
const (
	// DefaultPrefix starts every item name the store writes.
	DefaultPrefix = "sluice:"
	// MaxPrefixLen is the longest Prefix, in bytes.
	MaxPrefixLen = 64
	// MaxServers is the most servers a store spreads its items over
	// (Servers, or the targets of SRV).
	MaxServers = 64
	// DefaultMaxIdleConns is the connections kept open per server between
	// calls, as envoyproxy/ratelimit's MEMCACHE_MAX_IDLE_CONNS (and
	// gomemcache) default to.
	DefaultMaxIdleConns = 2
	// DefaultMaxConns is the most connections in use at once per server.
	DefaultMaxConns = 64
	// MaxConnsLimit is the largest MaxConns (and MaxIdleConns).
	MaxConnsLimit = 4096
	// DefaultTimeout bounds a call that its context does not bound sooner:
	// gomemcache's default, which envoyproxy/ratelimit keeps.
	DefaultTimeout = 500 * time.Millisecond
	// MaxTimeout is the longest Timeout.
	MaxTimeout = time.Minute
	// DefaultMaxCASAttempts is how many times one decision may read and
	// try to swap a state that other writers keep changing. Each process
	// has one decision in flight per state (the others wait their turn),
	// so a decision loses an attempt only to another process's write:
	// with k processes admitting on one state at once, it loses one with a
	// chance of about (k-1)/k, and all of them with (1-1/k)^100.
	DefaultMaxCASAttempts = 100
	// MaxCASAttemptsLimit is the largest MaxCASAttempts.
	MaxCASAttemptsLimit = 1000
	// DefaultClockSkew is how far apart the clocks of the processes
	// sharing the servers are assumed to be, at most: every item lives
	// that much longer than its state matters.
	DefaultClockSkew = time.Second
	// MaxClockSkew is the largest ClockSkew.
	MaxClockSkew = time.Hour
	// MinSRVRefresh is the shortest SRVRefresh other than 0.
	MinSRVRefresh = time.Second
)

// Options configure a Store. The zero value of every field but Servers
// and SRV (one of which is needed) is its default. Each field notes the
// envoyproxy/ratelimit variable it stands for, where there is one.
type Options struct {
	// Servers are the memcached servers, host:port (MEMCACHE_HOST_PORT,
	// comma-separated there). An item lives on one of them, chosen by the
	// CRC-32 of its name modulo their number, in this order: the choice
	// of gomemcache, which envoyproxy/ratelimit uses. Changing the list
	// moves items, whose states then start afresh.
	Servers []string
	// SRV is a DNS SRV name, _service._proto.name (MEMCACHE_SRV), whose
	// targets, as target:port sorted as text, are the servers; not with
	// Servers. It is resolved by New, and again every SRVRefresh.
	SRV string
	// SRVRefresh re-resolves SRV this often (MEMCACHE_SRV_REFRESH); 0, the
	// default, never. A failed lookup keeps the servers in use.
	SRVRefresh time.Duration
	// Resolver resolves SRV and the servers' host names (nil:
	// net.DefaultResolver).
	Resolver *net.Resolver

	// MaxIdleConns is the connections kept open per server between calls
	// (MEMCACHE_MAX_IDLE_CONNS; 0: DefaultMaxIdleConns). A call that finds
	// none idle opens one, and closes it afterwards when MaxIdleConns are
	// idle already: under concurrency, set it near the number of calls in
	// flight per server.
	MaxIdleConns int
	// MaxConns is the most connections in use at once per server (0:
	// DefaultMaxConns); a call waits for one as long as its context and
	// Timeout allow.
	MaxConns int
	// Timeout bounds each call, waiting for a connection, dialing and
	// every round trip included, when its context has no earlier deadline
	// (0: DefaultTimeout).
	Timeout time.Duration

	// TLS, when set, makes every connection TLS (MEMCACHE_TLS).
	TLS *TLS

	// Prefix starts every item name ("": DefaultPrefix), so that the
	// store's items never meet another application's. At most
	// MaxPrefixLen bytes, none of them a space or a control character.
	Prefix string
	// ReferenceKeys keeps fixed windows whose Period is whole seconds
	// under envoyproxy/ratelimit's item names: the key itself followed by
	// the window's start in Unix seconds, without Prefix or escaping.
	// Given the key that envoyproxy/ratelimit builds (its
	// CACHE_KEY_PREFIX, the domain, "_", and each of the descriptor's
	// entries as key_value_, so that it ends with "_") and the same
	// servers in the same order, both count on one item, so that a fleet
	// moving from one to the other keeps its counts. Such a key must be a valid memcached key once its suffix is
	// added (at most 250 bytes, no spaces or control characters): another
	// is a *sluice.LimitError on Key. Other limits keep the store's names.
	ReferenceKeys bool

	// MaxCASAttempts bounds how many times a decision reads a state and
	// tries to swap it while other writers change it first (0:
	// DefaultMaxCASAttempts). A decision that loses every attempt is an
	// error wrapping ErrContended: no decision.
	MaxCASAttempts int
	// ClockSkew is how far apart the clocks of the processes that share
	// the servers may be (0: DefaultClockSkew): every item outlives the
	// time its state matters by that much, so that a process whose clock
	// is behind still finds it.
	ClockSkew time.Duration
	// Clock is the time of every decision (nil: time.Now). memcached has
	// no clock the store can read: every process decides on its own
	// clock (see the package documentation).
	Clock func() time.Time
}

// TLS configures TLS to the servers: the files of envoyproxy/ratelimit's
// MEMCACHE_TLS_* variables, or a whole tls.Config.
type TLS struct {
	// CAFile holds the PEM certificates of the CAs that sign the servers'
	// certificates (MEMCACHE_TLS_CACERT); empty: the system's.
	CAFile string
	// CertFile and KeyFile are a client certificate and its key, PEM
	// (MEMCACHE_TLS_CLIENT_CERT, MEMCACHE_TLS_CLIENT_KEY), for servers
	// that verify clients (memcached's ssl_verify_mode).
	CertFile, KeyFile string
	// ServerName is the name every server's certificate must hold; empty:
	// each server's host.
	ServerName string
	// Config is a whole configuration instead of the fields above, which
	// must then be empty. Its ServerName, when empty, is each server's
	// host.
	Config *tls.Config
}

// config builds the tls.Config the fields describe, reading the files.
func (t *TLS) config() (*tls.Config, error) {
	if t.Config != nil {
		if t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" {
			return nil, errors.New("TLS: Config and the files (or ServerName): set TLS one way only")
		}
		c := t.Config.Clone()
		if c.MinVersion == 0 {
			c.MinVersion = tls.VersionTLS12
		}
		return c, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		b, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("TLS.CAFile: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("TLS.CAFile: %s holds no PEM certificate", t.CAFile)
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("TLS: CertFile and KeyFile go together")
	}
	if t.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("TLS.CertFile, TLS.KeyFile: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// srvName is envoyproxy/ratelimit's form of an SRV name.
var srvName = regexp.MustCompile(`^_(.+?)\._(.+?)\.(.+)$`)

// normalize fills in the defaults and reports the first invalid field.
func (o *Options) normalize() error {
	bad := func(format string, args ...any) error { return fmt.Errorf("memcachestore: "+format, args...) }
	switch {
	case len(o.Servers) == 0 && o.SRV == "":
		return bad("no servers: set Servers (MEMCACHE_HOST_PORT) or SRV (MEMCACHE_SRV)")
	case len(o.Servers) > 0 && o.SRV != "":
		return bad("both Servers and SRV are set: set one")
	case len(o.Servers) > MaxServers:
		return bad("Servers: %d servers, more than %d", len(o.Servers), MaxServers)
	case o.SRV != "" && !srvName.MatchString(o.SRV):
		return bad("SRV %q is not _service._proto.name", o.SRV)
	case o.SRVRefresh < 0 || o.SRVRefresh > 0 && o.SRVRefresh < MinSRVRefresh:
		return bad("SRVRefresh %v: want 0 (never) or at least %v", o.SRVRefresh, MinSRVRefresh)
	case o.SRVRefresh > 0 && o.SRV == "":
		return bad("SRVRefresh needs SRV")
	case o.MaxIdleConns < 0 || o.MaxIdleConns > MaxConnsLimit:
		return bad("MaxIdleConns %d: want 0 (the default, %d) to %d", o.MaxIdleConns, DefaultMaxIdleConns, MaxConnsLimit)
	case o.MaxConns < 0 || o.MaxConns > MaxConnsLimit:
		return bad("MaxConns %d: want 0 (the default, %d) to %d", o.MaxConns, DefaultMaxConns, MaxConnsLimit)
	case o.Timeout < 0 || o.Timeout > MaxTimeout:
		return bad("Timeout %v: want 0 (the default, %v) to %v", o.Timeout, DefaultTimeout, MaxTimeout)
	case len(o.Prefix) > MaxPrefixLen:
		return bad("Prefix of %d bytes, more than %d", len(o.Prefix), MaxPrefixLen)
	case !legalName(o.Prefix):
		return bad("Prefix %q holds a space or a control character", o.Prefix)
	case o.MaxCASAttempts < 0 || o.MaxCASAttempts > MaxCASAttemptsLimit:
		return bad("MaxCASAttempts %d: want 0 (the default, %d) to %d", o.MaxCASAttempts, DefaultMaxCASAttempts, MaxCASAttemptsLimit)
	case o.ClockSkew < 0 || o.ClockSkew > MaxClockSkew:
		return bad("ClockSkew %v: want 0 (the default, %v) to %v", o.ClockSkew, DefaultClockSkew, MaxClockSkew)
	}
	for _, s := range o.Servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return bad("Servers: %q is not host:port: %v", s, err)
		}
	}
	if o.MaxIdleConns == 0 {
		o.MaxIdleConns = DefaultMaxIdleConns
	}
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MaxIdleConns > o.MaxConns {
		return bad("MaxIdleConns %d is more than MaxConns %d", o.MaxIdleConns, o.MaxConns)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.MaxCASAttempts == 0 {
		o.MaxCASAttempts = DefaultMaxCASAttempts
	}
	if o.ClockSkew == 0 {
		o.ClockSkew = DefaultClockSkew
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	return nil
}

// legalName reports whether s holds no byte memcached refuses in a key: a
// space, a control character or DEL.
func legalName(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return false
		}
	}
	return true
}
