// Package gctune keeps the garbage collector from running too often while
// the live heap is small.
//
// At the default GOGC=100 the collector runs each time the heap doubles, so
// a service with a live heap of a few megabytes collects dozens of times a
// second under load. A heap floor raises GOGC while the live heap is small,
// so that the next collection starts at about the floor, and lowers it back
// once the live heap has grown, so that a large heap (a memory store holding
// millions of keys) keeps the user's GOGC and its memory overhead.
package gctune

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// maxPercent bounds the GOGC a floor sets, for a live heap near zero: the
// target stays about floor below it. (1000, the first bound, kept a 4 MiB
// live heap's target at 44 MiB, under a 64 MiB floor, and with it one
// collection in three that the floor was meant to save: bench/loadgen
// measured 5-8% more throughput and a lower p99 without that cap.)
const maxPercent = 10000

// Metrics read after each cycle, in this order.
var sampleNames = [...]string{
	"/gc/heap/live:bytes",
	"/gc/scan/stack:bytes",
	"/gc/scan/globals:bytes",
}

// SetHeapFloor keeps the collector from running before the heap reaches
// about floor bytes: while the live heap is small, it raises GOGC so that the
// next collection's target is about floor (GOGC at most 10000, a target of
// about 100 times the live heap, unless the base is higher);
// once the live heap is large, GOGC returns to its base value, the one in
// force when SetHeapFloor is called (the GOGC environment variable's, or
// 100). It returns a stop function that restores the base; stop is
// idempotent and safe to call from any goroutine.
//
// SetHeapFloor starts no goroutine: it adjusts GOGC from a cleanup that the
// runtime runs once per collection. With GOGC=off (a negative base) or a
// zero floor it does nothing. A memory limit (GOMEMLIMIT or
// debug.SetMemoryLimit) still wins: the collector runs when either the GOGC
// target or the limit is reached, whichever comes first.
//
// The GC percent belongs to the whole process: call SetHeapFloor once
// (from main), and do not call debug.SetGCPercent while a floor is active.
func SetHeapFloor(floor uint64) (stop func()) {
	t := start(floor)
	if t == nil {
		return func() {}
	}
	return t.stop
}

// tuner is the state of one SetHeapFloor.
type tuner struct {
	floor uint64
	base  int

	mu      sync.Mutex
	stopped bool
	percent int             // the GOGC last set
	pending runtime.Cleanup // the cleanup of the sentinel in flight
	arms    int             // cleanups armed, for the tests
	samples []metrics.Sample
}

// sentinel is allocated once per cycle and dropped at once, so that the
// next collection finds it unreachable and runs its cleanup. It has a
// pointer so that the tiny allocator does not batch it with other objects.
type sentinel struct {
	_ *byte
	_ [8]byte
}

// start returns the running tuner, or nil when there is nothing to do.
func start(floor uint64) *tuner {
	base := currentPercent()
	if floor == 0 || base < 0 {
		return nil
	}
	t := &tuner{floor: floor, base: base, percent: base, samples: make([]metrics.Sample, len(sampleNames))}
	for i, name := range sampleNames {
		t.samples[i].Name = name
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.adjust()
	t.arm()
	return t
}

// currentPercent is the GC percent in force, -1 when GOGC=off.
func currentPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100
	}
	v := s[0].Value.Uint64()
	if v > math.MaxInt32 { // off is -1, read as an unsigned value
		return -1
	}
	return int(v)
}

// arm allocates a sentinel whose cleanup calls onCycle after the next
// collection. The sentinel is unreachable as soon as arm returns. The caller
// holds t.mu.
func (t *tuner) arm() {
	s := new(sentinel)
	t.pending = runtime.AddCleanup(s, (*tuner).onCycle, t)
	t.arms++
}

// onCycle runs on the runtime's cleanup goroutine after a collection.
func (t *tuner) onCycle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.adjust()
	t.arm()
}

// adjust sets GOGC from the last cycle's live heap. The caller holds t.mu.
func (t *tuner) adjust() {
	metrics.Read(t.samples)
	var v [len(sampleNames)]uint64
	for i, s := range t.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	p := percent(t.floor, v[0], v[0]+v[1]+v[2], t.base)
	if p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
}

// percent is the GOGC whose next heap target, live + scan*GOGC/100 (scan:
// the live heap plus the stacks and globals the collector scans), is about
// floor, at least base and at most maxPercent unless base is higher.
func percent(floor, live, scan uint64, base int) int {
	if live >= floor || scan == 0 {
		return base
	}
	p := uint64(maxPercent)
	if d := floor - live; d <= math.MaxUint64/100 {
		p = min(p, d*100/scan)
	}
	return max(base, int(p))
}

// stop restores the base percent; the cleanup in flight, if any, finds the
// tuner stopped and does not arm another.
func (t *tuner) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	t.pending.Stop() // best effort: a no-op once the sentinel is collected
	if t.percent != t.base {
		debug.SetGCPercent(t.base)
		t.percent = t.base
	}
}
