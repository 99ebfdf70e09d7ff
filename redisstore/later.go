package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// ErrNotConnected is the error of every call of a Later before it has
// reached Redis. It is not a caller's mistake: failover counts it as the
// shared store's failure and decides by the limit's failure mode.
var ErrNotConnected = errors.New("redisstore: not connected to Redis yet")

// The background connection of a Later.
const (
	// LaterDialTimeout bounds each attempt (dial and ping).
	LaterDialTimeout = 5 * time.Second
	// LaterRetryFirst and LaterRetryMax are the pause after the first
	// failed attempt, and the longest pause: each doubles the last.
	LaterRetryFirst = 100 * time.Millisecond
	LaterRetryMax   = 2 * time.Second
	// laterWarnEvery is how often a Later logs, as a warning, that Redis
	// is still unreachable.
	laterWarnEvery = 30 * time.Second
)

// Later is a Store that connects to Redis in the background, for a
// process that must serve while Redis is down at its start: until an
// attempt to Open succeeds, every call fails with an error wrapping
// ErrNotConnected (so that failover, in front of it, decides by each
// limit's failure mode, and tiered decides without leases); from then on
// every call passes to the Store that Open returned: rate limits,
// AllowMulti, Reserve and Return, Reset and the concurrency limits alike.
// It is a sluice.FullStore and a sluice.Granter, safe for concurrent use.
//
// A call made before the connection fails at once, whatever its context:
// no call waits for Redis to come up.
type Later struct {
	url  string
	opts []Option
	o    rueidis.ClientOption
	log  *slog.Logger

	rs        atomic.Pointer[Store]
	connected chan struct{} // closed once rs is set

	mu     sync.Mutex // guards closed
	closed bool
	stop   chan struct{}
	done   chan struct{}
}

var (
	_ sluice.FullStore = (*Later)(nil)
	_ sluice.Granter   = (*Later)(nil)
)

// OpenLater returns a Later for rawURL (one of Open's forms, with Open's
// options) and starts connecting in the background: an attempt at once,
// then again after LaterRetryFirst, doubling the pause up to LaterRetryMax,
// each attempt bounded by LaterDialTimeout, until one succeeds or Close.
// The URL and the options are checked first (and the URL's TLS files
// read): a mistake there is an error, never retried. WithLogger sets where
// the attempts are logged.
//
// The usual start, serving by the failure policy while Redis is down:
//
//	rs, err := redisstore.Open(ctx, url)
//	var shared sluice.Store = rs
//	var fopts []failover.Option
//	if redisstore.Unreachable(err) {
//		later, lerr := redisstore.OpenLater(url)
//		if lerr != nil {
//			return lerr
//		}
//		shared = later // Close it when done: it closes the Store it opened
//		fopts = append(fopts, failover.WithStartOpen(err))
//	} else if err != nil {
//		return err
//	}
//	st, err := stack.New(shared, stack.WithFailover(fopts...))
func OpenLater(rawURL string, opts ...Option) (*Later, error) {
	o, err := clientOptions(rawURL, opts)
	if err != nil {
		return nil, err
	}
	var so Store
	for _, opt := range opts {
		opt(&so)
	}
	l := &Later{
		url:       rawURL,
		opts:      opts,
		o:         o,
		log:       so.open.log,
		connected: make(chan struct{}),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	go l.connect()
	return l, nil
}

// connect tries Open until it succeeds or the store is closed.
func (l *Later) connect() {
	defer close(l.done)
	wait := LaterRetryFirst
	var warned time.Time
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), LaterDialTimeout)
		go func() { // an attempt ends early when the store is closed
			select {
			case <-l.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		rs, err := dial(ctx, l.url, l.o, l.opts)
		cancel()
		if err == nil {
			l.mu.Lock()
			if l.closed {
				l.mu.Unlock()
				rs.Close()
				return
			}
			l.rs.Store(rs)
			close(l.connected)
			l.mu.Unlock()
			l.log.Info("redis connected", "attempts", attempt)
			return
		}
		if time.Since(warned) >= laterWarnEvery {
			l.log.Warn("redis still unreachable; deciding by the failure policy", "attempt", attempt, "err", err)
			warned = time.Now()
		} else {
			l.log.Debug("redis still unreachable", "attempt", attempt, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-l.stop:
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, LaterRetryMax)
	}
}

// Connected returns a channel closed once the store has reached Redis
// (never, when it is closed first).
func (l *Later) Connected() <-chan struct{} { return l.connected }

// Store returns the connected Store, or nil before the connection.
func (l *Later) Store() *Store { return l.rs.Load() }

// store is the connected Store, or ErrNotConnected (sluice.ErrClosed once
// closed).
func (l *Later) store() (*Store, error) {
	if rs := l.rs.Load(); rs != nil {
		return rs, nil
	}
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, sluice.ErrClosed
	}
	return nil, fmt.Errorf("%w (%s)", ErrNotConnected, redact(l.url))
}

// AllowN implements sluice.Store.
func (l *Later) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	rs, err := l.store()
	if err != nil {
		return sluice.Decision{}, err
	}
	return rs.AllowN(ctx, key, lim, n)
}

// Grant implements sluice.Granter: package region over a Redis that was
// down at the start decides by its failure policy until it connects.
func (l *Later) Grant(ctx context.Context, key string, lim sluice.Limit, r sluice.GrantRequest) (sluice.Grant, error) {
	rs, err := l.store()
	if err != nil {
		return sluice.Grant{}, err
	}
	return rs.Grant(ctx, key, lim, r)
}

// AllowMulti implements sluice.MultiStore.
func (l *Later) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	rs, err := l.store()
	if err != nil {
		return nil, err
	}
	return rs.AllowMulti(ctx, reqs)
}

// Reserve implements sluice.Reserver.
func (l *Later) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	rs, err := l.store()
	if err != nil {
		return sluice.Decision{}, time.Time{}, err
	}
	return rs.Reserve(ctx, key, lim, n)
}

// Return implements sluice.Reserver.
func (l *Later) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	rs, err := l.store()
	if err != nil {
		return err
	}
	return rs.Return(ctx, key, lim, n, at)
}

// Reset implements sluice.Resetter.
func (l *Later) Reset(ctx context.Context, key string, lim sluice.Limit) error {
	rs, err := l.store()
	if err != nil {
		return err
	}
	return rs.Reset(ctx, key, lim)
}

// Acquire implements sluice.Semaphore.
func (l *Later) Acquire(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	rs, err := l.store()
	if err != nil {
		return sluice.PermitDecision{}, err
	}
	return rs.Acquire(ctx, key, lim, holder)
}

// Release implements sluice.Semaphore.
func (l *Later) Release(ctx context.Context, key, holder string) error {
	rs, err := l.store()
	if err != nil {
		return err
	}
	return rs.Release(ctx, key, holder)
}

// Extend implements sluice.Semaphore.
func (l *Later) Extend(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	rs, err := l.store()
	if err != nil {
		return sluice.PermitDecision{}, err
	}
	return rs.Extend(ctx, key, lim, holder)
}

// Freed implements sluice.PermitWaker: nil, as Store's.
func (l *Later) Freed(string) <-chan struct{} { return nil }

// Close stops the connection attempts, waits for the one in flight, and
// closes the Store once connected. Later calls return sluice.ErrClosed.
func (l *Later) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	<-l.done
	if rs := l.rs.Load(); rs != nil {
		return rs.Close()
	}
	return nil
}

// String describes the store for logs.
func (l *Later) String() string {
	if rs := l.rs.Load(); rs != nil {
		return rs.String()
	}
	return "redisstore(not connected yet: " + redact(l.url) + ")"
}
