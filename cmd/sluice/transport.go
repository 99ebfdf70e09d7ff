package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	stdlog "log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicehq/sluice/service/metrics"
	"github.com/sluicehq/sluice/service/rls"
	"github.com/sluicehq/sluice/service/server"
	"github.com/sluicehq/sluice/service/tracing"
)

// Defaults of the transport flags; docs/listeners.md says why each.
const (
	defaultHTTPReadHeaderTimeout = 10 * time.Second
	defaultHTTPReadTimeout       = 30 * time.Second
	defaultHTTPWriteTimeout      = 40 * time.Second
	defaultHTTPIdleTimeout       = 2 * time.Minute
	defaultHTTPMaxHeaderBytes    = 64 << 10
	defaultMaxConnections        = 4096
	defaultGRPCMaxStreams        = 250
	defaultGRPCHandshakeTimeout  = 10 * time.Second
	defaultGRPCKeepaliveMinTime  = 10 * time.Second
	defaultGRPCMaxConnAge        = 24 * time.Hour // the reference's GRPC_MAX_CONNECTION_AGE
	defaultGRPCMaxConnAgeGrace   = time.Hour      // the reference's GRPC_MAX_CONNECTION_AGE_GRACE
	defaultGRPCMaxMessageSize    = server.DefaultMaxBody
	defaultRequestTimeout        = time.Second
)

// defaultGRPCWorkers is the default of --grpc-workers. With GOMAXPROCS
// workers (2 on 2 CPUs) the pool was almost always busy at 64 concurrent
// callers in bench/loadgen, and 14% of the CPU went to
// runtime.newstack/copystack growing the stacks of per-call goroutines; 128
// workers and GOGC=400 together gave about 30% more throughput. An idle
// worker costs a parked goroutine.
const defaultGRPCWorkers = 128

// Bounds of the transport flags.
const (
	minHeaderBytes  = 4 << 10
	maxHeaderBytes  = 16 << 20
	minMessageSize  = 4 << 10
	maxMessageSize  = 64 << 20
	maxConnsPerList = 1 << 20
	// maxGRPCWorkers bounds --grpc-workers: each worker is a goroutine for
	// the life of the server.
	maxGRPCWorkers = 1 << 16
)

// transportFlags are the limits of the listeners' HTTP and gRPC servers,
// their gRPC workers and gRPC reflection.
type transportFlags struct {
	httpReadHeaderTimeout time.Duration
	httpReadTimeout       time.Duration
	httpWriteTimeout      time.Duration
	httpIdleTimeout       time.Duration
	httpMaxHeaderBytes    byteSize
	maxConnections        int

	grpcMaxStreams       uint
	grpcHandshakeTimeout time.Duration
	grpcKeepaliveMinTime time.Duration
	grpcKeepaliveNoRPC   bool
	grpcMaxConnAge       time.Duration
	grpcMaxConnAgeGrace  time.Duration
	grpcMaxMessageSize   byteSize
	grpcReflection       bool
	grpcWorkers          int

	requestTimeout time.Duration
}

func (g *transportFlags) register(fs *flag.FlagSet) {
	for _, d := range g.durations() {
		fs.DurationVar(d.p, d.name, d.def, d.usage)
	}
	g.httpMaxHeaderBytes = defaultHTTPMaxHeaderBytes
	fs.Var(&g.httpMaxHeaderBytes, "http-max-header-bytes", "largest `size` of a request's headers (431 beyond)")
	fs.IntVar(&g.maxConnections, "max-connections", defaultMaxConnections, "most open connections per listener (HTTP, gRPC, admin); a connection beyond it is closed at once (0: no cap)")
	fs.UintVar(&g.grpcMaxStreams, "grpc-max-concurrent-streams", defaultGRPCMaxStreams, "most concurrent gRPC calls per connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS; a stream beyond it is refused)")
	fs.BoolVar(&g.grpcKeepaliveNoRPC, "grpc-keepalive-permit-without-stream", true, "allow keepalive pings on a connection with no call in flight")
	g.grpcMaxMessageSize = defaultGRPCMaxMessageSize
	fs.Var(&g.grpcMaxMessageSize, "grpc-max-message-size", "largest gRPC request message `size` (ResourceExhausted beyond)")
	fs.BoolVar(&g.grpcReflection, "grpc-reflection", true, "serve gRPC server reflection (grpcurl list, describe)")
	fs.IntVar(&g.grpcWorkers, "grpc-workers", defaultGRPCWorkers, "gRPC stream workers: goroutines kept to serve calls (a call finding none idle starts a goroutine of its own)")
}

// durationFlag is a duration flag that must not be negative.
type durationFlag struct {
	p     *time.Duration
	name  string
	def   time.Duration
	usage string
}

// durations are the group's duration flags, in the order validate checks
// them.
func (g *transportFlags) durations() []durationFlag {
	return []durationFlag{
		{&g.httpReadHeaderTimeout, "http-read-header-timeout", defaultHTTPReadHeaderTimeout, "longest time an HTTP client may take to send a request's headers (0: none)"},
		{&g.httpReadTimeout, "http-read-timeout", defaultHTTPReadTimeout, "longest time an HTTP client may take to send a whole request, headers and body (0: none)"},
		{&g.httpWriteTimeout, "http-write-timeout", defaultHTTPWriteTimeout, "longest time from the end of a request's headers to the end of its response (0: none; not on --admin, whose profiles take longer)"},
		{&g.httpIdleTimeout, "http-idle-timeout", defaultHTTPIdleTimeout, "how long an idle keep-alive HTTP connection stays open (0: the read timeout)"},
		{&g.grpcKeepaliveMinTime, "grpc-keepalive-min-time", defaultGRPCKeepaliveMinTime, "shortest interval between a client's keepalive pings; a client pinging more often gets GOAWAY (too_many_pings)"},
		{&g.grpcMaxConnAge, "grpc-max-connection-age", defaultGRPCMaxConnAge, "close a gRPC connection after this long (±10%, with GOAWAY), so that clients spread over new replicas (the reference's GRPC_MAX_CONNECTION_AGE; 0: never)"},
		{&g.grpcMaxConnAgeGrace, "grpc-max-connection-age-grace", defaultGRPCMaxConnAgeGrace, "time the calls in flight get to finish after --grpc-max-connection-age (the reference's GRPC_MAX_CONNECTION_AGE_GRACE)"},
		{&g.requestTimeout, "request-timeout", defaultRequestTimeout, "deadline of a decision whose caller sets none (a gRPC call without grpc-timeout, every HTTP request); 0: none"},
		{&g.grpcHandshakeTimeout, "grpc-handshake-timeout", defaultGRPCHandshakeTimeout, "longest time a new gRPC connection may take to complete its TLS and HTTP/2 handshake; a connection that sends nothing is closed then, freeing its --max-connections slot (must be > 0)"},
	}
}

func (g *transportFlags) validate() error {
	for _, d := range g.durations() {
		if *d.p < 0 {
			return fmt.Errorf("--%s %v: must be >= 0", d.name, *d.p)
		}
	}
	if g.grpcHandshakeTimeout == 0 {
		return errors.New("--grpc-handshake-timeout 0s: must be > 0 (a connection must finish its handshake some time)")
	}
	if g.httpMaxHeaderBytes < minHeaderBytes || g.httpMaxHeaderBytes > maxHeaderBytes {
		return fmt.Errorf("--http-max-header-bytes %v: want 4KiB to 16MiB", &g.httpMaxHeaderBytes)
	}
	if g.maxConnections < 0 || g.maxConnections > maxConnsPerList {
		return fmt.Errorf("--max-connections %d: want 0 (no cap) to %d", g.maxConnections, maxConnsPerList)
	}
	if g.grpcMaxStreams < 1 || g.grpcMaxStreams > math.MaxUint32 {
		return fmt.Errorf("--grpc-max-concurrent-streams %d: want 1 to %d", g.grpcMaxStreams, uint32(math.MaxUint32))
	}
	if g.grpcMaxMessageSize < minMessageSize || g.grpcMaxMessageSize > maxMessageSize {
		return fmt.Errorf("--grpc-max-message-size %v: want 4KiB to 64MiB", &g.grpcMaxMessageSize)
	}
	if g.grpcWorkers < 1 || g.grpcWorkers > maxGRPCWorkers {
		return fmt.Errorf("--grpc-workers %d: want 1 to %d", g.grpcWorkers, maxGRPCWorkers)
	}
	return nil
}

// httpServer returns an http.Server for h with the HTTP limits; admin
// servers have no write timeout (a CPU profile or a trace streams for as
// many seconds as asked).
func (g *transportFlags) httpServer(h http.Handler, log *slog.Logger, admin bool) *http.Server {
	s := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: g.httpReadHeaderTimeout,
		ReadTimeout:       g.httpReadTimeout,
		WriteTimeout:      g.httpWriteTimeout,
		IdleTimeout:       g.httpIdleTimeout,
		// net/http adds 4096 bytes of slack to MaxHeaderBytes (and takes 0
		// for its 1 MiB default).
		MaxHeaderBytes: max(int(g.httpMaxHeaderBytes)-4096, 1),
		ErrorLog:       stdlog.New(serverErrorLog{log}, "", 0),
	}
	if admin {
		s.WriteTimeout = 0
	}
	return s
}

// serverErrorLog takes net/http's error lines: warnings, except failed TLS
// handshakes (a client without a certificate, a scanner), which anyone who
// can connect can cause at will and so are logged at debug level only.
type serverErrorLog struct{ log *slog.Logger }

func (w serverErrorLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.Contains(msg, "TLS handshake error") {
		w.log.Debug(msg)
	} else {
		w.log.Warn(msg)
	}
	return len(p), nil
}

// grpcOptions are the gRPC server's limits, workers and interceptors.
//
// A fixed pool of stream workers instead of a goroutine per call: grpc-go
// hands a stream to a worker only when one is idle (a non-blocking send)
// and otherwise starts a goroutine for the call, whose 8 KiB stack then
// grows by copying; and each handler holds its worker while it waits for
// the request's DATA frame. So the pool is sized for the concurrent calls,
// not for the CPUs (see defaultGRPCWorkers).
//
// With tr (tracing on), each ShouldRateLimit call runs in a server span,
// outside the guard so that the span covers a recovered panic too. The
// outer interceptors (envoyproxy/ratelimit's statistics) come first.
func (g *transportFlags) grpcOptions(log *slog.Logger, m *metrics.Metrics, tr *tracing.Tracer, outer ...grpc.UnaryServerInterceptor) []grpc.ServerOption {
	age := g.grpcMaxConnAge
	if age == 0 {
		age = time.Duration(math.MaxInt64) // grpc-go's infinity
	}
	panicked := func() { m.Panicked("grpc") }
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(g.grpcMaxMessageSize)),
		grpc.MaxConcurrentStreams(uint32(g.grpcMaxStreams)),
		grpc.ConnectionTimeout(g.grpcHandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: g.grpcKeepaliveMinTime, PermitWithoutStream: g.grpcKeepaliveNoRPC}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: age, MaxConnectionAgeGrace: g.grpcMaxConnAgeGrace}),
		unary(rls.Guard(log, panicked, g.requestTimeout), tr, outer),
		grpc.StreamInterceptor(rls.RecoverStream(log, panicked)),
		grpc.NumStreamWorkers(uint32(g.grpcWorkers)),
	}
}

// unary is the unary interceptor guard, behind tr's span when tracing,
// behind the outer interceptors.
func unary(guard grpc.UnaryServerInterceptor, tr *tracing.Tracer, outer []grpc.UnaryServerInterceptor) grpc.ServerOption {
	if tr == nil && len(outer) == 0 {
		return grpc.UnaryInterceptor(guard)
	}
	chain := outer
	if tr != nil {
		chain = append(chain, tr.UnaryInterceptor())
	}
	return grpc.ChainUnaryInterceptor(append(chain, guard)...)
}

// dataPlane wraps the data-plane handler: panics recovered, a deadline on
// every request, and no /metrics when the admin listener serves it.
func (g *transportFlags) dataPlane(h http.Handler, log *slog.Logger, m *metrics.Metrics, noMetrics bool) http.Handler {
	if noMetrics {
		mux := http.NewServeMux()
		mux.Handle("/", h)
		mux.Handle("/metrics", http.NotFoundHandler())
		h = mux
	}
	if d := g.requestTimeout; d > 0 {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), d)
			defer cancel()
			inner.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	return server.Recover(h, log, m)
}

// connMetrics count the connections of each listener.
type connMetrics struct {
	open     *prometheus.GaugeVec
	rejected *prometheus.CounterVec
}

func newConnMetrics(reg prometheus.Registerer) *connMetrics {
	c := &connMetrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_connections_open",
			Help: "Open connections by listener (http, grpc, admin).",
		}, []string{"listener"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_connections_rejected_total",
			Help: "Connections closed on accept because the listener had --max-connections open, by listener.",
		}, []string{"listener"}),
	}
	reg.MustRegister(c.open, c.rejected)
	return c
}

// limitListener accepts at most cap(sem) open connections and closes any
// connection beyond them at once. Rejecting rather than blocking Accept
// (as golang.org/x/net/netutil.LimitListener does) tells the client
// straight away, so that it retries elsewhere, instead of leaving its
// connection in the kernel's accept queue, unanswered, until it times out,
// and then serving it long after it gave up.
type limitListener struct {
	net.Listener
	sem      chan struct{} // nil: no cap
	open     prometheus.Gauge
	rejected prometheus.Counter
}

func (g *transportFlags) limit(l net.Listener, name string, cm *connMetrics) net.Listener {
	ll := &limitListener{Listener: l, open: cm.open.WithLabelValues(name), rejected: cm.rejected.WithLabelValues(name)}
	if g.maxConnections > 0 {
		ll.sem = make(chan struct{}, g.maxConnections)
	}
	return ll
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.sem != nil {
			select {
			case l.sem <- struct{}{}:
			default:
				c.Close()
				l.rejected.Inc()
				continue
			}
		}
		l.open.Inc()
		lc := &limitConn{Conn: c}
		lc.release = func() {
			l.open.Dec()
			if l.sem != nil {
				<-l.sem
			}
		}
		return lc, nil
	}
}

// limitConn gives its slot back on its first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
