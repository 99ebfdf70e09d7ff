package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// DefaultReleaseTimeout bounds a permit's release when no other bound is
// set: the release runs on a context of its own, not the request's, which
// may be canceled already.
const DefaultReleaseTimeout = 5 * time.Second

// maxReleaseTimeout bounds WithReleaseTimeout and
// ConcurrencyTransport.ReleaseTimeout.
const maxReleaseTimeout = time.Minute

// ConcurrencyDenial describes a request denied by a Concurrency middleware
// to a ConcurrencyDenyHandler.
type ConcurrencyDenial struct {
	// Name is the Concurrency middleware's name.
	Name string
	// Key is the key its KeyFunc derived (not the store key).
	Key string
	// Decision is the store's denial: Held permits of Limit are held.
	Decision sluice.PermitDecision
	// Status is the status to answer: 429, or the one set by
	// WithConcurrencyStatus.
	Status int
}

// ConcurrencyDenyHandler writes the response to a request denied by a
// Concurrency middleware. When it is called Retry-After is already set.
type ConcurrencyDenyHandler func(w http.ResponseWriter, r *http.Request, d ConcurrencyDenial)

// Concurrency is a middleware that limits how many requests of a key are
// in flight at once, across every replica that shares the store: a
// tenant's, an API key's or a route's. Build it with NewConcurrency; its
// Handler method is the func(http.Handler) http.Handler middleware. It is
// safe for concurrent use.
//
// Each admitted request holds one permit, under a holder id of its own
// (sluice.NewHolder), from before the handler runs until it returns. The
// permit is released on every path: a normal return, a panic (released,
// then the panic goes on), a handler that gives up on a canceled or timed
// out context (http.TimeoutHandler, a client that went away). The release
// runs on a context detached from the request's, bounded by
// WithReleaseTimeout; if it fails (the store is down), the permit frees
// when its TTL ends.
//
// A request that runs longer than a TTL keeps its permit: it is extended
// in the background at half of each TTL until the handler returns. When
// an extension reports the permit lost (sluice.ErrPermitLost: the store
// did not hear from this process for a whole TTL, and the slot may be
// another's now), the handler's context is canceled, so that the limit
// stays exact; a handler that ignores its context runs on, unpermitted.
// Other extension errors are retried at the next half TTL.
//
// Wrap the handler's work itself: with http.TimeoutHandler, put the
// Concurrency middleware inside it, so that the permit is held until the
// work stops, not only until the timeout answers.
//
// A denied request gets 429 (or the status of WithConcurrencyStatus, such
// as 503 for a shared upstream budget), a Retry-After of the denial's
// RetryAfter in whole seconds rounded up (at least 1), and an
// application/problem+json body naming the limit.
type Concurrency struct {
	sem        sluice.Semaphore
	name       string
	lim        sluice.ConcurrencyLimit
	key        KeyFunc
	defaultKey string
	status     int
	skip       []func(*http.Request) bool
	deny       ConcurrencyDenyHandler
	keyErr     ErrorHandler
	storeErr   ErrorHandler
	failOpen   bool
	release    time.Duration
	log        *slog.Logger
	err        error
}

// ConcurrencyOption configures a Concurrency middleware. NewConcurrency
// reports an option given an invalid value as an error naming the option.
type ConcurrencyOption func(*Concurrency)

func (c *Concurrency) invalid(option, why string) {
	if c.err == nil {
		c.err = fmt.Errorf("httplimit: NewConcurrency: %s: %s", option, why)
	}
}

func cNonNil(option string, isNil bool, set func(c *Concurrency)) ConcurrencyOption {
	return func(c *Concurrency) {
		if isNil {
			c.invalid(option, "nil")
			return
		}
		set(c)
	}
}

// WithConcurrencyKey sets the KeyFunc (default: the client IP from the
// socket, ClientIP{}.Key). Use Constant for one limit shared by every
// request, Route for one per route.
func WithConcurrencyKey(fn KeyFunc) ConcurrencyOption {
	return cNonNil("WithConcurrencyKey", fn == nil, func(c *Concurrency) { c.key = fn })
}

// WithConcurrencyDefaultKey makes requests without a key (a KeyFunc error
// wrapping ErrNoKey) share the given key instead of being answered 400.
func WithConcurrencyDefaultKey(key string) ConcurrencyOption {
	return func(c *Concurrency) {
		if key == "" {
			c.invalid("WithConcurrencyDefaultKey", "empty key")
			return
		}
		c.defaultKey = key
	}
}

// WithConcurrencyStatus sets the status of a denial: 429 (the default) or
// 503, when the limit protects a budget shared by all clients rather than
// a client's own share.
func WithConcurrencyStatus(status int) ConcurrencyOption {
	return func(c *Concurrency) {
		if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
			c.invalid("WithConcurrencyStatus", fmt.Sprintf("status %d: want 429 or 503", status))
			return
		}
		c.status = status
	}
}

// WithConcurrencySkip serves the requests for which fn returns true without
// a permit. Several add up.
func WithConcurrencySkip(fn func(*http.Request) bool) ConcurrencyOption {
	return cNonNil("WithConcurrencySkip", fn == nil, func(c *Concurrency) { c.skip = append(c.skip, fn) })
}

// WithConcurrencyDenyHandler replaces the default denial response.
func WithConcurrencyDenyHandler(h ConcurrencyDenyHandler) ConcurrencyOption {
	return cNonNil("WithConcurrencyDenyHandler", h == nil, func(c *Concurrency) { c.deny = h })
}

// WithConcurrencyKeyErrorHandler replaces the default response to a
// request without a key (400 with a problem body).
func WithConcurrencyKeyErrorHandler(h ErrorHandler) ConcurrencyOption {
	return cNonNil("WithConcurrencyKeyErrorHandler", h == nil, func(c *Concurrency) { c.keyErr = h })
}

// WithConcurrencyErrorHandler replaces the default response to a store
// error on acquire (503 with a problem body).
func WithConcurrencyErrorHandler(h ErrorHandler) ConcurrencyOption {
	return cNonNil("WithConcurrencyErrorHandler", h == nil, func(c *Concurrency) { c.storeErr = h })
}

// WithConcurrencyFailOpen serves, without a permit, requests whose acquire
// failed with a store error. Prefer a failover store, which fails open
// through a local share of the limit.
func WithConcurrencyFailOpen() ConcurrencyOption {
	return func(c *Concurrency) { c.failOpen = true }
}

// WithReleaseTimeout bounds each release and extension store call (default
// DefaultReleaseTimeout, at most a minute; an extension is also bounded by
// half the TTL).
func WithReleaseTimeout(d time.Duration) ConcurrencyOption {
	return func(c *Concurrency) {
		if d <= 0 || d > maxReleaseTimeout {
			c.invalid("WithReleaseTimeout", fmt.Sprintf("%v: want within (0, %v]", d, maxReleaseTimeout))
			return
		}
		c.release = d
	}
}

// WithConcurrencyLogger sets the logger for store errors (default:
// discard).
func WithConcurrencyLogger(l *slog.Logger) ConcurrencyOption {
	return cNonNil("WithConcurrencyLogger", l == nil, func(c *Concurrency) { c.log = l })
}

// NewConcurrency returns a middleware that holds at most lim.Max requests
// of a key in flight, through sem. name namespaces its keys in the store
// (the store key is name + ":" + key, as for a Policy) and names it in
// problem bodies. It reports a nil store, an invalid name, an invalid lim
// (a *sluice.LimitError naming the field) and an invalid option.
func NewConcurrency(sem sluice.Semaphore, name string, lim sluice.ConcurrencyLimit, opts ...ConcurrencyOption) (*Concurrency, error) {
	if sem == nil {
		return nil, errors.New("httplimit: NewConcurrency: Semaphore is nil")
	}
	if err := validName(name); err != nil {
		return nil, fmt.Errorf("httplimit: NewConcurrency: %v", err)
	}
	lim = lim.Normalize()
	if err := lim.Validate(); err != nil {
		return nil, fmt.Errorf("httplimit: NewConcurrency %q: %w", name, err)
	}
	c := &Concurrency{
		sem:      sem,
		name:     name,
		lim:      lim,
		key:      ClientIP{}.Key,
		status:   http.StatusTooManyRequests,
		deny:     defaultConcurrencyDeny,
		keyErr:   defaultKeyError,
		storeErr: defaultConcurrencyStoreError,
		release:  DefaultReleaseTimeout,
		log:      slog.New(slog.DiscardHandler),
	}
	for _, o := range opts {
		o(c)
	}
	if c.err != nil {
		return nil, c.err
	}
	return c, nil
}

// Handler returns next wrapped by the middleware.
func (c *Concurrency) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.serve(w, r, next) })
}

func (c *Concurrency) keyOf(r *http.Request) (string, error) {
	key, err := c.key(r)
	if err == nil && key == "" {
		err = fmt.Errorf("%w: concurrency limit %q derived an empty key", ErrNoKey, c.name)
	}
	if err != nil {
		if c.defaultKey != "" && errors.Is(err, ErrNoKey) {
			return c.defaultKey, nil
		}
		return "", err
	}
	return key, nil
}

func (c *Concurrency) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	for _, s := range c.skip {
		if s(r) {
			next.ServeHTTP(w, r)
			return
		}
	}
	key, err := c.keyOf(r)
	if err != nil {
		c.keyErr(w, r, err)
		return
	}
	skey := storeKey(c.name, key)
	holder := sluice.NewHolder()
	d, err := c.sem.Acquire(r.Context(), skey, c.lim, holder)
	if err != nil {
		// The acquire may have taken the permit before failing (a lost
		// reply): give it back, best effort.
		c.releaseBestEffort(r.Context(), skey, holder)
		err = fmt.Errorf("httplimit: acquiring %q for %s %s: %w", c.name, r.Method, r.URL.Path, err)
		c.log.LogAttrs(r.Context(), slog.LevelError, "concurrency limit undecided", slog.Any("error", err))
		if c.failOpen {
			next.ServeHTTP(w, r)
			return
		}
		c.storeErr(w, r, err)
		return
	}
	if !d.Acquired {
		if d.Limit == (sluice.ConcurrencyLimit{}) {
			d.Limit = c.lim
		}
		w.Header().Set(HeaderRetryAfter, strconv.FormatInt(max(ceilSeconds(d.RetryAfter), 1), 10))
		c.deny(w, r, ConcurrencyDenial{Name: c.name, Key: key, Decision: d, Status: c.status})
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	p := startPermit(ctx, c.sem, skey, c.lim, holder, d, c.release, cancel, c.log)
	defer func() {
		cancel()
		p.release(ctx)
	}()
	next.ServeHTTP(w, r.WithContext(ctx))
}

func (c *Concurrency) releaseBestEffort(ctx context.Context, key, holder string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.release)
	defer cancel()
	if err := c.sem.Release(rctx, key, holder); err != nil {
		c.log.LogAttrs(ctx, slog.LevelWarn, "concurrency permit release failed; it frees when its lease ends", slog.String("key", key), slog.Any("error", err))
	}
}

// permit is one held permit, extended in the background until released.
type permit struct {
	sem     sluice.Semaphore
	key     string
	lim     sluice.ConcurrencyLimit
	holder  string
	timeout time.Duration
	log     *slog.Logger

	once sync.Once
	stop chan struct{}
	done chan struct{}
}

// startPermit starts extending the permit of d at half of each TTL;
// lost is called when an extension reports sluice.ErrPermitLost.
func startPermit(ctx context.Context, sem sluice.Semaphore, key string, lim sluice.ConcurrencyLimit, holder string, d sluice.PermitDecision, timeout time.Duration, lost func(), log *slog.Logger) *permit {
	p := &permit{sem: sem, key: key, lim: lim.Normalize(), holder: holder, timeout: timeout, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	go p.extend(context.WithoutCancel(ctx), lost)
	return p
}

func (p *permit) extend(ctx context.Context, lost func()) {
	defer close(p.done)
	half := p.lim.TTL / 2
	t := time.NewTimer(half)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		ectx, cancel := context.WithTimeout(ctx, min(half, p.timeout))
		_, err := p.sem.Extend(ectx, p.key, p.lim, p.holder)
		cancel()
		if errors.Is(err, sluice.ErrPermitLost) {
			p.log.LogAttrs(ctx, slog.LevelWarn, "concurrency permit lost before it was extended", slog.String("key", p.key))
			if lost != nil {
				lost()
			}
			return
		}
		if err != nil {
			p.log.LogAttrs(ctx, slog.LevelWarn, "concurrency permit extension failed; retrying", slog.String("key", p.key), slog.Any("error", err))
		}
		t.Reset(half)
	}
}

// release stops the extensions, waits for one in progress, and releases
// the permit on a context detached from ctx, bounded by the timeout. It is
// safe to call more than once; only the first call releases.
func (p *permit) release(ctx context.Context) {
	p.once.Do(func() {
		close(p.stop)
		<-p.done
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
		defer cancel()
		if err := p.sem.Release(rctx, p.key, p.holder); err != nil {
			p.log.LogAttrs(ctx, slog.LevelWarn, "concurrency permit release failed; it frees when its lease ends", slog.String("key", p.key), slog.Any("error", err))
		}
	})
}

func defaultConcurrencyDeny(w http.ResponseWriter, _ *http.Request, d ConcurrencyDenial) {
	secs := max(ceilSeconds(d.Decision.RetryAfter), 1)
	typ, title := ProblemTypeQuotaExceeded, "Too Many Requests"
	if d.Status == http.StatusServiceUnavailable {
		typ, title = "about:blank", "Service Unavailable"
	}
	Problem{
		Type:       typ,
		Title:      title,
		Status:     d.Status,
		Detail:     fmt.Sprintf("Limit %q allows %d requests at once; retry in %d s.", d.Name, d.Decision.Limit.Max, secs),
		Policy:     d.Name,
		RetryAfter: secs,
	}.Write(w)
}

func defaultConcurrencyStoreError(w http.ResponseWriter, _ *http.Request, _ error) {
	Problem{
		Type:   "about:blank",
		Title:  "Service Unavailable",
		Status: http.StatusServiceUnavailable,
		Detail: "The concurrency limit could not be decided; try again later.",
	}.Write(w)
}
