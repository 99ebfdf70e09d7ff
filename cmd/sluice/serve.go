package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/gctune"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/server"
)

type serveFlags struct {
	config          string
	redis           string
	http, grpc      string
	failureMode     string
	replicas        int
	logLevel        string
	readyFile       string
	reloadInterval  time.Duration
	drainDelay      time.Duration
	shutdownTimeout time.Duration
	responseHeaders bool
	headerNames     [3]string // limit, remaining, reset
	shadowMode      bool
	quotaMode       bool
	readyzBreaker   bool
	authDomain      string
	authDescriptors string
	authDenyStatus  int
	identity        identityFlags
	redisTimeout    time.Duration
	tiered          bool
	redisRequired   bool
	transport       transportFlags
	tls             tlsFlags
	leaseMax        int
	leaseFraction   float64
	leaseLifetime   time.Duration
	leaseRefresh    float64
	grpcWorkers     int
	gcHeapFloor     byteSize
	limits          limitsFlags
}

// defaultGCHeapFloor is the default of --gc-heap-floor. At GOGC=100 the
// memory store's live heap of a few MB was collected dozens of times a second
// under load in bench/loadgen (12% of the CPU in GC mark workers); a floor
// costs at most about this much heap, and nothing once the live heap is large.
const defaultGCHeapFloor = 64 << 20

// defaultGRPCWorkers is the default of --grpc-workers. With GOMAXPROCS
// workers (2 on 2 CPUs) the pool was almost always busy at 64 concurrent
// callers in bench/loadgen, and 14% of the CPU went to
// runtime.newstack/copystack growing the stacks of per-call goroutines; 128
// workers and GOGC=400 together gave about 30% more throughput. An idle
// worker costs a parked goroutine.
const defaultGRPCWorkers = 128

// maxGRPCWorkers bounds --grpc-workers: each worker is a goroutine for the
// life of the server.
const maxGRPCWorkers = 1 << 16

const defaultAuthDescriptors = "remote_address=X-Forwarded-For|X-Real-Ip,path=X-Original-URI|X-Forwarded-Uri,api_key=X-Api-Key"

// serveFlagSet defines serve's flags on f.
func serveFlagSet(f *serveFlags, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("serve", "sluice serve [flags]",
		`Serve Envoy's rate-limit service (gRPC ShouldRateLimit, and POST /json),
sluice's POST /v1/check, GET /v1/auth (nginx auth_request, Traefik
ForwardAuth), /healthz, /readyz and /metrics. With no flags: the memory store
and the built-in example configuration, HTTP on :8080 and gRPC on :8081.
SIGHUP reloads the configuration; SIGTERM and SIGINT drain and exit.`, stderr)
	fs.StringVar(&f.config, "config", "", "configuration `FILE or DIR` (envoyproxy/ratelimit YAML); the built-in example when empty")
	fs.StringVar(&f.redis, "redis", "", "shared store `URL`: redis://[user:pass@]host:port[/db], rediss:// (TLS), redis+cluster://h1:p1,h2:p2, redis+sentinel://s1:p1?master=name; the memory store when empty")
	fs.StringVar(&f.http, "http", ":8080", "HTTP listen `address`")
	fs.StringVar(&f.grpc, "grpc", ":8081", "gRPC listen `address`")
	fs.StringVar(&f.failureMode, "failure-mode", "closed", "when the shared store fails: `closed` (deny) or open (admit through a local limit at rate/replicas); a rule's failure_mode overrides it")
	fs.IntVar(&f.replicas, "replicas", 0, "number of sluice replicas sharing the store: each admits rate/N while the store is down; required by --failure-mode open with --redis")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.StringVar(&f.readyFile, "ready-file", "", "write {\"http\":ADDR,\"grpc\":ADDR} to this `file` once listening")
	fs.DurationVar(&f.reloadInterval, "reload-interval", time.Second, "how often to check the configuration files for changes; 0 reloads on SIGHUP only")
	fs.DurationVar(&f.drainDelay, "drain-delay", 0, "on SIGTERM, how long to keep serving with readiness false before draining (for load balancers to notice)")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 15*time.Second, "longest wait for in-flight requests when draining")
	fs.BoolVar(&f.responseHeaders, "response-headers", false, "add RateLimit-Limit, -Remaining and -Reset to ShouldRateLimit's response_headers_to_add")
	fs.StringVar(&f.headerNames[0], "limit-header", rls.HeaderLimit, "`name` of --response-headers' limit header (the reference's LIMIT_LIMIT_HEADER)")
	fs.StringVar(&f.headerNames[1], "remaining-header", rls.HeaderRemaining, "`name` of --response-headers' remaining header (the reference's LIMIT_REMAINING_HEADER)")
	fs.StringVar(&f.headerNames[2], "reset-header", rls.HeaderReset, "`name` of --response-headers' reset header (the reference's LIMIT_RESET_HEADER)")
	fs.BoolVar(&f.shadowMode, "shadow-mode", false, "answer every ShouldRateLimit OK, as the reference's SHADOW_MODE: statuses and metrics still tell which limits are over (for trying limits on live traffic)")
	fs.BoolVar(&f.quotaMode, "quota-mode", false, "put every limit in quota_mode, as the reference's QUOTA_MODE: over its limit, a descriptor is reported but does not deny")
	fs.BoolVar(&f.readyzBreaker, "readyz-breaker", false, "make /readyz fail while the shared store's circuit breaker is open")
	fs.StringVar(&f.authDomain, "auth-domain", "example", "domain of GET /v1/auth requests")
	fs.StringVar(&f.authDescriptors, "auth-descriptors", defaultAuthDescriptors, "descriptors of GET /v1/auth, `key=Header|Header,...`: a key is valued by the first of its headers present (and left out when none is); remote_address, and a key naming X-Forwarded-For, Forwarded or X-Real-Ip, is the client's address, read from those headers only when the peer is in --trusted-proxies")
	fs.IntVar(&f.authDenyStatus, "auth-deny-status", 429, "HTTP `status` of a GET /v1/auth denial (403 for nginx auth_request, which turns 429 into 500)")
	f.identity.register(fs)
	fs.DurationVar(&f.redisTimeout, "redis-timeout", 50*time.Millisecond, "deadline of each shared store call")
	fs.BoolVar(&f.tiered, "tiered", false, "with --redis: put a local tier in front of Redis (cached denials: exact, no extra admissions)")
	fs.IntVar(&f.leaseMax, "lease-max", 0, "with --tiered: take up to `N` units per Redis call and spend them locally (fixed and sliding windows; 0: no leases)")
	fs.Float64Var(&f.leaseFraction, "lease-fraction", 0.1, "with --lease-max: a lease is at most this fraction of a limit's capacity")
	fs.DurationVar(&f.leaseLifetime, "lease-lifetime", time.Second, "with --lease-max: longest time a lease is spent")
	fs.Float64Var(&f.leaseRefresh, "lease-refresh-ahead", 0.25, "with --lease-max: take a key's next lease in the background once its lease is down to this `fraction` (0 < F < 1), so that steady traffic never waits for Redis; 0 turns it off")
	fs.BoolVar(&f.redisRequired, "redis-required", false, "exit 1 when --redis cannot be reached at start, instead of deciding by the failure policy while connecting in the background")
	f.gcHeapFloor = defaultGCHeapFloor
	fs.Var(&f.gcHeapFloor, "gc-heap-floor", "let the heap grow to this `size` (64MiB, 256MB, bytes) before the garbage collector runs: GOGC is raised while the live heap is small and returns to its base (GOGC's, or 100) once the live heap is large; 0 disables it, as does GOGC=off; a GOMEMLIMIT still wins")
	fs.IntVar(&f.grpcWorkers, "grpc-workers", defaultGRPCWorkers, "gRPC stream workers: goroutines kept to serve calls (a call finding none idle starts a goroutine of its own)")
	f.transport.register(fs)
	f.tls.register(fs)
	f.limits.register(fs)
	withEnv(fs)
	return fs
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
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		fmt.Fprintf(stderr, "sluice serve: --log-level %q: want debug, info, warn or error\n", f.logLevel)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if f.gcHeapFloor > 0 {
		defer gctune.SetHeapFloor(uint64(f.gcHeapFloor))()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return runServe(ctx, stop, &f, log, stderr)
}

// runServe serves until ctx ends (a signal) or a server fails, then drains
// and exits within --drain-delay plus --shutdown-timeout; stop releases the
// signals, so that a second one kills the process.
func runServe(ctx context.Context, stop func(), f *serveFlags, log *slog.Logger, stderr io.Writer) int {
	var sum [32]byte
	if f.config != "" {
		sum, _ = fingerprint([]string{f.config}) // before loading: a change in between is reloaded
	}
	cfg, err := loadConfig(f.config)
	if err == nil {
		err = checkFailureModes(cfg, f)
	}
	if err != nil {
		fmt.Fprintln(stderr, configError(err))
		return 1
	}
	sources, err := server.ParseAuthSources(f.authDescriptors)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: --auth-descriptors: %v\n", err)
		return 2
	}
	certs, err := f.tls.server(log)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: --tls-*: %v\n", err)
		return 1
	}

	metrics := server.NewMetrics()
	st, err := openStore(ctx, *f, metrics, log)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 1
	}
	st.wrapForTest()
	storeClosed := false
	defer func() {
		if !storeClosed {
			st.close()
		}
	}()

	svc := rls.New(st.store, cfg, rls.WithObserver(metrics), rls.WithLogger(log), rls.WithResponseHeaders(f.responseHeaders),
		rls.WithHeaderNames(f.headerNames[0], f.headerNames[1], f.headerNames[2]),
		rls.WithShadowMode(f.shadowMode), rls.WithQuotaMode(f.quotaMode), rls.WithBounds(f.limits.bounds()))
	sopts := []server.Option{
		server.WithMetrics(metrics), server.WithLogger(log),
		server.WithAuth(server.Auth{Domain: f.authDomain, Sources: sources, DenyStatus: f.authDenyStatus, Identity: f.identity.identity()}),
	}
	if f.readyzBreaker && st.ready != nil {
		sopts = append(sopts, server.WithReadiness(func() (bool, string) {
			if st.ready() {
				return true, ""
			}
			return false, "shared store unavailable (circuit breaker open)"
		}))
	}
	hs := server.New(svc, st.store, sopts...)
	tf := &f.transport
	if st.waitBound >= 0 && st.waitBound <= tf.requestTimeout {
		// Every wait of a decision is already bounded below
		// --request-timeout, so a deadline of its own would only cost each
		// call without one a timer (about 5% of a memory-store call).
		tf.requestTimeout = 0
	}
	adminAddr, split := tf.adminAddr()
	cm := newConnMetrics(metrics.Registry())

	ls, err := listen(tf, cm, certs, f.http, f.grpc, adminAddr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 1
	}
	httpSrv := tf.httpServer(tf.dataPlane(hs, log, metrics, split), log, false)
	// A fixed pool of stream workers instead of a goroutine per call. grpc-go
	// hands a stream to a worker only when one is idle (a non-blocking send)
	// and otherwise starts a goroutine for the call, whose 8 KiB stack then
	// grows by copying; and each handler holds its worker while it waits for
	// the request's DATA frame. So the pool is sized for the concurrent
	// calls, not for the CPUs (see defaultGRPCWorkers).
	gopts := append(tf.grpcOptions(log, metrics), grpc.NumStreamWorkers(uint32(f.grpcWorkers)))
	grpcSrv := grpc.NewServer(gopts...)
	health := rls.Register(grpcSrv, svc)
	if tf.grpcReflection {
		reflection.Register(grpcSrv)
	}
	servers := []*http.Server{httpSrv}

	errc := make(chan error, 3)
	go func() { errc <- fmt.Errorf("http: %w", httpSrv.Serve(ls.http)) }()
	go func() { errc <- fmt.Errorf("grpc: %w", grpcSrv.Serve(ls.grpc)) }()
	if ls.admin != nil {
		as := tf.httpServer(adminHandler(metrics.Registry(), log, metrics), log, true)
		servers = append(servers, as)
		go func() { errc <- fmt.Errorf("admin: %w", as.Serve(ls.admin)) }()
		log.Info("admin listener", "addr", ls.admin.Addr().String(), "metrics_on_http", !split)
	}
	log.Info("sluice listening", "http", ls.http.Addr().String(), "grpc", ls.grpc.Addr().String(), "tls", certs != nil,
		"store", st.name, "config", configName(f.config), "domains", strings.Join(cfg.Domains(), ","))
	if f.readyFile != "" {
		if err := writeReadyFile(f.readyFile, ls.addrs()); err != nil {
			log.Error("writing ready file", "err", err)
		}
	}

	var wg sync.WaitGroup
	reloadCtx, stopReload := context.WithCancel(context.Background())
	r := &reloader{interval: f.reloadInterval, log: log, metrics: metrics, apply: svc.SetConfig, sum: sum,
		check: func(c *config.Config) error { return checkFailureModes(c, f) }}
	if f.config != "" {
		r.paths = []string{f.config}
	}
	wg.Go(func() { r.run(reloadCtx) }) // also without --config, so that SIGHUP does not kill the process

	code := 0
	select {
	case <-ctx.Done():
		log.Info("signal received: draining", "drain_delay", f.drainDelay, "timeout", f.shutdownTimeout)
	case err := <-errc:
		log.Error("server failed", "err", err)
		code = 1
	}
	stop()
	hs.Drain()
	health.Drain()
	time.Sleep(f.drainDelay)
	deadline := time.Now().Add(f.shutdownTimeout)
	if err := shutdown(servers, grpcSrv, deadline); err != nil {
		log.Warn("drain incomplete", "err", err)
	}
	stopReload()
	wg.Wait()
	storeClosed = true
	if !closeBy(st.close, deadline) {
		log.Warn("store close did not finish within --shutdown-timeout; exiting anyway")
	}
	log.Info("stopped")
	return code
}

// headerName reports whether s is an HTTP header field name (RFC 9110's
// token).
func headerName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func (f *serveFlags) validate() error {
	switch f.failureMode {
	case "open", "closed":
	default:
		return fmt.Errorf("--failure-mode %q: want open or closed", f.failureMode)
	}
	if f.replicas < 0 {
		return fmt.Errorf("--replicas %d: must be >= 0", f.replicas)
	}
	if f.failureMode == "open" && f.redis != "" && f.replicas == 0 {
		return errors.New("--failure-mode open needs --replicas N (the number of sluice replicas): each admits rate/N while the shared store is down")
	}
	for i, flag := range []string{"--limit-header", "--remaining-header", "--reset-header"} {
		if !headerName(f.headerNames[i]) {
			return fmt.Errorf("%s %q: want an HTTP header name (letters, digits and !#$%%&'*+-.^_`|~)", flag, f.headerNames[i])
		}
	}
	if f.authDenyStatus < 400 || f.authDenyStatus > 599 {
		return fmt.Errorf("--auth-deny-status %d: want a 4xx or 5xx status", f.authDenyStatus)
	}
	if err := f.identity.validate(); err != nil {
		return err
	}
	if (f.tiered || f.leaseMax > 0) && f.redis == "" {
		return errors.New("--tiered and --lease-max apply to --redis only")
	}
	if f.leaseMax > 0 && !f.tiered {
		return errors.New("--lease-max needs --tiered")
	}
	if f.leaseRefresh < 0 || f.leaseRefresh >= 1 {
		return fmt.Errorf("--lease-refresh-ahead %v: want 0 (off) or a fraction in (0, 1)", f.leaseRefresh)
	}
	if f.leaseMax < 0 || (f.leaseMax > 0 && (f.leaseFraction <= 0 || f.leaseFraction > 1 || f.leaseLifetime <= 0)) {
		return fmt.Errorf("--lease-max %d, --lease-fraction %v, --lease-lifetime %v: want N >= 0, a fraction in (0, 1] and a positive lifetime", f.leaseMax, f.leaseFraction, f.leaseLifetime)
	}
	if f.gcHeapFloor > 0 && f.gcHeapFloor < 1<<20 {
		return fmt.Errorf("--gc-heap-floor %d: want 0 (off) or at least 1MiB; a plain number is bytes", uint64(f.gcHeapFloor))
	}
	if f.grpcWorkers < 1 || f.grpcWorkers > maxGRPCWorkers {
		return fmt.Errorf("--grpc-workers %d: want 1 to %d", f.grpcWorkers, maxGRPCWorkers)
	}
	if f.reloadInterval < 0 || f.drainDelay < 0 || f.shutdownTimeout <= 0 {
		return errors.New("--reload-interval and --drain-delay must be >= 0, --shutdown-timeout > 0")
	}
	if err := f.transport.validate(); err != nil {
		return err
	}
	if err := f.tls.validate(); err != nil {
		return err
	}
	if f.tls.redisSet() && !strings.HasPrefix(f.redis, "rediss") {
		return errors.New("--redis-tls-* need a rediss:// --redis URL")
	}
	if f.redisRequired && f.redis == "" {
		return errors.New("--redis-required needs --redis")
	}
	if err := f.limits.validate(); err != nil {
		return err
	}
	return nil
}

func configName(path string) string {
	if path == "" {
		return "built-in example"
	}
	return path
}

func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		return config.Parse("built-in example", config.DefaultExample())
	}
	return config.Load(path)
}

// shutdown drains the HTTP servers and the gRPC server at once until
// deadline; past it, the remaining connections are closed, and shutdown
// returns even if handlers are still stuck (the process exits anyway).
func shutdown(hs []*http.Server, g *grpc.Server, deadline time.Time) error {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(hs)+1)
	for i, h := range hs {
		wg.Go(func() {
			errs[i] = h.Shutdown(ctx)
			if errs[i] != nil {
				h.Close() // closes the connections; does not wait for handlers
			}
		})
	}
	wg.Go(func() {
		done := make(chan struct{})
		go func() { g.GracefulStop(); close(done) }()
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		// Stop closes every connection and cancels the calls; GracefulStop
		// still waits for handlers that ignore their context, so wait for
		// it only briefly.
		stopped := make(chan struct{})
		go func() { g.Stop(); close(stopped) }()
		select {
		case <-done:
		case <-stopped:
		case <-time.After(stopGrace):
		}
		errs[len(hs)] = errors.New("grpc: calls still running at the deadline were cancelled")
	})
	wg.Wait()
	return errors.Join(errs...)
}

// stopGrace is how long shutdown waits for the gRPC server's Stop after the
// deadline.
const stopGrace = 100 * time.Millisecond

// closeBy runs close and reports whether it returned by deadline (or within
// stopGrace when the deadline has passed); a close that hangs is left
// behind.
func closeBy(fn func(), deadline time.Time) bool {
	done := make(chan struct{})
	go func() { fn(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(max(time.Until(deadline), stopGrace)):
		return false
	}
}

func writeReadyFile(path string, addrs map[string]string) error {
	b, _ := json.Marshal(addrs)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".sluice-ready-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// storeSet is the store serve decides through and how to close it.
type storeSet struct {
	store sluice.Store
	name  string
	ready func() bool // nil without a breaker
	close func()
	// waitBound is the longest a decision can wait on the store: the
	// memory store never waits (0), failover bounds every shared call by
	// --redis-timeout; -1 when unknown (a store wrapped for a test).
	waitBound time.Duration
}
