package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/validate"
	"github.com/sluicehq/sluice/region"
	"github.com/sluicehq/sluice/service/engine"
)

// maxWarmKeys bounds the counters --region warms per configuration.
const maxWarmKeys = 10_000

// warmConcurrency bounds the warming calls in flight at once.
const warmConcurrency = 16

// warmer makes the region store know the configuration's counters of
// fixed descriptors before their first request, so that no decision waits
// for the home store's first answer (region.Store.Warm): once at start,
// /readyz answering 503 until that pass is over, and again for each
// configuration put in force. A counter the home store does not answer
// for in time is left to its first decision, which then waits as any new
// key's does.
type warmer struct {
	st      *region.Store
	eng     *engine.Engine
	log     *slog.Logger
	timeout time.Duration // one counter's

	mu      sync.Mutex
	running bool
	again   bool // a configuration came while a pass ran
	done    bool // the first pass is over
	total   int  // counters of the pass under way
	// health is told when the first pass ends: gRPC health agrees with
	// /readyz (nil: no gRPC server yet).
	health interface{ refresh() }
	ctx    context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

func newWarmer(st *region.Store, eng *engine.Engine, timeout time.Duration, log *slog.Logger) *warmer {
	ctx, stop := context.WithCancel(context.Background())
	return &warmer{st: st, eng: eng, log: log, timeout: timeout, ctx: ctx, stop: stop}
}

// kick warms the configuration in force, in the background: after the
// pass under way when one is.
func (w *warmer) kick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		w.again = true
		return
	}
	w.running = true
	w.wg.Go(w.run)
}

func (w *warmer) run() {
	for {
		w.pass()
		w.mu.Lock()
		first := !w.done
		w.done = true
		if first && w.health != nil {
			// Outside w.mu: the health reads ready.
			h := w.health
			w.mu.Unlock()
			h.refresh()
			w.mu.Lock()
		}
		if !w.again || w.ctx.Err() != nil {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.again = false
		w.mu.Unlock()
	}
}

// pass warms the counters of the configuration in force.
func (w *warmer) pass() {
	cs := w.eng.FixedCounters(maxWarmKeys + 1)
	if len(cs) > maxWarmKeys {
		w.log.Warn("--region: the configuration has more counters of fixed values than are warmed; the others' first decisions wait for the home store", "warmed", maxWarmKeys)
		cs = cs[:maxWarmKeys]
	}
	w.mu.Lock()
	w.total = len(cs)
	w.mu.Unlock()
	start := time.Now()
	var (
		mu     sync.Mutex
		failed int
		first  error
		wg     sync.WaitGroup
	)
	// The pass stops at the first failure of the home store: the link is
	// down, and the remaining counters' decisions follow the failure mode
	// (or wait for their first answer once it is back) without it.
	pctx, stopPass := context.WithCancel(w.ctx)
	defer stopPass()
	sem := make(chan struct{}, warmConcurrency)
	tried := 0
	for _, c := range cs {
		select {
		case sem <- struct{}{}:
		case <-pctx.Done():
		}
		if pctx.Err() != nil {
			break
		}
		tried++
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(pctx, w.timeout)
			err := w.st.Warm(ctx, c.Key, c.Limit)
			cancel()
			if err != nil {
				if !validate.IsInput(err) {
					stopPass()
				}
				mu.Lock()
				failed++
				if first == nil {
					first = fmt.Errorf("%q: %w", c.Key, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if w.ctx.Err() != nil {
		return // closing
	}
	if failed > 0 || tried < len(cs) {
		w.log.Warn("--region: not every counter of the configuration was warmed; the others' first decisions wait for the home store", "warmed", tried-failed, "of", len(cs), "first", first)
	} else if len(cs) > 0 {
		w.log.Info("--region: the configuration's counters of fixed values are warmed", "counters", len(cs), "took", time.Since(start).Round(time.Millisecond))
	}
}

// ready is /readyz's condition: the first pass is over.
func (w *warmer) ready() (bool, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return true, ""
	}
	return false, fmt.Sprintf("warming the configuration's %d counters of fixed values at the home store (--region)", w.total)
}

// attach makes h follow the first pass: it is refreshed when the pass
// ends (and now, when it has).
func (w *warmer) attach(h interface{ refresh() }) {
	w.mu.Lock()
	w.health = h
	w.mu.Unlock()
	h.refresh()
}

// close stops the warming and waits for it.
func (w *warmer) close() {
	w.stop()
	w.wg.Wait()
}
