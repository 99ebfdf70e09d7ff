package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/region"
	"github.com/sluicehq/sluice/service/admin"
	"github.com/sluicehq/sluice/service/certs"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/gctune"
	"github.com/sluicehq/sluice/service/metrics"
	"github.com/sluicehq/sluice/service/rls"
	"github.com/sluicehq/sluice/service/server"
	"github.com/sluicehq/sluice/service/source"
	"github.com/sluicehq/sluice/service/tracing"
)

// serveFlags are serve's flags, in groups that each register and validate
// their own; validate adds the rules across groups.
type serveFlags struct {
	listen    listenFlags    // --http, --grpc, --admin, --ready-file
	storeAPI  storeAPIFlags  // --store-api-*: the store API's listener
	admin     adminFlags     // --admin-token-file, --admin-client-ca, --admin-auth-metrics
	transport transportFlags // the HTTP and gRPC servers' limits and workers
	tls       tlsFlags       // --tls-*, --redis-tls-*
	config    configFlags    // --config, --reload-interval
	xds       xdsFlags       // --xds-*: the configuration over xDS instead of files
	redis     redisFlags     // --redis*, --remote-store*, --failure-mode, --replicas, --readyz-breaker, --tiered, --lease-*
	service   serviceFlags   // --response-headers, --*-header, --shadow-mode, --quota-mode
	auth      authFlags      // --auth-*, --trusted-proxies
	limits    limitsFlags    // --max-*, --memory-max-keys
	shutdown  shutdownFlags  // --drain-delay, --shutdown-timeout
	runtime   runtimeFlags   // --log-level, --log-format, --gc-heap-floor, --reference-env
	tracing   tracingFlags   // --tracing*: OpenTelemetry traces over OTLP
	stats     refStatsFlags  // --statsd*, --reference-stats-*: envoyproxy/ratelimit's statistics
}

// serveFlagSet defines serve's flags on f.
func serveFlagSet(f *serveFlags, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("serve", "sluice serve [flags]",
		`Serve Envoy's rate-limit service (gRPC ShouldRateLimit, and POST /json),
sluice's POST /v1/check, GET /v1/auth (nginx auth_request, Traefik
ForwardAuth), /healthz, /readyz and /metrics. With no flags: the memory store
and the built-in example configuration, HTTP on :8080 and gRPC on :8081.
SIGHUP reloads the configuration files; with --xds-server the configuration
comes from an xDS control plane instead. SIGTERM and SIGINT drain and exit.`, stderr)
	for _, g := range f.groups() {
		g.register(fs)
	}
	withEnv(fs)
	return fs
}

// flagGroup is a group of serve's flags.
type flagGroup interface {
	register(*flag.FlagSet)
	validate() error // called once the flags are set
}

// groups are f's groups, in the order validate checks them.
func (f *serveFlags) groups() []flagGroup {
	return []flagGroup{&f.redis, &f.service, &f.auth, &f.config, &f.xds, &f.shutdown,
		&f.listen, &f.storeAPI, &f.admin, &f.transport, &f.tls, &f.limits, &f.runtime, &f.tracing, &f.stats}
}

// validate checks each group, then the rule across groups: the TLS flags
// of the Redis client live with the listeners' (tlsFlags), and they need
// --redis to be a rediss:// URL.
func (f *serveFlags) validate() error {
	// A limit deeper than a request descriptor can reach is an error of
	// the configuration.
	f.config.read.maxEntries = f.limits.maxDescriptorEntries
	for _, g := range f.groups() {
		if err := g.validate(); err != nil {
			return err
		}
	}
	if f.xds.server != "" && f.config.file != "" {
		return errors.New("--xds-server and --config are alternatives: the configuration comes from xDS or from files")
	}
	if f.tls.redisSet() && !strings.HasPrefix(f.redis.url, "rediss") && !strings.HasPrefix(f.redis.perSecond, "rediss") {
		return errors.New("--redis-tls-* need a rediss:// --redis (or --redis-persecond) URL")
	}
	if err := f.storeAPI.check(&f.tls); err != nil {
		return err
	}
	return f.admin.check(&f.tls)
}

func serve(args []string, stdout, stderr io.Writer) int {
	var f serveFlags
	fs := serveFlagSet(&f, stderr)
	if code, done := parse(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice serve: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := f.validate(); err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 2
	}
	log := f.runtime.logger(stderr)
	f.runtime.refEnv.log(log)
	if f.runtime.gcHeapFloor > 0 {
		defer gctune.SetHeapFloor(uint64(f.runtime.gcHeapFloor))()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return runServe(ctx, stop, &f, log, stderr)
}

// runServe serves until ctx ends (a signal) or a server fails, then drains
// and exits within --drain-delay plus --shutdown-timeout; stop releases the
// signals, so that a second one kills the process.
func runServe(ctx context.Context, stop func(), f *serveFlags, log *slog.Logger, stderr io.Writer) int {
	m := metrics.New()
	rs, err := f.stats.start(log, stderr, m)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 1
	}
	// Last: the statistics' final flush, once the servers stopped.
	defer func() { rs.close(time.Now().Add(f.shutdown.timeout)) }()
	// Every configuration, at start, on reload or from xDS, is put in force
	// through ap.
	ap := &source.Applier{
		// Every configuration is vetted before it runs, and what its
		// largest rules cost is said.
		Check: func(c *config.Config) error {
			if err := checkFailureModes(c, f); err != nil {
				return err
			}
			if err := checkMemcacheAlgorithms(c, f); err != nil {
				return err
			}
			for _, w := range c.Warnings() {
				log.Warn("configuration: " + w)
			}
			return nil
		},
		Metrics: m,
		Info:    &admin.ConfigState{},
		Log:     log,
	}
	var cfgHealth *configHealth
	switch {
	case f.config.readyNeeds:
		cfgHealth = &configHealth{needDomain: true}
	case f.xds.server != "" && f.xds.forceStart:
		// Serving before a first configuration: gRPC health says so as
		// /readyz does.
		cfgHealth = &configHealth{}
	}
	if cfgHealth != nil {
		ap.Applied = cfgHealth.applied
	}
	files := f.config.files()
	var obs engine.Observer = m
	if rs != nil {
		ap.Loaded, files.Read, obs = rs.ConfigLoaded, rs.FilesRead, metrics.Tee(m, rs)
	}
	cfg := config.Empty()
	if f.xds.server == "" {
		if cfg, err = files.Load(); err == nil {
			err = ap.Start(cfg, files.Origin())
		}
		if err != nil {
			fmt.Fprintln(stderr, configError(err))
			return 1
		}
	}
	auth, err := f.auth.auth()
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 2
	}
	certs, err := f.tls.server(log)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: --tls-*: %v\n", err)
		return 1
	}

	tp, err := tracing.Start(ctx, f.tracing.config(), log)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: tracing: %v\n", err)
		return 2
	}
	defer shutdownTracing(tp, min(f.shutdown.timeout, 5*time.Second), log)

	st, err := openStore(ctx, *f, m, rs, log)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 1
	}
	st.wrapForTest()
	c := &core{st: st, metrics: m, log: log, config: ap.Info, cfgHealth: cfgHealth, refStats: rs}
	if tp != nil {
		c.tr = tp.Tracer
		log.Info("tracing on", "keys", f.tracing.keys)
	}
	// Every store call of the service, timed and traced in this one layer.
	st.store = metrics.Observe(st.store, m, c.tr)
	eopts := append(f.service.engineOptions(),
		engine.WithObserver(obs), engine.WithLogger(log), engine.WithBounds(f.limits.bounds()), engine.WithTracer(c.tr))
	if prefix, ok := f.referenceKeys(); ok {
		eopts = append(eopts, engine.WithReferenceKeys(prefix))
	}
	if n := f.runtime.refEnv.localCacheKeys; n > 0 && f.redis.shared() {
		eopts = append(eopts, engine.WithLocalCache(n))
	}
	c.eng = engine.New(st.store, cfg, eopts...)
	if rs != nil && f.runtime.refEnv.localCacheKeys > 0 && f.redis.shared() {
		rs.LocalCache(c.eng.LocalCacheStats)
	}
	ap.Engine = c.eng
	if st.region != nil {
		// The configuration's counters of fixed values, known at the home
		// store before their first request: at start (/readyz waits for
		// it) and for each configuration put in force.
		w := newWarmer(st.region, c.eng, f.redis.region.timeoutMax, log)
		prev, closeStore := ap.Applied, st.close
		ap.Applied = func(cfg *config.Config) {
			if prev != nil {
				prev(cfg)
			}
			w.kick()
		}
		st.close = func() { w.close(); closeStore() }
		c.warm = w
		w.kick()
	}
	c.svc = rls.New(c.eng, f.service.options()...)
	var src *source.XDS
	if f.xds.server != "" {
		if src, err = startXDS(ctx, f, ap, c); err != nil {
			st.close()
			fmt.Fprintf(stderr, "sluice serve: %v\n", err)
			return 1
		}
	}
	srv, err := startServers(f, c, auth, certs)
	if err != nil {
		if src != nil {
			src.Stop()
		}
		st.close()
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 1
	}
	log.Info("sluice listening", "http", srv.ls.http.Addr().String(), "grpc", srv.ls.grpc.Addr().String(), "tls", certs != nil,
		"store", st.name, "config", f.configName(), "domains", strings.Join(c.eng.Config().Domains(), ","))
	if f.listen.readyFile != "" {
		if err := writeReadyFile(f.listen.readyFile, srv.addrs()); err != nil {
			log.Error("writing ready file", "err", err)
		}
	}
	// The files are reloaded until the servers are drained; without
	// --config, SIGHUP is still caught, and reloads nothing.
	reloadCtx, stopReload := context.WithCancel(context.Background())
	var reloading sync.WaitGroup
	reloading.Go(func() { files.Run(reloadCtx, ap) })

	code := srv.wait(ctx, &f.shutdown, log)
	stop()
	deadline := srv.drain(&f.shutdown, log)
	stopReload()
	reloading.Wait()
	if src != nil {
		src.Stop()
	}
	if !closeBy(st.close, deadline) {
		log.Warn("store close did not finish within --shutdown-timeout; exiting anyway")
	}
	log.Info("stopped")
	return code
}

// core is what serve's servers share: the store, the service that decides
// through it, and their metrics and log.
type core struct {
	st      *storeSet
	eng     *engine.Engine // the decision, which svc and api translate into
	svc     *rls.Service
	metrics *metrics.Metrics
	log     *slog.Logger
	config  *admin.ConfigState // the configuration in force, for the admin API
	tr      *tracing.Tracer    // nil when tracing is off
	// refStats are envoyproxy/ratelimit's statistics; nil when off.
	refStats *refStats
	// configReady is /readyz's condition on the configuration: nil when
	// it is in force from the start (files).
	configReady func() (bool, string)
	// cfgHealth is --ready-needs-config's readiness, nil without it.
	cfgHealth *configHealth
	// warm warms the configuration's counters with --region; nil without.
	warm *warmer
}

// servers are serve's servers, serving on their listeners.
type servers struct {
	ls     *listeners
	api    *server.Server // the HTTP API
	health *rls.Health
	http   []*http.Server // the data plane's, then the admin listener's
	grpc   grpcServer
	errc   chan error // a server that stopped serving
	// storeAPI is the store API's server, nil without --store-api-addr.
	storeAPI *storeAPIServer
	// stopPage stops the status page's sampling (a no-op without --admin).
	stopPage func()
}

// startServers opens the listeners and serves the HTTP API, the gRPC
// service and the admin endpoints on them.
func startServers(f *serveFlags, c *core, auth server.Auth, srvCerts *certs.Server) (*servers, error) {
	api := newAPI(c, auth, f.redis.failover.readyzBreaker)
	tf := &f.transport
	if c.st.waitBound >= 0 && c.st.waitBound <= tf.requestTimeout {
		// Every wait of a decision is already bounded below
		// --request-timeout, so a deadline of its own would only cost each
		// call without one a timer (about 5% of a memory-store call).
		tf.requestTimeout = 0
	}
	var adminH http.Handler
	stopPage := func() {}
	if addr, _ := f.listen.adminAddr(); addr != "" {
		// The keys denied most and the status page, behind the admin
		// API's authentication.
		routes, stop, err := operatorRoutes(c, api)
		if err != nil {
			return nil, err
		}
		h, err := adminHandler(&f.admin, c, routes)
		if err != nil {
			stop()
			return nil, err
		}
		adminH, stopPage = h, stop
	}
	// envoyproxy/ratelimit's statistics as Prometheus metrics, on a
	// listener of their own as that service serves them.
	var promL net.Listener
	if c.refStats.prometheus() {
		var err error
		if promL, err = net.Listen("tcp", c.refStats.promAddr); err != nil {
			stopPage()
			return nil, fmt.Errorf("--reference-stats-prometheus: %w", err)
		}
	}
	cm := newConnMetrics(c.metrics.Registry())
	ls, err := f.listen.listen(tf, cm, srvCerts, f.tls.grpcOnly, f.admin.tlsConfig)
	if err != nil {
		stopPage()
		if promL != nil {
			promL.Close()
		}
		return nil, err
	}
	_, split := f.listen.adminAddr()
	s := &servers{ls: ls, api: api, errc: make(chan error, 5), stopPage: stopPage}
	if s.storeAPI, err = startStoreAPI(f, c, srvCerts, cm, s.errc); err != nil {
		ls.close()
		stopPage()
		return nil, err
	}
	dataPlane := tf.httpServer(tf.dataPlane(api, c.log, c.metrics, split), c.log, false)
	s.http = []*http.Server{dataPlane}
	gs := grpc.NewServer(tf.grpcOptions(c.log, c.metrics, c.tr, cm, c.refStats.interceptor()...)...)
	s.health = rls.Register(gs, c.svc)
	if c.warm != nil && c.cfgHealth == nil {
		// gRPC health follows the warming alone.
		c.cfgHealth = &configHealth{ok: true}
	}
	if c.cfgHealth != nil {
		c.cfgHealth.mu.Lock()
		c.cfgHealth.warm = c.warm
		c.cfgHealth.mu.Unlock()
		c.cfgHealth.attach(s.health)
		if c.warm != nil {
			c.warm.attach(c.cfgHealth)
		}
	}
	if tf.grpcReflection {
		reflection.Register(gs)
	}
	s.grpc = gs
	serveGRPC := gs.Serve
	if tf.grpcTransport == "lean" {
		fast := tf.leanServer(gs, c.log, c.metrics, c.tr, cm, c.st.waitBound == 0, c.refStats.interceptor()...)
		fast.RegisterService(&pb.RateLimitService_ServiceDesc, c.svc)
		if err := fast.HandleUnary(pb.RateLimitService_ShouldRateLimit_FullMethodName, rls.NewRequest, c.svc.UnaryHandler()); err != nil {
			ls.close()
			stopPage()
			return nil, err
		}
		s.grpc, serveGRPC = fast, fast.Serve
	}
	go func() { s.errc <- fmt.Errorf("http: %w", dataPlane.Serve(ls.http)) }()
	go func() { s.errc <- fmt.Errorf("grpc: %w", serveGRPC(ls.grpc)) }()
	if promL != nil {
		ps := tf.httpServer(c.refStats.promServer(c.metrics), c.log, true)
		s.http = append(s.http, ps)
		go func() { s.errc <- fmt.Errorf("reference stats: %w", ps.Serve(promL)) }()
		c.log.Info("envoyproxy/ratelimit's statistics as Prometheus metrics", "addr", promL.Addr().String(), "path", c.refStats.promPath)
	}
	if ls.admin != nil {
		as := tf.httpServer(adminH, c.log, true)
		s.http = append(s.http, as)
		go func() { s.errc <- fmt.Errorf("admin: %w", as.Serve(ls.admin)) }()
		c.log.Info("admin listener", "addr", ls.admin.Addr().String(), "metrics_on_http", !split)
	}
	return s, nil
}

// newAPI is the HTTP API (/json, /v1/check, /v1/auth, the probes and
// /metrics); with readyzBreaker, /readyz fails while the store's breaker is
// open.
func newAPI(c *core, auth server.Auth, readyzBreaker bool) *server.Server {
	opts := []server.Option{server.WithMetrics(c.metrics), server.WithLogger(c.log), server.WithAuth(auth), server.WithTracer(c.tr)}
	breaker := func() (bool, string) { return true, "" }
	if ready := c.st.ready; readyzBreaker && ready != nil {
		breaker = func() (bool, string) {
			if ready() {
				return true, ""
			}
			return false, "shared store unavailable (circuit breaker open)"
		}
	}
	cr := c.configReady
	if ch := c.cfgHealth; ch != nil {
		xds := cr
		cr = func() (bool, string) {
			if xds != nil {
				if ok, why := xds(); !ok {
					return ok, why
				}
			}
			return ch.ready()
		}
	}
	if w := c.warm; w != nil {
		cfg := cr
		cr = func() (bool, string) {
			if cfg != nil {
				if ok, why := cfg(); !ok {
					return ok, why
				}
			}
			return w.ready()
		}
	}
	if cr != nil {
		opts = append(opts, server.WithReadiness(func() (bool, string) {
			if ok, why := cr(); !ok {
				return ok, why
			}
			return breaker()
		}))
	} else if readyzBreaker && c.st.ready != nil {
		opts = append(opts, server.WithReadiness(breaker))
	}
	return server.New(c.svc, c.st.store, opts...)
}

// wait serves until ctx ends (a signal) or a server fails, and returns the
// exit code.
func (s *servers) wait(ctx context.Context, g *shutdownFlags, log *slog.Logger) int {
	select {
	case <-ctx.Done():
		log.Info("signal received: draining", "drain_delay", g.drainDelay, "timeout", g.timeout)
		return 0
	case err := <-s.errc:
		log.Error("server failed", "err", err)
		return 1
	}
}

// drain turns readiness false, keeps serving for --drain-delay, then shuts
// the servers down within --shutdown-timeout; it returns that deadline.
func (s *servers) drain(g *shutdownFlags, log *slog.Logger) (deadline time.Time) {
	s.api.Drain()
	s.health.Drain()
	time.Sleep(g.drainDelay)
	deadline = time.Now().Add(g.timeout)
	if err := shutdown(s.http, deadline, s.grpcServers()...); err != nil {
		log.Warn("drain incomplete", "err", err)
	}
	s.stopPage()
	return deadline
}

// storeSet is the store serve decides through and how to close it.
type storeSet struct {
	store sluice.Store
	// granter answers the store API's Grant: the memory store, or the
	// shared store under failover (nil: it cannot grant, or --region).
	granter sluice.Granter
	name    string
	ready   func() bool // nil without a breaker
	close   func()
	// region is the store of --region (store, before any wrapping); nil
	// without.
	region *region.Store
	// waitBound is the longest a decision can wait on the store: the
	// memory store never waits (0), failover bounds every shared call by
	// --redis-timeout; -1 when unknown (a store wrapped for a test).
	waitBound time.Duration
}

// shutdownTracing flushes the spans still queued, within d.
func shutdownTracing(tp *tracing.Provider, d time.Duration, log *slog.Logger) {
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("tracing: flushing the last spans", "err", err)
	}
}
