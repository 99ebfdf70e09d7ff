package failover

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// breaker is the circuit breaker of a Store: it counts the shared calls'
// outcomes, opens after threshold consecutive failures or when the failures
// within one window reach ratio of at least minCalls calls, and while open
// probes the shared store every interval, closing at its first answer.
type breaker struct {
	threshold int64
	ratio     float64 // 0: no error-rate rule
	window    time.Duration
	minCalls  int64
	interval  time.Duration
	timeout   func() time.Duration // of each probe

	since func() time.Duration // monotonic time since the breaker's start
	probe func(ctx context.Context) error
	// measure, when not nil, runs (in the background, one at a time) once
	// a second while the breaker has been open for a second and its probes
	// fail: a probe under a longer deadline, to tell a slow store from a
	// dead one.
	measure   func(ctx context.Context)
	measuring atomic.Bool
	onOpen    func(cause error)
	onClose   func(downtime time.Duration)

	isOpen   atomic.Bool  // read by every call
	openedAt atomic.Int64 // ns since the start
	// Written by every shared call: off isOpen's cache line.
	_        [64]byte
	consec   atomic.Int64
	winStart atomic.Int64 // ns since the start
	winCalls atomic.Int64
	winFails atomic.Int64
	opens    atomic.Int64
	closes   atomic.Int64

	mu      sync.Mutex // guards stopped and the start of probers
	stopped bool
	base    context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// start readies b; its fields are set.
func (b *breaker) start() {
	if b.since == nil {
		epoch := time.Now()
		b.since = func() time.Duration { return time.Since(epoch) }
	}
	b.base, b.cancel = context.WithCancel(context.Background())
}

// open reports whether the breaker is open.
func (b *breaker) open() bool { return b.isOpen.Load() }

// success counts a call that the shared store answered.
func (b *breaker) success() {
	if b.consec.Load() != 0 {
		b.consec.Store(0)
	}
	b.countWindow(false)
}

// failure counts a failed call, opening the breaker when it reaches a rule.
func (b *breaker) failure(cause error) {
	c := b.consec.Add(1)
	if b.countWindow(true) || c >= b.threshold {
		b.trip(cause)
	}
}

// countWindow counts one call in the error-rate window and reports whether
// the failures reached the ratio.
func (b *breaker) countWindow(failed bool) bool {
	if b.ratio <= 0 {
		return false
	}
	now := int64(b.since())
	if st := b.winStart.Load(); now-st >= int64(b.window) && b.winStart.CompareAndSwap(st, now) {
		b.winCalls.Store(0)
		b.winFails.Store(0)
	}
	c := b.winCalls.Add(1)
	if !failed {
		return false
	}
	f := b.winFails.Add(1)
	return c >= b.minCalls && float64(f) >= b.ratio*float64(c)
}

// trip opens the breaker (unless it is open or stopped) and starts the
// prober.
func (b *breaker) trip(cause error) {
	b.mu.Lock()
	if b.stopped || b.isOpen.Load() {
		b.mu.Unlock()
		return
	}
	b.openedAt.Store(int64(b.since()))
	b.isOpen.Store(true)
	b.opens.Add(1)
	b.wg.Add(1)
	go b.probeLoop()
	b.mu.Unlock()
	b.onOpen(cause)
}

// probeLoop runs while the breaker is open: every interval it probes the
// shared store, and closes the breaker at the first answer.
func (b *breaker) probeLoop() {
	defer b.wg.Done()
	t := time.NewTicker(b.interval)
	defer t.Stop()
	var lastMeasure time.Duration
	for {
		select {
		case <-b.base.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(b.base, b.timeout())
		err := b.probe(ctx)
		cancel()
		if err == nil {
			b.reset()
			return
		}
		now := b.since()
		if b.measure != nil && now-time.Duration(b.openedAt.Load()) >= time.Second && now-lastMeasure >= time.Second && b.measuring.CompareAndSwap(false, true) {
			lastMeasure = now
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				defer b.measuring.Store(false)
				b.measure(b.base)
			}()
		}
	}
}

// reset closes the breaker with fresh counts.
func (b *breaker) reset() {
	now := b.since()
	down := now - time.Duration(b.openedAt.Load())
	b.consec.Store(0)
	b.winCalls.Store(0)
	b.winFails.Store(0)
	b.winStart.Store(int64(now))
	b.isOpen.Store(false)
	b.closes.Add(1)
	b.onClose(down)
}

// stop ends the prober and waits for it; the breaker opens no more.
func (b *breaker) stop() {
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
}
