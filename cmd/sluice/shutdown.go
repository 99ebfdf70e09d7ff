package main

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"sync"
	"time"
)

// shutdownFlags say how serve drains on SIGTERM.
type shutdownFlags struct {
	drainDelay time.Duration
	timeout    time.Duration
}

func (g *shutdownFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&g.drainDelay, "drain-delay", 0, "on SIGTERM, how long to keep serving with readiness false before draining (for load balancers to notice)")
	fs.DurationVar(&g.timeout, "shutdown-timeout", 15*time.Second, "longest wait for in-flight requests when draining")
}

func (g *shutdownFlags) validate() error {
	if g.drainDelay < 0 || g.timeout <= 0 {
		return errDurations
	}
	return nil
}

// grpcServer is a gRPC server: grpc-go's, or grpcfast's in front of it.
type grpcServer interface {
	GracefulStop()
	Stop()
}

// shutdown drains the HTTP servers and the gRPC servers at once until
// deadline; past it, the remaining connections are closed, and shutdown
// returns even if handlers are still stuck (the process exits anyway).
func shutdown(hs []*http.Server, deadline time.Time, gs ...grpcServer) error {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(hs)+len(gs))
	for i, h := range hs {
		wg.Go(func() {
			errs[i] = h.Shutdown(ctx)
			if errs[i] != nil {
				h.Close() // closes the connections; does not wait for handlers
			}
		})
	}
	for i, g := range gs {
		wg.Go(func() { errs[len(hs)+i] = stopGRPC(ctx, g) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// stopGRPC stops g gracefully until ctx ends, then closes every connection
// and cancels the calls.
func stopGRPC(ctx context.Context, g grpcServer) error {
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	// Stop closes every connection and cancels the calls; GracefulStop
	// still waits for handlers that ignore their context, so wait for it
	// only briefly.
	stopped := make(chan struct{})
	go func() { g.Stop(); close(stopped) }()
	select {
	case <-done:
	case <-stopped:
	case <-time.After(stopGrace):
	}
	return errors.New("grpc: calls still running at the deadline were cancelled")
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
