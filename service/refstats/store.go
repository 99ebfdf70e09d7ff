package refstats

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A Sink receives the statistics: at each flush, the increment of every
// counter that changed since the last flush and the value of every gauge,
// then Flush; a timing as soon as it is recorded. Its methods are called
// from several goroutines and must not wait on the network.
type Sink interface {
	Counter(name string, v uint64)
	Gauge(name string, v uint64)
	// Timer is a timing in milliseconds.
	Timer(name string, ms float64)
	Flush()
}

// Store holds counters, gauges and timers by name, as lyft/gostats's
// store (the reference's statistics library) does: a flush sends the
// counters that changed, by their increment since the last flush (a
// counter still at its last value is not sent), and every gauge; a timer
// sends each timing at once. Names are full names: the tags are already
// serialized in them (Tags.Name). Statistics are never removed: their
// number is bounded by what creates them (Stats bounds the names that
// hold request values).
type Store struct {
	sink Sink

	mu       sync.Mutex
	counters map[string]*Counter
	gauges   map[string]*Gauge
	timers   map[string]*Timer
	clist    []*Counter // in creation order, for flushes
	glist    []*Gauge
	gens     []func() // run before each flush (runtime statistics)

	flushMu sync.Mutex // one flush at a time
}

// NewStore returns an empty Store that flushes to sink.
func NewStore(sink Sink) *Store {
	return &Store{sink: sink, counters: map[string]*Counter{}, gauges: map[string]*Gauge{}, timers: map[string]*Timer{}}
}

// Counter is a statistic that only grows; a flush sends its increment.
type Counter struct {
	name string
	v    atomic.Uint64
	sent uint64 // the value at the last flush; the flushing goroutine's
}

// Add adds n.
func (c *Counter) Add(n uint64) { c.v.Add(n) }

// Inc adds 1.
func (c *Counter) Inc() { c.v.Add(1) }

// Set sets the value (a counter taken from elsewhere, such as the Go
// runtime's).
func (c *Counter) Set(v uint64) { c.v.Store(v) }

// Value is the current value.
func (c *Counter) Value() uint64 { return c.v.Load() }

// Gauge is a statistic with a value; every flush sends it.
type Gauge struct {
	name string
	v    atomic.Uint64
}

// Set sets the value.
func (g *Gauge) Set(v uint64) { g.v.Store(v) }

// Add adds n.
func (g *Gauge) Add(n uint64) { g.v.Add(n) }

// Sub subtracts n.
func (g *Gauge) Sub(n uint64) { g.v.Add(^(n - 1)) }

// Value is the current value.
func (g *Gauge) Value() uint64 { return g.v.Load() }

// Timer sends each timing to the sink as it is recorded.
type Timer struct {
	name string
	sink Sink
}

// Record sends a timing in milliseconds.
func (t *Timer) Record(ms float64) { t.sink.Timer(t.name, ms) }

// Counter returns the counter called name, made on first use.
func (s *Store) Counter(name string) *Counter {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counters[name]
	if c == nil {
		c = &Counter{name: name}
		s.counters[name] = c
		s.clist = append(s.clist, c)
	}
	return c
}

// Gauge returns the gauge called name, made on first use.
func (s *Store) Gauge(name string) *Gauge {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.gauges[name]
	if g == nil {
		g = &Gauge{name: name}
		s.gauges[name] = g
		s.glist = append(s.glist, g)
	}
	return g
}

// Timer returns the timer called name, made on first use.
func (s *Store) Timer(name string) *Timer {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.timers[name]
	if t == nil {
		t = &Timer{name: name, sink: s.sink}
		s.timers[name] = t
	}
	return t
}

// generate adds f, run before each flush to set statistics.
func (s *Store) generate(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gens = append(s.gens, f)
}

// Flush sends the counters that changed since the last flush, by their
// increment, then every gauge, then flushes the sink.
func (s *Store) Flush() {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	gens, cs, gs := s.gens, s.clist, s.glist
	s.mu.Unlock()
	for _, f := range gens {
		f()
	}
	for _, c := range cs {
		v := c.v.Load()
		if d := v - c.sent; d != 0 {
			c.sent = v
			s.sink.Counter(c.name, d)
		}
	}
	for _, g := range gs {
		s.sink.Gauge(g.name, g.v.Load())
	}
	s.sink.Flush()
}

// Run flushes every interval until ctx ends, then flushes once more, so
// that what was counted before a shutdown is sent.
func (s *Store) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.Flush()
			return
		case <-t.C:
			s.Flush()
		}
	}
}

// Sinks sends to each of its sinks in turn.
type Sinks []Sink

// Counter implements Sink.
func (s Sinks) Counter(name string, v uint64) {
	for _, x := range s {
		x.Counter(name, v)
	}
}

// Gauge implements Sink.
func (s Sinks) Gauge(name string, v uint64) {
	for _, x := range s {
		x.Gauge(name, v)
	}
}

// Timer implements Sink.
func (s Sinks) Timer(name string, ms float64) {
	for _, x := range s {
		x.Timer(name, ms)
	}
}

// Flush implements Sink.
func (s Sinks) Flush() {
	for _, x := range s {
		x.Flush()
	}
}
