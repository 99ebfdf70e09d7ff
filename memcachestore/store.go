package memcachestore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/validate"
)

var _ sluice.FullStore = (*Store)(nil)

// Errors that callers match with errors.Is.
var (
	// ErrAlgorithmUnsupported is wrapped by the *sluice.LimitError (on
	// "Algorithm") of a limit whose algorithm the store cannot decide
	// atomically: sliding_log. It wraps sluice.ErrInvalidLimit, so that
	// a failover store reports it as the caller's mistake and never
	// decides it by a failure mode.
	ErrAlgorithmUnsupported = fmt.Errorf("%w: algorithm not decided by memcachestore", sluice.ErrInvalidLimit)
	// ErrContended reports a decision that lost every one of its
	// Options.MaxCASAttempts compare-and-swap attempts to other writers of
	// the same state: no decision was made and nothing was counted.
	ErrContended = errors.New("memcachestore: state changed by other writers at every attempt")
	// ErrNoCAS reports a server that runs without CAS (memcached -C): the
	// store cannot decide atomically there, and nothing was counted.
	ErrNoCAS = errors.New("memcachestore: server runs without CAS (memcached -C)")
)

// Supports reports whether the store decides algorithm a: fixed_window,
// sliding_window, token_bucket and gcra (see the package documentation
// for why not sliding_log).
func Supports(a sluice.Algorithm) bool {
	switch a {
	case sluice.FixedWindow, sluice.SlidingWindow, sluice.TokenBucket, sluice.GCRA:
		return true
	}
	return false
}

// nStripes is the number of in-process locks that order this process's
// compare-and-swap decisions on one item (by the CRC-32 of its name), so
// that its own goroutines never make each other retry.
const nStripes = 1024

// Store is a sluice.Store on memcached. It is safe for concurrent use.
type Store struct {
	sluice.Unsupported // no AllowMulti, no concurrency limits

	opts Options
	tls  *tls.Config // nil: plain TCP
	ring atomic.Pointer[ring]

	stripes [nStripes]chan struct{}
	closed  atomic.Bool
	once    sync.Once
	mu      sync.Mutex    // orders SRV swaps and Close
	stop    chan struct{} // closed by Close: the SRV refresher returns
	wg      sync.WaitGroup

	// testSlack lengthens every item's life by an hour (and keeps every
	// expiry relative): a test clock stands still or runs far from the
	// servers' clocks while items expire in real time (export_test.go).
	testSlack bool
}

// New returns a Store for the servers of o, resolving o.SRV (within ctx)
// when it is set, without connecting: the first call to each server
// dials it. Open also checks that every server answers. Close releases
// the connections and stops the SRV refresher.
func New(ctx context.Context, o Options) (*Store, error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	s := &Store{opts: o, stop: make(chan struct{})}
	if o.TLS != nil {
		c, err := o.TLS.config()
		if err != nil {
			return nil, fmt.Errorf("memcachestore: %w", err)
		}
		s.tls = c
	}
	for i := range s.stripes {
		s.stripes[i] = make(chan struct{}, 1)
	}
	addrs := o.Servers
	if o.SRV != "" {
		var err error
		if addrs, err = lookupSRV(ctx, o.Resolver, o.SRV); err != nil {
			return nil, err
		}
	}
	s.ring.Store(s.newRing(addrs, nil))
	if o.SRVRefresh > 0 {
		s.wg.Go(s.refresh)
	}
	return s, nil
}

// Open is New, then Ping: it returns an error, and no Store, when a
// server does not answer within ctx (and Options.Timeout).
func Open(ctx context.Context, o Options) (*Store, error) {
	s, err := New(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := s.Ping(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// newRing returns the ring of addrs, keeping the servers of old (and
// their connections) whose address is still there.
func (s *Store) newRing(addrs []string, old *ring) *ring {
	keep := map[string]*server{}
	if old != nil {
		for _, sv := range old.servers {
			keep[sv.addr] = sv
		}
	}
	r := &ring{servers: make([]*server, len(addrs))}
	for i, a := range addrs {
		if sv, ok := keep[a]; ok {
			r.servers[i] = sv
			continue
		}
		r.servers[i] = newServer(a, &s.opts, s.serverTLS(a))
	}
	return r
}

// serverTLS is the TLS configuration for the server at addr: its host is
// the name to verify unless one was given.
func (s *Store) serverTLS(addr string) *tls.Config {
	if s.tls == nil || s.tls.ServerName != "" {
		return s.tls
	}
	c := s.tls.Clone()
	host, _, _ := net.SplitHostPort(addr)
	c.ServerName = strings.TrimSuffix(host, ".")
	return c
}

// Close makes later calls return sluice.ErrClosed, stops the SRV
// refresher and waits for it, and closes the idle connections (those in
// use close when their call ends).
func (s *Store) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed.Store(true)
		s.mu.Unlock()
		close(s.stop)
		s.wg.Wait()
		for _, sv := range s.ring.Load().servers {
			sv.close()
		}
	})
	return nil
}

// String describes the store for logs: its servers.
func (s *Store) String() string {
	var addrs []string
	for _, sv := range s.ring.Load().servers {
		addrs = append(addrs, sv.addr)
	}
	return "memcache(" + strings.Join(addrs, ",") + ")"
}

// Ping checks that every server answers (a version command each), within
// ctx and Options.Timeout. failover's breaker probes with it.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	deadline := s.deadline(ctx)
	for _, sv := range s.ring.Load().servers {
		err := s.with(ctx, sv, deadline, func(c *conn) error { return c.version() })
		if err != nil {
			return err
		}
	}
	return nil
}

// AllowN implements sluice.Store.
func (s *Store) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	d, _, err := s.decide(ctx, key, lim, n)
	return d, err
}

// Reserve implements sluice.Reserver: it admits n like AllowN and also
// returns the time of the decision (this process's clock), which Return
// needs.
func (s *Store) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	d, at, err := s.decide(ctx, key, lim, n)
	if err != nil {
		return d, time.Time{}, err
	}
	return d, time.UnixMicro(at), nil
}

// check validates a call: the store open, the context alive, the
// request valid (validate.Request), the algorithm decided here.
func (s *Store) check(ctx context.Context, key string, lim sluice.Limit, n int) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validate.Request(key, lim, n); err != nil {
		return err
	}
	return supported(lim)
}

func supported(lim sluice.Limit) error {
	if Supports(lim.Algorithm) {
		return nil
	}
	return &sluice.LimitError{Field: "Algorithm", Err: ErrAlgorithmUnsupported,
		Reason: fmt.Sprintf("memcachestore decides fixed_window, sliding_window, token_bucket and gcra, not %v: "+
			"a sliding log keeps one entry per admitted event, which memcached could only hold as one value "+
			"rewritten whole by every decision; use sliding_window", lim.Algorithm)}
}

func params(lim sluice.Limit) algo.Params {
	p := algo.NewParams(algo.Kind(lim.Algorithm), int64(lim.Rate), int64(lim.Burst), lim.Period.Microseconds())
	p.Charge = lim.Counting == sluice.CountAll
	return p
}

func decision(lim sluice.Limit, r algo.Result) sluice.Decision {
	return sluice.Decision{
		Allowed:    r.Allowed,
		Limit:      lim,
		Remaining:  int(r.Remaining),
		RetryAfter: time.Duration(r.RetryAfter) * time.Microsecond,
		ResetAfter: time.Duration(r.ResetAfter) * time.Microsecond,
	}
}

func (s *Store) nowMicro() int64 { return s.opts.Clock().UnixMicro() }

// deadline is the end of a call: ctx's deadline or Timeout from now,
// whichever is sooner.
func (s *Store) deadline(ctx context.Context) time.Time {
	d := time.Now().Add(s.opts.Timeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		return cd
	}
	return d
}

// stripe returns the in-process lock of an item.
func (s *Store) stripe(name []byte) chan struct{} {
	return s.stripes[crc32.ChecksumIEEE(name)%nStripes]
}

// timers are the stopped timers of waits, reused.
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// acquire takes ch's one slot, waiting as long as ctx and deadline allow.
func acquire(ctx context.Context, ch chan struct{}, deadline time.Time) error {
	select {
	case ch <- struct{}{}:
		return nil
	default:
	}
	t := timers.Get().(*time.Timer)
	t.Reset(time.Until(deadline))
	defer func() {
		t.Stop() // since Go 1.23 a stopped timer delivers nothing stale
		timers.Put(t)
	}()
	select {
	case ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("memcachestore: waiting for a connection or for this process's other calls on the same state: %w", context.DeadlineExceeded)
	}
}
