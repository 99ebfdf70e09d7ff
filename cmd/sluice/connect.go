package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/service/config"
)

// errNotConnected is the failure of a decision made before Redis was ever
// reached; failover decides it by the failure mode.
var errNotConnected = errors.New("redis: not connected yet")

// Redis connection attempts at start and in the background.
const (
	connectTimeout    = 5 * time.Second
	connectRetryFirst = 100 * time.Millisecond
	connectRetryMax   = 2 * time.Second
	connectWarnEvery  = 30 * time.Second
)

// unreachable reports whether err, a failure of redisstore.Open, says that
// Redis could not be reached (refused, unresolvable, timed out), as opposed
// to a mistake of configuration (the URL, the credentials, TLS
// verification), which a retry would not mend.
func unreachable(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// pendingStore is the Redis store of a serve started while Redis was
// unreachable: it fails every call with errNotConnected (so that failover,
// started with its breaker open, decides by the failure mode; a Lease fails
// too, so that tiered decides with AllowN) until a background Open
// succeeds, and then passes every call to that store.
type pendingStore struct {
	url  string
	opts []redisstore.Option
	log  *slog.Logger

	rs     atomic.Pointer[redisstore.Store]
	mu     sync.Mutex
	closed bool
	stop   chan struct{}
}

var (
	_ sluice.Store      = (*pendingStore)(nil)
	_ sluice.MultiStore = (*pendingStore)(nil)
	_ sluice.Leaser     = (*pendingStore)(nil)
)

func newPendingStore(url string, opts []redisstore.Option, log *slog.Logger) *pendingStore {
	p := &pendingStore{url: url, opts: opts, log: log, stop: make(chan struct{})}
	go p.connect()
	return p
}

// connect retries Open, with a growing pause, until it succeeds or the
// store is closed.
func (p *pendingStore) connect() {
	wait := connectRetryFirst
	var warned time.Time
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
		rs, err := redisstore.Open(ctx, p.url, p.opts...)
		cancel()
		if err == nil {
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				rs.Close()
				return
			}
			p.rs.Store(rs)
			p.mu.Unlock()
			p.log.Info("redis connected", "attempts", attempt)
			return
		}
		if time.Since(warned) >= connectWarnEvery {
			p.log.Warn("redis still unreachable; deciding by the failure policy", "attempt", attempt, "err", err)
			warned = time.Now()
		} else {
			p.log.Debug("redis still unreachable", "attempt", attempt, "err", err)
		}
		select {
		case <-p.stop:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, connectRetryMax)
	}
}

func (p *pendingStore) store() (*redisstore.Store, error) {
	if rs := p.rs.Load(); rs != nil {
		return rs, nil
	}
	return nil, errNotConnected
}

func (p *pendingStore) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	rs, err := p.store()
	if err != nil {
		return sluice.Decision{}, err
	}
	return rs.AllowN(ctx, key, lim, n)
}

func (p *pendingStore) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	rs, err := p.store()
	if err != nil {
		return nil, err
	}
	return rs.AllowMulti(ctx, reqs)
}

func (p *pendingStore) Lease(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	rs, err := p.store()
	if err != nil {
		return sluice.Decision{}, time.Time{}, err
	}
	return rs.Lease(ctx, key, lim, n)
}

func (p *pendingStore) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	rs, err := p.store()
	if err != nil {
		return err
	}
	return rs.Return(ctx, key, lim, n, at)
}

// Close stops the connection attempts and closes the store once connected.
func (p *pendingStore) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	rs := p.rs.Load()
	p.mu.Unlock()
	close(p.stop)
	if rs != nil {
		return rs.Close()
	}
	return nil
}

func (p *pendingStore) String() string {
	if rs := p.rs.Load(); rs != nil {
		return rs.String()
	}
	return "redis (not connected yet)"
}

// checkFailureModes rejects a configuration that would fail open with no
// local share: with --redis and no --replicas, a rule's failure_mode: open
// would deny everything during an outage instead.
func checkFailureModes(c *config.Config, f *serveFlags) error {
	if f.redis.url == "" || f.redis.failover.replicas > 0 {
		return nil
	}
	for _, r := range c.Rules() {
		if r.Limit.FailureMode == sluice.FailOpen {
			return fmt.Errorf("rule %s: failure_mode: open needs --replicas N (the number of sluice replicas) with --redis: each admits rate/N while Redis is down", r.Name)
		}
	}
	return nil
}

// Acquire implements sluice.Semaphore once connected, so that permits
// work when Redis comes up after sluice serve started.
func (p *pendingStore) Acquire(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	rs, err := p.store()
	if err != nil {
		return sluice.PermitDecision{}, err
	}
	return rs.Acquire(ctx, key, lim, holder)
}

// Release implements sluice.Semaphore once connected.
func (p *pendingStore) Release(ctx context.Context, key string, holder string) error {
	rs, err := p.store()
	if err != nil {
		return err
	}
	return rs.Release(ctx, key, holder)
}

// Extend implements sluice.Semaphore once connected.
func (p *pendingStore) Extend(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	rs, err := p.store()
	if err != nil {
		return sluice.PermitDecision{}, err
	}
	return rs.Extend(ctx, key, lim, holder)
}
