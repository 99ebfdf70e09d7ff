package httplimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// Policy is one limit a Middleware enforces. A request is decided against
// all its matching policies at once, all-or-nothing: when one denies,
// none is counted.
type Policy struct {
	// Name identifies the policy in the RateLimit headers, in problem
	// bodies and in metrics, and namespaces its keys in the store (the
	// store key is Name + ":" + key, or Name + ":sha256:" + the key's hex
	// digest when too long for a store): two policies never share state.
	// Non-empty printable ASCII, unique within a Middleware.
	Name string
	// Limit is the quota.
	Limit sluice.Limit
	// Key derives the policy's key; nil means the Middleware's key
	// (WithKey). Use Constant for a global policy.
	Key KeyFunc
	// Match selects the requests the policy applies to; nil matches every
	// request. A request no policy matches is served undecided.
	Match func(*http.Request) bool
}

// Denial describes a denied request to a DenyHandler.
type Denial struct {
	// Policy is the violated policy: the one whose wait is the longest.
	Policy string
	// RetryAfter is the wait after which the request would be admitted,
	// absent other traffic (the Retry-After header rounds it up).
	RetryAfter time.Duration
	// Decisions holds one entry per policy that applied.
	Decisions []PolicyDecision
}

// DenyHandler writes the response to a denied request. When it is called
// the rate-limit headers and Retry-After are already set on w.
type DenyHandler func(w http.ResponseWriter, r *http.Request, d Denial)

// ErrorHandler writes the response to a request that could not be decided:
// a key error (err wraps ErrNoKey) or a store error.
type ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

// Middleware enforces policies on inbound requests. Build it with New; its
// Handler method is the func(http.Handler) http.Handler middleware. It is
// safe for concurrent use.
type Middleware struct {
	lim        *sluice.Limiter
	policies   []Policy
	key        KeyFunc
	defaultKey string
	headers    Headers
	pk         func(policy, key string) []byte
	skip       []func(*http.Request) bool
	deny       DenyHandler
	keyErr     ErrorHandler
	storeErr   ErrorHandler
	failOpen   bool
	obs        Observer
	log        *slog.Logger
	err        error // the first invalid option, reported by New
}

// Option configures a Middleware. New reports an option given an invalid
// value, such as a nil function, as an error naming the option.
type Option func(*Middleware)

// invalid records the first invalid option for New to report.
func (m *Middleware) invalid(option, why string) {
	if m.err == nil {
		m.err = fmt.Errorf("httplimit: New: %s: %s", option, why)
	}
}

// nonNil returns an Option that applies set, or records option as invalid
// when isNil.
func nonNil(option string, isNil bool, set func(m *Middleware)) Option {
	return func(m *Middleware) {
		if isNil {
			m.invalid(option, "nil")
			return
		}
		set(m)
	}
}

// WithKey sets the KeyFunc of policies whose Key is nil (default: the
// client IP from the socket, ClientIP{}.Key, which trusts no proxy).
func WithKey(fn KeyFunc) Option {
	return nonNil("WithKey", fn == nil, func(m *Middleware) { m.key = fn })
}

// WithDefaultKey makes a request from which no key can be derived (a
// KeyFunc error wrapping ErrNoKey) share the given key, namespaced per
// policy, instead of being answered 400. Use it deliberately: all such
// requests then share one quota. The key must not be empty.
func WithDefaultKey(key string) Option {
	return func(m *Middleware) {
		if key == "" {
			m.invalid("WithDefaultKey", "empty key")
			return
		}
		m.defaultKey = key
	}
}

// WithHeaders selects the rate-limit headers (default AllHeaders): a
// combination of XRateLimitHeaders and DraftHeaders, or NoHeaders.
func WithHeaders(h Headers) Option {
	return func(m *Middleware) {
		if h&^AllHeaders != 0 {
			m.invalid("WithHeaders", fmt.Sprintf("unknown headers %#x", uint8(h&^AllHeaders)))
			return
		}
		m.headers = h
	}
}

// WithPartitionKey adds the draft-11 pk parameter to each policy's
// RateLimit-Policy and RateLimit members: fn(policy, key) returns the
// bytes, sent as an sf-binary; a nil result omits pk for that request. Do
// not send secrets such as API keys: HashPartitionKey is a safe choice.
func WithPartitionKey(fn func(policy, key string) []byte) Option {
	return nonNil("WithPartitionKey", fn == nil, func(m *Middleware) { m.pk = fn })
}

// HashPartitionKey is a partition key function for WithPartitionKey: the
// first 12 bytes of SHA-256 over the policy name and key, which identifies
// the partition to its client without revealing the key.
func HashPartitionKey(policy, key string) []byte {
	h := sha256.New()
	h.Write([]byte(policy))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return h.Sum(nil)[:12]
}

// WithSkip serves the requests for which fn returns true without deciding
// them: health checks, metrics scrapes. Several WithSkip add up.
func WithSkip(fn func(*http.Request) bool) Option {
	return nonNil("WithSkip", fn == nil, func(m *Middleware) { m.skip = append(m.skip, fn) })
}

// WithSkipPaths skips requests whose URL path is exactly one of paths, such
// as "/healthz".
func WithSkipPaths(paths ...string) Option {
	set := make(map[string]bool, len(paths))
	for _, p := range paths {
		set[p] = true
	}
	return WithSkip(func(r *http.Request) bool { return set[r.URL.Path] })
}

// WithDenyHandler replaces the default denial response (429 with an
// application/problem+json body).
func WithDenyHandler(h DenyHandler) Option {
	return nonNil("WithDenyHandler", h == nil, func(m *Middleware) { m.deny = h })
}

// WithKeyErrorHandler replaces the default response to a request without a
// key (400 with a problem body naming what is missing).
func WithKeyErrorHandler(h ErrorHandler) Option {
	return nonNil("WithKeyErrorHandler", h == nil, func(m *Middleware) { m.keyErr = h })
}

// WithErrorHandler replaces the default response to a store error (503
// with a problem body). A failover.Store in front of the store decides by
// each limit's sluice.FailureMode instead, and only its errors reach this
// handler: under sluice.FailError, every request it could not decide (an
// error wrapping sluice.ErrNoDecision), so that this handler, or
// WithFailOpen, is the policy while the store is down.
func WithErrorHandler(h ErrorHandler) Option {
	return nonNil("WithErrorHandler", h == nil, func(m *Middleware) { m.storeErr = h })
}

// WithFailOpen serves requests that could not be decided because of a
// store error (they are still reported to the Observer as Failed), such as
// a failover.Store's sluice.ErrNoDecision under sluice.FailError. Prefer a
// failover.Store and limits of sluice.FailOpen, which fail open through a
// strict local limit instead of admitting everything.
func WithFailOpen() Option { return func(m *Middleware) { m.failOpen = true } }

// WithObserver sets the Observer (default: none).
func WithObserver(o Observer) Option {
	return nonNil("WithObserver", o == nil, func(m *Middleware) { m.obs = o })
}

// WithLogger sets the logger for store errors (default: discard).
func WithLogger(l *slog.Logger) Option {
	return nonNil("WithLogger", l == nil, func(m *Middleware) { m.log = l })
}

// New returns a Middleware enforcing policies through lim. It reports an
// invalid option, an invalid, unnamed or duplicate policy, and several
// policies on a store that cannot decide them all-or-nothing
// (sluice.MultiStore).
func New(lim *sluice.Limiter, policies []Policy, opts ...Option) (*Middleware, error) {
	if lim == nil {
		return nil, errors.New("httplimit: New: Limiter is nil")
	}
	if len(policies) == 0 {
		return nil, errors.New("httplimit: New: no policy")
	}
	m := &Middleware{
		lim:      lim,
		policies: append([]Policy(nil), policies...),
		key:      ClientIP{}.Key,
		headers:  AllHeaders,
		obs:      nopObserver{},
		log:      slog.New(slog.DiscardHandler),
		deny:     defaultDeny,
		keyErr:   defaultKeyError,
		storeErr: defaultStoreError,
	}
	for _, o := range opts {
		o(m)
	}
	if m.err != nil {
		return nil, m.err
	}
	seen := make(map[string]bool, len(policies))
	for i, p := range m.policies {
		if err := validName(p.Name); err != nil {
			return nil, fmt.Errorf("httplimit: policy %d: %v", i, err)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("httplimit: policy %d: name %q is used twice", i, p.Name)
		}
		seen[p.Name] = true
		if err := p.Limit.Validate(); err != nil {
			return nil, fmt.Errorf("httplimit: policy %q: %w", p.Name, err)
		}
	}
	if len(m.policies) > 1 {
		// An AllowMulti of no request decides nothing: it asks the store
		// whether it can decide several at once.
		if _, err := lim.AllowMulti(context.Background(), nil); errors.Is(err, sluice.ErrMultiUnsupported) {
			return nil, fmt.Errorf("httplimit: New: %d policies need a store that decides them together (AllowMulti), and %T cannot: %w", len(m.policies), lim.Store(), err)
		}
	}
	return m, nil
}

// Handler returns next wrapped by the middleware. Its type is
// func(http.Handler) http.Handler: pass m.Handler wherever a middleware is
// expected (chi's Use, alice, a hand-made chain).
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

// applied is one policy that matched a request.
type applied struct {
	p   *Policy
	key string // as derived, before namespacing
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	for _, s := range m.skip {
		if s(r) {
			m.obs.Observe(Event{Request: r, Outcome: Skipped})
			next.ServeHTTP(w, r)
			return
		}
	}
	start := time.Now()
	var abuf [4]applied
	var rbuf [4]sluice.Request
	as, reqs := abuf[:0], rbuf[:0]
	for i := range m.policies {
		p := &m.policies[i]
		if p.Match != nil && !p.Match(r) {
			continue
		}
		key, err := m.keyOf(p, r)
		if err != nil {
			m.obs.Observe(Event{Request: r, Outcome: NoKey, Err: err, Duration: time.Since(start)})
			m.keyErr(w, r, err)
			return
		}
		as = append(as, applied{p: p, key: key})
		reqs = append(reqs, sluice.Request{Key: storeKey(p.Name, key), Limit: p.Limit, N: 1})
	}
	if len(as) == 0 {
		next.ServeHTTP(w, r)
		return
	}
	ds, err := m.decide(r.Context(), reqs)
	if err != nil {
		err = fmt.Errorf("httplimit: deciding %s %s: %w", r.Method, r.URL.Path, err)
		m.log.LogAttrs(r.Context(), slog.LevelError, "rate limit undecided", slog.Any("error", err))
		m.obs.Observe(Event{Request: r, Outcome: Failed, Err: err, Duration: time.Since(start)})
		if m.failOpen {
			next.ServeHTTP(w, r)
			return
		}
		m.storeErr(w, r, err)
		return
	}
	pds := make([]PolicyDecision, len(as))
	allowed := true
	for i, a := range as {
		pds[i] = PolicyDecision{Policy: a.p.Name, Key: a.key, Decision: ds[i]}
		allowed = allowed && ds[i].Allowed
	}
	h := w.Header()
	m.setHeaders(h, pds, allowed)
	if allowed {
		m.obs.Observe(Event{Request: r, Outcome: Allowed, Decisions: pds, Duration: time.Since(start)})
		next.ServeHTTP(w, r)
		return
	}
	v := violated(pds)
	retry := sluice.CombineRetry(ds)
	h.Set(HeaderRetryAfter, strconv.FormatInt(max(ceilSeconds(retry), 1), 10))
	m.obs.Observe(Event{Request: r, Outcome: Denied, Policy: pds[v].Policy, Decisions: pds, Duration: time.Since(start)})
	m.deny(w, r, Denial{Policy: pds[v].Policy, RetryAfter: retry, Decisions: pds})
}

// decide is AllowN for one request and AllowMulti for several.
func (m *Middleware) decide(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	if len(reqs) == 1 {
		d, err := m.lim.AllowN(ctx, reqs[0].Key, reqs[0].Limit, reqs[0].N)
		if err != nil {
			return nil, err
		}
		return []sluice.Decision{d}, nil
	}
	ds, err := m.lim.AllowMulti(ctx, reqs)
	if err == nil && len(ds) != len(reqs) {
		err = fmt.Errorf("store %T returned %d decisions for %d requests", m.lim.Store(), len(ds), len(reqs))
	}
	return ds, err
}

func (m *Middleware) keyOf(p *Policy, r *http.Request) (string, error) {
	fn := p.Key
	if fn == nil {
		fn = m.key
	}
	key, err := fn(r)
	if err == nil && key == "" {
		err = fmt.Errorf("%w: policy %q derived an empty key", ErrNoKey, p.Name)
	}
	if err != nil {
		if m.defaultKey != "" && errors.Is(err, ErrNoKey) {
			return m.defaultKey, nil
		}
		return "", err
	}
	return key, nil
}

// storeKey namespaces key by policy. Keys too long for a store are
// replaced by their SHA-256, so that an oversized header value is limited
// like any other rather than failing the store call.
func storeKey(policy, key string) string {
	if len(policy)+1+len(key) <= sluice.MaxKeyLen {
		return policy + ":" + key
	}
	sum := sha256.Sum256([]byte(key))
	return policy + ":sha256:" + hex.EncodeToString(sum[:])
}

// violated returns the index of the denying policy with the longest wait.
func violated(pds []PolicyDecision) int {
	v := -1
	for i, pd := range pds {
		if pd.Decision.RetryAfter > 0 && (v < 0 || pd.Decision.RetryAfter > pds[v].Decision.RetryAfter) {
			v = i
		}
	}
	return max(v, 0)
}

// restrictive returns the index of the policy that binds the next request:
// the violated one on a denial, else the one with the least Remaining.
func restrictive(pds []PolicyDecision, allowed bool) int {
	if !allowed {
		return violated(pds)
	}
	v := 0
	for i, pd := range pds {
		if pd.Decision.Remaining < pds[v].Decision.Remaining {
			v = i
		}
	}
	return v
}

func (m *Middleware) setHeaders(h http.Header, pds []PolicyDecision, allowed bool) {
	if m.headers&XRateLimitHeaders != 0 {
		d := pds[restrictive(pds, allowed)].Decision
		h.Set(HeaderLimit, strconv.Itoa(d.Limit.Rate))
		h.Set(HeaderRemaining, strconv.Itoa(max(d.Remaining, 0)))
		h.Set(HeaderReset, strconv.FormatInt(ceilSeconds(d.ResetAfter), 10))
	}
	if m.headers&DraftHeaders != 0 {
		var pks [][]byte
		if m.pk != nil {
			pks = make([][]byte, len(pds))
			for i, pd := range pds {
				pks[i] = m.pk(pd.Policy, pd.Key)
			}
		}
		pk := func(i int) []byte {
			if pks == nil {
				return nil
			}
			return pks[i]
		}
		h.Set(HeaderRateLimitPolicy, joinMembers(len(pds), func(b []byte, i int) []byte {
			return policyMember(b, pds[i].Policy, pds[i].Decision.Limit, pk(i))
		}))
		h.Set(HeaderRateLimit, joinMembers(len(pds), func(b []byte, i int) []byte {
			return limitMember(b, pds[i].Policy, pds[i].Decision, pk(i))
		}))
	}
}

func defaultDeny(w http.ResponseWriter, _ *http.Request, d Denial) {
	secs := max(ceilSeconds(d.RetryAfter), 1)
	var lim sluice.Limit
	for _, pd := range d.Decisions {
		if pd.Policy == d.Policy {
			lim = pd.Decision.Limit
		}
	}
	Problem{
		Type:       ProblemTypeQuotaExceeded,
		Title:      "Too Many Requests",
		Status:     http.StatusTooManyRequests,
		Detail:     fmt.Sprintf("Policy %q allows %d requests per %v; retry in %d s.", d.Policy, lim.Rate, lim.Period, secs),
		Policy:     d.Policy,
		RetryAfter: secs,
	}.Write(w)
}

func defaultKeyError(w http.ResponseWriter, _ *http.Request, err error) {
	Problem{
		Type:   "about:blank",
		Title:  "Bad Request",
		Status: http.StatusBadRequest,
		Detail: "No rate-limit key: " + keyErrorDetail(err),
	}.Write(w)
}

// keyErrorDetail strips the package prefix of ErrNoKey for the client.
func keyErrorDetail(err error) string {
	s := err.Error()
	if p := ErrNoKey.Error() + ": "; len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

func defaultStoreError(w http.ResponseWriter, _ *http.Request, _ error) {
	Problem{
		Type:   "about:blank",
		Title:  "Service Unavailable",
		Status: http.StatusServiceUnavailable,
		Detail: "The rate limit could not be decided; try again later.",
	}.Write(w)
}
