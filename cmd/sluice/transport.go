package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	stdlog "log"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicehq/sluice/service/grpcfast"
	"github.com/sluicehq/sluice/service/listen"
	"github.com/sluicehq/sluice/service/metrics"
	"github.com/sluicehq/sluice/service/rls"
	"github.com/sluicehq/sluice/service/rlswire"
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
	defaultGRPCTransport         = "lean"
	defaultConnWriteTimeout      = 10 * time.Second
	// A ShouldRateLimit call's headers are a few hundred bytes; gRPC's
	// own default is 16 MiB (moving to 8 KiB).
	defaultGRPCMaxHeaderListSize    = 16 << 10
	defaultGRPCFirstMessageTimeout  = 10 * time.Second
	defaultGRPCMaxPendingHeaderSize = 256 << 10
	defaultHTTP2MaxStreams          = 100
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
	minHeaderList   = 1 << 10
	maxHeaderList   = 16 << 20
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
	grpcTransport        string

	connWriteTimeout          time.Duration
	http2MaxStreams           uint
	grpcMaxHeaderListSize     byteSize
	grpcFirstMessageTimeout   time.Duration
	grpcMaxPendingHeaderBytes byteSize

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
	fs.StringVar(&g.grpcTransport, "grpc-transport", defaultGRPCTransport, "gRPC server: lean (ShouldRateLimit served on sluice's own HTTP/2 path, every other call by grpc-go on the same connection) or grpc-go (grpc-go for every call)")
	fs.UintVar(&g.http2MaxStreams, "http2-max-concurrent-streams", defaultHTTP2MaxStreams, "most concurrent requests per HTTP/2 connection of the HTTP and admin listeners (with TLS); a stream beyond it is refused")
	g.grpcMaxHeaderListSize = defaultGRPCMaxHeaderListSize
	fs.Var(&g.grpcMaxHeaderListSize, "grpc-max-header-list-size", "largest `size` of a gRPC call's headers, decoded (HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE; the stream is reset beyond)")
	g.grpcMaxPendingHeaderBytes = defaultGRPCMaxPendingHeaderSize
	fs.Var(&g.grpcMaxPendingHeaderBytes, "grpc-max-pending-header-bytes", "most header `bytes`, per gRPC connection, held by calls whose request message has not arrived; a call beyond it is refused at once (RESOURCE_EXHAUSTED)")
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
		{&g.grpcFirstMessageTimeout, "grpc-first-message-timeout", defaultGRPCFirstMessageTimeout, "longest time from a gRPC call's headers to its request message; a call still without one is cancelled then (must be > 0)"},
		{&g.connWriteTimeout, "conn-write-timeout", defaultConnWriteTimeout, "longest time one write to a connection may block, on every listener (HTTP, gRPC, admin): a client that does not read its answers is disconnected then (must be > 0)"},
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
	if g.grpcFirstMessageTimeout == 0 {
		return errors.New("--grpc-first-message-timeout 0s: must be > 0 (a call must send its message some time)")
	}
	if g.connWriteTimeout == 0 {
		return errors.New("--conn-write-timeout 0s: must be > 0 (a client must read its answers some time)")
	}
	if g.grpcMaxHeaderListSize < minHeaderList || g.grpcMaxHeaderListSize > maxHeaderList {
		return fmt.Errorf("--grpc-max-header-list-size %v: want 1KiB to 16MiB", &g.grpcMaxHeaderListSize)
	}
	if g.grpcMaxPendingHeaderBytes < g.grpcMaxHeaderListSize || g.grpcMaxPendingHeaderBytes > 1<<30 {
		return fmt.Errorf("--grpc-max-pending-header-bytes %v: want --grpc-max-header-list-size (%v) to 1GiB", &g.grpcMaxPendingHeaderBytes, &g.grpcMaxHeaderListSize)
	}
	if g.httpMaxHeaderBytes < minHeaderBytes || g.httpMaxHeaderBytes > maxHeaderBytes {
		return fmt.Errorf("--http-max-header-bytes %v: want 4KiB to 16MiB", &g.httpMaxHeaderBytes)
	}
	if g.maxConnections < 0 || g.maxConnections > maxConnsPerList {
		return fmt.Errorf("--max-connections %d: want 0 (no cap) to %d", g.maxConnections, maxConnsPerList)
	}
	if g.http2MaxStreams < 1 || g.http2MaxStreams > math.MaxUint32 {
		return fmt.Errorf("--http2-max-concurrent-streams %d: want 1 to %d", g.http2MaxStreams, uint32(math.MaxUint32))
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
	if g.grpcTransport != "lean" && g.grpcTransport != "grpc-go" {
		return fmt.Errorf("--grpc-transport %q: want lean or grpc-go", g.grpcTransport)
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
		// HTTP/2 (over TLS): a stream holds its headers (at most
		// MaxHeaderBytes) until its body is read, within ReadTimeout.
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: int(g.http2MaxStreams)},
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
// What a call holds before its message (its header list and a worker) is
// bounded by listen.Streams: a time, and a budget of header bytes per
// connection; its interceptors come first, so that the message's arrival
// is seen before anything else runs.
//
// With tr (tracing on), each ShouldRateLimit call runs in a server span,
// outside the guard so that the span covers a recovered panic too. The
// outer interceptors (envoyproxy/ratelimit's statistics) come after the
// streams' and before the span.
func (g *transportFlags) grpcOptions(log *slog.Logger, m *metrics.Metrics, tr *tracing.Tracer, cm *connMetrics, outer ...grpc.UnaryServerInterceptor) []grpc.ServerOption {
	age := g.grpcMaxConnAge
	if age == 0 {
		age = time.Duration(math.MaxInt64) // grpc-go's infinity
	}
	panicked := func() { m.Panicked("grpc") }
	streams := listen.NewStreams(listen.StreamLimits{
		FirstMessage:          g.grpcFirstMessageTimeout,
		MaxPendingHeaderBytes: int64(g.grpcMaxPendingHeaderBytes),
		Expired:               cm.streams.WithLabelValues("first_message_timeout"),
		Refused:               cm.streams.WithLabelValues("pending_header_bytes"),
	})
	return append(streams.ServerOptions(),
		grpc.MaxRecvMsgSize(int(g.grpcMaxMessageSize)),
		grpc.MaxConcurrentStreams(uint32(g.grpcMaxStreams)),
		grpc.MaxHeaderListSize(uint32(g.grpcMaxHeaderListSize)),
		grpc.ConnectionTimeout(g.grpcHandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: g.grpcKeepaliveMinTime, PermitWithoutStream: g.grpcKeepaliveNoRPC}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: age, MaxConnectionAgeGrace: g.grpcMaxConnAgeGrace}),
		grpc.ChainUnaryInterceptor(streams.UnaryInterceptor(), g.unaryInterceptor(log, m, tr, outer...)),
		grpc.ChainStreamInterceptor(streams.StreamInterceptor(), rls.RecoverStream(log, panicked)),
		grpc.NumStreamWorkers(uint32(g.grpcWorkers)),
		grpc.ForceServerCodecV2(rlswire.Codec{}),
	)
}

// unaryInterceptor is the guard (panics, the default deadline), behind
// tr's span when tracing, so that the span covers a recovered panic too,
// behind the outer interceptors (envoyproxy/ratelimit's statistics), the
// first outermost.
func (g *transportFlags) unaryInterceptor(log *slog.Logger, m *metrics.Metrics, tr *tracing.Tracer, outer ...grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	in := rls.Guard(log, func() { m.Panicked("grpc") }, g.requestTimeout)
	if tr != nil {
		in = chainUnary(tr.UnaryInterceptor(), in)
	}
	for i := len(outer) - 1; i >= 0; i-- {
		in = chainUnary(outer[i], in)
	}
	return in
}

// chainUnary runs outer around inner, as grpc.ChainUnaryInterceptor does.
func chainUnary(outer, inner grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return outer(ctx, req, info, func(ctx context.Context, req any) (any, error) { return inner(ctx, req, info, h) })
	}
}

// leanServer serves ShouldRateLimit on grpcfast's own HTTP/2 path, with
// the same bounds, interceptors and workers as gs, and every other call
// with gs on the same connections. inline: the store never waits (the
// memory store), so calls run on their connection's reader.
func (g *transportFlags) leanServer(gs *grpc.Server, log *slog.Logger, m *metrics.Metrics, tr *tracing.Tracer, cm *connMetrics, inline bool, outer ...grpc.UnaryServerInterceptor) *grpcfast.Server {
	age := g.grpcMaxConnAge
	if age == 0 {
		age = time.Duration(math.MaxInt64)
	}
	return grpcfast.New(gs, grpcfast.Options{
		MaxRecvMsgSize:        int(g.grpcMaxMessageSize),
		MaxConcurrentStreams:  uint32(g.grpcMaxStreams),
		MaxHeaderListSize:     uint32(g.grpcMaxHeaderListSize),
		ConnectionTimeout:     g.grpcHandshakeTimeout,
		KeepalivePolicy:       keepalive.EnforcementPolicy{MinTime: g.grpcKeepaliveMinTime, PermitWithoutStream: g.grpcKeepaliveNoRPC},
		Keepalive:             keepalive.ServerParameters{MaxConnectionAge: age, MaxConnectionAgeGrace: g.grpcMaxConnAgeGrace},
		FirstMessageTimeout:   g.grpcFirstMessageTimeout,
		MaxPendingHeaderBytes: int64(g.grpcMaxPendingHeaderBytes),
		Expired:               cm.streams.WithLabelValues("first_message_timeout"),
		Refused:               cm.streams.WithLabelValues("pending_header_bytes"),
		UnaryInterceptor:      g.unaryInterceptor(log, m, tr, outer...),
		Workers:               g.grpcWorkers,
		Inline:                inline,
		Codec:                 rlswire.Codec{},
		Log:                   log,
		Panicked:              func() { m.Panicked("grpc") },
	})
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

// connMetrics count the connections of each listener, and the gRPC
// calls ended for want of a message.
type connMetrics struct {
	open     *prometheus.GaugeVec
	rejected *prometheus.CounterVec
	streams  *prometheus.CounterVec
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
		streams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_grpc_streams_refused_total",
			Help: "gRPC calls ended before their request message, by reason: first_message_timeout (--grpc-first-message-timeout), pending_header_bytes (--grpc-max-pending-header-bytes).",
		}, []string{"reason"}),
	}
	reg.MustRegister(c.open, c.rejected, c.streams)
	return c
}

// listenOptions are the limits of the listener called name.
func (g *transportFlags) listenOptions(name string, cm *connMetrics) listen.Options {
	return listen.Options{
		MaxConns:     g.maxConnections,
		WriteTimeout: g.connWriteTimeout,
		Open:         cm.open.WithLabelValues(name),
		Rejected:     cm.rejected.WithLabelValues(name),
	}
}
