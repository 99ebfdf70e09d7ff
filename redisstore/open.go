package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"

	"github.com/redis/rueidis"
)

// Open connects to Redis with rueidis and returns a Store that closes the
// client on Close. The URL forms:
//
//	redis://[user:password@]host:port[/db]       one node (or a Cluster, detected)
//	rediss://...                                 the same over TLS
//	redis://host1:port?addr=host2:port&addr=...  several seed addresses
//	redis+cluster://[user:pass@]h1:p1,h2:p2,...  a Redis Cluster
//	redis+sentinel://[user:pass@]s1:p1,s2:p2?master=mymaster
//	                                             the master that Sentinel names
//	rediss+cluster://, rediss+sentinel://        the same over TLS
//	unix://[user:password@]/path/to/redis.sock[?db=N]  one node on a Unix socket
//
// With Sentinel, sentinel_user and sentinel_password authenticate to the
// sentinels; user:password to the master.
// user:password authenticate with AUTH (ACL user, or only a password as
// redis://:password@host). Other query parameters are rueidis's: db,
// dial_timeout, write_timeout, client_name, skip_verify (TLS), protocol=2.
// rueidis detects a Cluster by itself from any seed address.
//
// A rediss:// URL verifies the server with the system's CAs unless told
// otherwise: tls_ca=FILE (PEM CA certificates), tls_cert=FILE and
// tls_key=FILE (a client certificate and its key, for servers with
// tls-auth-clients), tls_server_name=NAME (the name to verify instead of
// the URL's host). The files are read once, by Open; WithTLSConfig gives a
// whole tls.Config instead (and then the URL must carry none of these).
func Open(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o, err := clientOptions(rawURL, opts)
	if err != nil {
		return nil, err
	}
	return dial(ctx, rawURL, o, opts)
}

// clientOptions checks rawURL and the options that Open uses, and returns
// the rueidis options of a client (the URL's TLS files read).
func clientOptions(rawURL string, opts []Option) (rueidis.ClientOption, error) {
	o, err := parseURL(rawURL)
	if err != nil {
		return o, err
	}
	var so Store
	for _, opt := range opts {
		opt(&so)
	}
	if so.open.tlsSet {
		c := so.open.tls
		if c == nil {
			return o, errors.New("redisstore: WithTLSConfig(nil): no TLS configuration given")
		}
		if o.TLSConfig == nil {
			return o, fmt.Errorf("redisstore: URL %q: WithTLSConfig needs a rediss:// URL", redact(rawURL))
		}
		if hasTLSParams(rawURL) {
			return o, fmt.Errorf("redisstore: URL %q: tls_* parameters and WithTLSConfig: set TLS one way only", redact(rawURL))
		}
		o.TLSConfig = mergeTLS(c, o.TLSConfig)
		if o.Sentinel.MasterSet != "" {
			o.Sentinel.TLSConfig = o.TLSConfig
		}
	}
	if so.open.opened != nil || so.open.closed != nil {
		observeConns(&o, so.open.opened, so.open.closed)
	}
	return o, nil
}

// dial connects a client with o, pings Redis within ctx, and returns the
// Store that owns the client.
func dial(ctx context.Context, rawURL string, o rueidis.ClientOption, opts []Option) (*Store, error) {
	c, err := rueidis.NewClient(o)
	if err != nil {
		return nil, fmt.Errorf("redisstore: connect to %s: %w", redact(rawURL), err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redisstore: ping %s: %w", redact(rawURL), err)
	}
	return newStore(rueidisClient{c: c, owned: true}, opts), nil
}

// Unreachable reports whether err, an error of Open, says that Redis could
// not be reached (refused, unresolvable, timed out, the connection cut),
// as opposed to a mistake of configuration (the URL, the credentials, TLS
// verification) that trying again would not mend. A caller that serves
// while Redis is down at start uses OpenLater on such an error.
func Unreachable(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// parseURL turns one of Open's URL forms into rueidis options.
func parseURL(raw string) (rueidis.ClientOption, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: URL %q has no scheme (want redis://, rediss://, redis+cluster://, redis+sentinel:// or unix://)", redact(raw))
	}
	if scheme == "unix" {
		o, err := rueidis.ParseURL(raw)
		if err != nil {
			return o, fmt.Errorf("redisstore: URL %q: %w", redact(raw), err)
		}
		o.DisableCache = true
		return o, nil
	}
	base, mode, _ := strings.Cut(scheme, "+")
	if base != "redis" && base != "rediss" {
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: URL scheme %q is not redis, rediss, redis+cluster or redis+sentinel", scheme)
	}
	if mode != "" && mode != "cluster" && mode != "sentinel" {
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: URL scheme %q: unknown mode %q (want cluster or sentinel)", scheme, mode)
	}
	// Several comma-separated hosts become addr= parameters.
	auth := rest
	tail := ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		auth, tail = rest[:i], rest[i:]
	}
	user := ""
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		user, auth = auth[:i+1], auth[i+1:]
	}
	hosts := strings.Split(auth, ",")
	path, query, _ := strings.Cut(tail, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: URL query %q: %w", query, err)
	}
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	master := q.Get("master")
	if master == "" {
		master = q.Get("master_set")
	}
	sUser, sPass := q.Get("sentinel_user"), q.Get("sentinel_password")
	for _, k := range []string{"master", "master_set", "sentinel_user", "sentinel_password"} {
		q.Del(k)
	}
	tp := tlsParams{ca: q.Get("tls_ca"), cert: q.Get("tls_cert"), key: q.Get("tls_key"), serverName: q.Get("tls_server_name")}
	for _, k := range tlsParamNames {
		q.Del(k)
	}
	if mode == "sentinel" && master == "" {
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: URL %q: sentinel needs ?master=<name>", redact(raw))
	}
	u := base + "://" + user + hosts[0] + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	o, err := rueidis.ParseURL(u)
	if err != nil {
		return o, fmt.Errorf("redisstore: URL %q: %w", redact(raw), err)
	}
	if tp != (tlsParams{}) {
		if o.TLSConfig == nil {
			return o, fmt.Errorf("redisstore: URL %q: tls_* parameters need a rediss:// URL", redact(raw))
		}
		c, err := tp.config()
		if err != nil {
			return o, fmt.Errorf("redisstore: URL %q: %w", redact(raw), err)
		}
		o.TLSConfig = mergeTLS(c, o.TLSConfig)
	}
	if mode == "sentinel" {
		o.Sentinel.MasterSet = master
		o.Sentinel.Username, o.Sentinel.Password = sUser, sPass
		o.Sentinel.TLSConfig = o.TLSConfig
	}
	o.DisableCache = true // no client-side caching: the store only runs scripts
	// One pipelined connection per server, not rueidis's default of one
	// per two CPUs, up to four: a connection that Redis closed while it
	// was idle is only found out by the next command sent on it, which
	// then fails. With one, the failover layer's probe, which closes the
	// breaker when Redis answers again, is that command, and no decision
	// after it meets a dead connection. The batcher keeps at most two
	// scripts in flight per server anyway: sluice serve on Redis spent the
	// same CPU per decision with one connection as with two (22.5 µs
	// against 22.5, medians of four interleaved runs at 64 callers).
	o.PipelineMultiplex = -1
	return o, nil
}

// redact hides a URL's password in errors.
func redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	auth, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		auth, tail = rest[:i], rest[i:]
	}
	i := strings.LastIndexByte(auth, '@')
	if i < 0 {
		return raw
	}
	user, _, hasPass := strings.Cut(auth[:i], ":")
	if hasPass {
		user += ":xxxxx"
	}
	return scheme + "://" + user + "@" + auth[i+1:] + tail
}

// openOptions are the options that only Open and OpenLater use.
type openOptions struct {
	tls            *tls.Config
	tlsSet         bool         // WithTLSConfig was given, perhaps with nil (an error)
	log            *slog.Logger // OpenLater's; nil: discard
	opened, closed func()       // WithConnObserver's
}

// WithConnObserver makes Open's and OpenLater's client tell opened each
// time it makes a connection to Redis, and closed once when a connection
// is closed (by either side): for statistics of the connections, such as
// envoyproxy/ratelimit's cx_active, cx_total and cx_local_close. Both are
// called on the client's goroutines and must be fast and safe for
// concurrent use. NewRueidis and NewGoRedis take a client that is already
// connected, and do not use it.
func WithConnObserver(opened, closed func()) Option {
	return func(s *Store) { s.open.opened, s.open.closed = opened, closed }
}

// observeConns makes o's connections tell opened and closed.
func observeConns(o *rueidis.ClientOption, opened, closed func()) {
	if opened == nil {
		opened = func() {}
	}
	if closed == nil {
		closed = func() {}
	}
	next := o.DialCtxFn // a Unix socket's, say; else rueidis's own dial
	o.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
		var c net.Conn
		var err error
		switch {
		case next != nil:
			c, err = next(ctx, dst, d, tc)
		case tc != nil:
			c, err = (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", dst)
		default:
			c, err = d.DialContext(ctx, "tcp", dst)
		}
		if err != nil {
			return nil, err
		}
		opened()
		return &observedConn{Conn: c, closed: closed}, nil
	}
}

// observedConn tells closed when it is first closed.
type observedConn struct {
	net.Conn
	once   sync.Once
	closed func()
}

func (c *observedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.closed)
	return err
}

// WithLogger sets the logger of OpenLater's connection in the background:
// each failed attempt at debug level, a warning every 30 seconds while
// Redis stays unreachable, and "redis connected" once it is (default:
// discard). Other constructors do not log.
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.open.log = l } }

// WithTLSConfig makes Open (with a rediss:// URL) use c for its TLS
// connections: a CA, a client certificate (GetClientCertificate lets it
// change between connections), a server name. When c has no ServerName the
// URL's host is verified. c must not be nil. NewRueidis and NewGoRedis
// take a client that is already connected, and do not use it.
func WithTLSConfig(c *tls.Config) Option {
	return func(s *Store) { s.open.tls, s.open.tlsSet = c, true }
}

var tlsParamNames = []string{"tls_ca", "tls_cert", "tls_key", "tls_server_name"}

// hasTLSParams reports whether raw's query sets a tls_* parameter.
func hasTLSParams(raw string) bool {
	_, query, _ := strings.Cut(raw, "?")
	q, _ := url.ParseQuery(query)
	for _, k := range tlsParamNames {
		if q.Has(k) {
			return true
		}
	}
	return false
}

// tlsParams are a URL's tls_* parameters.
type tlsParams struct{ ca, cert, key, serverName string }

func (p tlsParams) config() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: p.serverName}
	if p.ca != "" {
		b, err := os.ReadFile(p.ca)
		if err != nil {
			return nil, fmt.Errorf("tls_ca: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("tls_ca: %s holds no PEM certificate", p.ca)
		}
	}
	if (p.cert == "") != (p.key == "") {
		return nil, errors.New("tls_cert and tls_key go together")
	}
	if p.cert != "" {
		pair, err := tls.LoadX509KeyPair(p.cert, p.key)
		if err != nil {
			return nil, fmt.Errorf("tls_cert, tls_key: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// mergeTLS returns a copy of c completed by rueidis's settings from the
// URL: its host as the server name, skip_verify.
func mergeTLS(c, fromURL *tls.Config) *tls.Config {
	c = c.Clone()
	if c.ServerName == "" {
		c.ServerName = fromURL.ServerName
	}
	if fromURL.InsecureSkipVerify {
		c.InsecureSkipVerify = true
	}
	if c.MinVersion == 0 {
		c.MinVersion = tls.VersionTLS12
	}
	return c
}
