// Package remotestore is a sluice.Store that decides through the store API
// of a sluice serve (its --store-api-addr listener, protocol
// sluice.store.v1): a fleet that shares one quota decides through a sluice
// serve fleet instead of holding the credentials of its store (Redis's),
// and a region's processes through a home region's sluice serve.
//
//	rs, err := remotestore.Dial("sluice.home.example:8083",
//		remotestore.WithTokenFile("/etc/sluice/store-token"))
//	if err != nil { ... }
//	defer rs.Close()
//	// A failure policy, as for any shared store: a deadline above the
//	// round trip, a breaker, the limits' failure modes.
//	st, err := stack.New(rs, stack.WithFailover(failover.WithTimeout(500*time.Millisecond)))
//	limiter := sluice.New(st)
//
// A Store is a sluice.FullStore with the exact semantics of the store it
// reaches: each call is one call of that store (the serving sluice's,
// with its own failover and local tier), and its answer comes back field
// for field: a Decision with Degraded, RetryAfter and ResetAfter; the time
// of a reservation; a *sluice.LimitError naming the invalid field and
// wrapping its sentinel (sluice.ErrInvalidLimit, ErrInvalidKey,
// ErrInvalidCost or ErrExceedsCapacity); sluice.ErrPermitLost. A limit's
// FailureMode and Counting travel with it.
//
// What the serving store cannot do is reported with the capability's
// sentinel (sluice.ErrMultiUnsupported, ...): the store is asked once
// what it supports (Capabilities), and a capability it lacks costs no
// call. Freed returns nil: a waiter for a permit sleeps until the earliest
// TTL ends, as over Redis.
//
// Errors: an invalid request, a capability the store lacks and a closed
// Store are the caller's; any other error (the server cannot be reached,
// answers Unavailable, refuses the credentials, the call's deadline)
// means the store did not answer, the kind of error package failover
// counts towards its breaker and decides by the limit's failure mode.
// Keys (at most sluice.MaxKeyLen bytes), holder ids and the size of an
// AllowMulti are checked before anything is sent.
//
// The package brings gRPC and protobuf into a program that imports it, as
// redisstore brings its Redis client; the core packages do not.
package remotestore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	storev1 "github.com/sluicehq/sluice/api/sluice/store/v1"
	"github.com/sluicehq/sluice/internal/storewire"
	"github.com/sluicehq/sluice/internal/validate"
)

var (
	_ sluice.FullStore = (*Store)(nil)
	_ sluice.Granter   = (*Store)(nil)
)

// Store is a sluice.FullStore over a sluice serve's store API. It is safe
// for concurrent use.
type Store struct {
	sluice.Unsupported // Freed: nil, a waiter sleeps until a TTL ends

	c       storev1.StoreClient
	conn    *grpc.ClientConn // Dial's, which Close closes; nil for New's
	target  string
	timeout time.Duration
	caps    capCache
	closed  atomic.Bool
}

// Dial returns a Store that reaches the store API at target, host:port (or
// any gRPC target, such as dns:///name:port), over TLS with the system's
// CAs unless an Option says otherwise. It does not connect: the first call
// does, and a server that cannot be reached is an error of each call, not
// of Dial. A server that went away is tried again at least once a second,
// so that it is used again within about a second of its return, whatever
// the outage's length. Close closes the connection.
func Dial(target string, opts ...Option) (*Store, error) {
	var cfg config
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	conn, err := grpc.NewClient(target, cfg.dialOptions()...)
	if err != nil {
		return nil, fmt.Errorf("remotestore: %w", err)
	}
	s := newStore(storev1.NewStoreClient(conn), target, &cfg)
	s.conn = conn
	return s, nil
}

// New returns a Store over conn, a connection the caller made (with its
// own credentials and options) and keeps owning: Close does not close it.
// Of the options, only WithTimeout applies; the others configure Dial's
// connection.
func New(conn grpc.ClientConnInterface, opts ...Option) (*Store, error) {
	if conn == nil {
		return nil, errors.New("remotestore: New(nil)")
	}
	var cfg config
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	target := "a gRPC connection"
	if cc, ok := conn.(*grpc.ClientConn); ok {
		target = cc.Target()
	}
	return newStore(storev1.NewStoreClient(conn), target, &cfg), nil
}

func newStore(c storev1.StoreClient, target string, cfg *config) *Store {
	return &Store{c: c, target: target, timeout: cfg.timeout}
}

// String describes the store for logs: remote(target).
func (s *Store) String() string { return "remote(" + s.target + ")" }

// Close makes every later call return sluice.ErrClosed and closes the
// connection that Dial made. It is safe to call more than once.
func (s *Store) Close() error {
	if s.closed.Swap(true) || s.conn == nil {
		return nil
	}
	return s.conn.Close()
}

// begin starts a call: sluice.ErrClosed after Close, the context's error
// when it has ended, and otherwise the call's context, with WithTimeout's
// deadline.
func (s *Store) begin(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if s.closed.Load() {
		return nil, nil, sluice.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if s.timeout <= 0 {
		return ctx, func() {}, nil
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= s.timeout {
		return ctx, func() {}, nil
	}
	c, cancel := context.WithTimeout(ctx, s.timeout)
	return c, cancel, nil
}

// fail is the error of a call of op that failed with err: the caller's
// (or the call's timeout's) context error, the request's or a
// capability's error as the store gave it, or the store's failure to
// answer.
//
// A call whose deadline has passed failed by its deadline, whatever the
// answer says: the deadline travels with the call, and the serving side
// may end the call at it and answer first, before this process's timer
// has cancelled ctx (a timer runs late on a busy machine; the clock does
// not).
func (s *Store) fail(ctx context.Context, op string, capability int, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("remotestore: %s %s: %w", op, s.target, cerr)
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return fmt.Errorf("remotestore: %s %s: %w (the store answered %v)", op, s.target, context.DeadlineExceeded, err)
	}
	if e := storewire.ToError(err); e != nil {
		if capability >= 0 && status.Code(err) == codes.Unimplemented {
			s.caps.lacks(capability)
		}
		return e
	}
	return fmt.Errorf("remotestore: %s %s: %w", op, s.target, err)
}

// AllowN implements sluice.Store.
func (s *Store) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	if err := sluice.ValidateKey(key); err != nil {
		return sluice.Decision{}, err
	}
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return sluice.Decision{}, err
	}
	defer cancel()
	resp, err := s.c.AllowN(ctx, &storev1.AllowNRequest{Key: []byte(key), Limit: storewire.Limit(lim), N: int64(n)})
	if err != nil {
		return sluice.Decision{}, s.fail(ctx, "allow", -1, err)
	}
	return storewire.ToDecision(resp.GetDecision(), lim), nil
}

// AllowMulti implements sluice.MultiStore through the serving store's
// AllowMulti (sluice.ErrMultiUnsupported when it has none).
func (s *Store) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	if len(reqs) > sluice.MaxMultiRequests {
		return nil, &sluice.LimitError{Field: "Requests", Reason: fmt.Sprintf("AllowMulti of %d requests, more than %d at once", len(reqs), sluice.MaxMultiRequests), Err: sluice.ErrExceedsCapacity}
	}
	ps := make([]*storev1.Request, len(reqs))
	for i, r := range reqs {
		if err := sluice.ValidateKey(r.Key); err != nil {
			return nil, err
		}
		ps[i] = &storev1.Request{Key: []byte(r.Key), Limit: storewire.Limit(r.Limit), N: int64(r.N)}
	}
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if err := s.need(ctx, capMulti); err != nil {
		return nil, err
	}
	resp, err := s.c.AllowMulti(ctx, &storev1.AllowMultiRequest{Requests: ps})
	if err != nil {
		return nil, s.fail(ctx, "allow multi", capMulti, err)
	}
	pds := resp.GetDecisions()
	if len(pds) != len(reqs) {
		return nil, fmt.Errorf("remotestore: allow multi %s: %d decisions for %d requests", s.target, len(pds), len(reqs))
	}
	ds := make([]sluice.Decision, len(reqs))
	for i, p := range pds {
		ds[i] = storewire.ToDecision(p, reqs[i].Limit)
	}
	return ds, nil
}

// Reserve implements sluice.Reserver through the serving store's Reserve.
// A Decision with Degraded true, a zero time and a nil error reserved
// nothing (the serving store's failover could not): decide by AllowN.
func (s *Store) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	if err := sluice.ValidateKey(key); err != nil {
		return sluice.Decision{}, time.Time{}, err
	}
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return sluice.Decision{}, time.Time{}, err
	}
	defer cancel()
	if err := s.need(ctx, capReserve); err != nil {
		return sluice.Decision{}, time.Time{}, err
	}
	resp, err := s.c.Reserve(ctx, &storev1.ReserveRequest{Key: []byte(key), Limit: storewire.Limit(lim), N: int64(n)})
	if err != nil {
		return sluice.Decision{}, time.Time{}, s.fail(ctx, "reserve", capReserve, err)
	}
	return storewire.ToDecision(resp.GetDecision(), lim), storewire.ToTime(resp.GetAt()), nil
}

// Return implements sluice.Reserver through the serving store's Return. A
// zero at is the serving store's time now.
func (s *Store) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	if err := sluice.ValidateKey(key); err != nil {
		return err
	}
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := s.need(ctx, capReserve); err != nil {
		return err
	}
	_, err = s.c.Return(ctx, &storev1.ReturnRequest{Key: []byte(key), Limit: storewire.Limit(lim), N: int64(n), At: storewire.Time(at)})
	if err != nil {
		return s.fail(ctx, "return", capReserve, err)
	}
	return nil
}

// Reset implements sluice.Resetter through the serving store's Reset.
func (s *Store) Reset(ctx context.Context, key string, lim sluice.Limit) error {
	if err := sluice.ValidateKey(key); err != nil {
		return err
	}
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := s.need(ctx, capReset); err != nil {
		return err
	}
	if _, err := s.c.Reset(ctx, &storev1.ResetRequest{Key: []byte(key), Limit: storewire.Limit(lim)}); err != nil {
		return s.fail(ctx, "reset", capReset, err)
	}
	return nil
}

// Acquire implements sluice.Semaphore through the serving store's.
func (s *Store) Acquire(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	lim = lim.Normalize()
	ctx, cancel, err := s.permitCall(ctx, key, holder)
	if err != nil {
		return sluice.PermitDecision{}, err
	}
	defer cancel()
	resp, err := s.c.Acquire(ctx, &storev1.AcquireRequest{Key: []byte(key), Limit: storewire.Concurrency(lim), Holder: []byte(holder)})
	if err != nil {
		return sluice.PermitDecision{}, s.fail(ctx, "acquire", capSemaphore, err)
	}
	return storewire.ToPermit(resp.GetDecision(), lim), nil
}

// Release implements sluice.Semaphore through the serving store's.
func (s *Store) Release(ctx context.Context, key, holder string) error {
	ctx, cancel, err := s.permitCall(ctx, key, holder)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := s.c.Release(ctx, &storev1.ReleaseRequest{Key: []byte(key), Holder: []byte(holder)}); err != nil {
		return s.fail(ctx, "release", capSemaphore, err)
	}
	return nil
}

// Extend implements sluice.Semaphore through the serving store's: a
// permit no longer held is a decision with Acquired false and an error
// wrapping sluice.ErrPermitLost.
func (s *Store) Extend(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	lim = lim.Normalize()
	ctx, cancel, err := s.permitCall(ctx, key, holder)
	if err != nil {
		return sluice.PermitDecision{}, err
	}
	defer cancel()
	resp, err := s.c.Extend(ctx, &storev1.ExtendRequest{Key: []byte(key), Limit: storewire.Concurrency(lim), Holder: []byte(holder)})
	if err != nil {
		d, _ := storewire.PermitOf(err, lim)
		return d, s.fail(ctx, "extend", capSemaphore, err)
	}
	d := storewire.ToPermit(resp.GetDecision(), lim)
	if resp.GetPermitLost() {
		return d, fmt.Errorf("%w: %q at %s", sluice.ErrPermitLost, key, s)
	}
	return d, nil
}

// Grant implements sluice.Granter through the serving store's grants
// (sluice.ErrGrantUnsupported when it has none): a region's sluice (package
// region) holds units granted by a home sluice serve. The request is
// checked before anything is sent. A grant is never degraded: when the
// serving store cannot grant (its Redis does not answer), the call fails.
func (s *Store) Grant(ctx context.Context, key string, lim sluice.Limit, r sluice.GrantRequest) (sluice.Grant, error) {
	if err := validate.Grant(key, lim, r); err != nil {
		return sluice.Grant{}, err
	}
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return sluice.Grant{}, err
	}
	defer cancel()
	if err := s.need(ctx, capGrant); err != nil {
		return sluice.Grant{}, err
	}
	resp, err := s.c.Grant(ctx, storewire.GrantRequest(key, lim, r))
	if err != nil {
		return sluice.Grant{}, s.fail(ctx, "grant", capGrant, err)
	}
	return storewire.ToGrant(resp, lim), nil
}

// permitCall checks a permit's key and holder before anything is sent,
// and begins the call.
func (s *Store) permitCall(ctx context.Context, key, holder string) (context.Context, context.CancelFunc, error) {
	if err := sluice.ValidateKey(key); err != nil {
		return nil, nil, err
	}
	if err := sluice.ValidateHolder(holder); err != nil {
		return nil, nil, err
	}
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := s.need(ctx, capSemaphore); err != nil {
		cancel()
		return nil, nil, err
	}
	return ctx, cancel, nil
}

// Ping asks the server what its store supports, which is also how
// failover's prober knows it answers again.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.Capabilities(ctx)
	return err
}

// Capabilities reports what the serving store supports, asking the server
// (and remembering its answer for a minute).
func (s *Store) Capabilities(ctx context.Context) (Capabilities, error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return Capabilities{}, err
	}
	defer cancel()
	return s.capabilities(ctx)
}

// capabilities asks the server, on a call begun.
func (s *Store) capabilities(ctx context.Context) (Capabilities, error) {
	resp, err := s.c.Capabilities(ctx, &storev1.CapabilitiesRequest{})
	if err != nil {
		return Capabilities{}, s.fail(ctx, "capabilities", -1, err)
	}
	c := Capabilities{Multi: resp.GetMulti(), Reserve: resp.GetReserve(), Reset: resp.GetReset_(), Semaphore: resp.GetSemaphore(), Grant: resp.GetGrant()}
	s.caps.set(c)
	return c, nil
}

// Capabilities are what a serving store supports, besides AllowN.
type Capabilities struct {
	Multi     bool // AllowMulti
	Reserve   bool // Reserve and Return
	Reset     bool // Reset
	Semaphore bool // Acquire, Release and Extend
	Grant     bool // Grant (a server that predates it reports false)
}

// The capabilities a call may need.
const (
	capMulti = iota
	capReserve
	capReset
	capSemaphore
	capGrant
	numCaps
)

// capsTTL is how long an answer of Capabilities is trusted: a server
// restarted over another store is seen within it.
const capsTTL = time.Minute

// capsRetry is how long after a failed Capabilities the server is not
// asked again (each call is made, and its answer tells).
const capsRetry = time.Second

// capCache remembers the server's Capabilities.
type capCache struct {
	mu    sync.Mutex // held while asking, so that one call asks
	state atomic.Pointer[capState]
}

type capState struct {
	has   [numCaps]bool
	until time.Time
}

func (c *capCache) set(cp Capabilities) {
	c.state.Store(&capState{has: [numCaps]bool{cp.Multi, cp.Reserve, cp.Reset, cp.Semaphore, cp.Grant}, until: time.Now().Add(capsTTL)})
}

// lacks records that the server answered that it lacks capability i.
func (c *capCache) lacks(i int) {
	st := &capState{has: allCaps, until: time.Now().Add(capsTTL)}
	if old := c.state.Load(); old != nil {
		*st = *old
	}
	st.has[i] = false
	c.state.Store(st)
}

// sentinels are the errors of the capabilities.
var sentinels = [numCaps]error{sluice.ErrMultiUnsupported, sluice.ErrReserveUnsupported, sluice.ErrResetUnsupported, sluice.ErrSemaphoreUnsupported, sluice.ErrGrantUnsupported}

// allCaps assumes every capability, until the server tells.
var allCaps = [numCaps]bool{true, true, true, true, true}

// need returns the error of capability i when the server lacks it, asking
// the server first when its answer is not known. An old answer is used
// while one call asks again, so that the calls of the same moment do not
// wait for it. When the server cannot be asked, the call goes ahead: its
// own answer tells.
func (s *Store) need(ctx context.Context, i int) error {
	st := s.caps.state.Load()
	switch {
	case st == nil:
		s.caps.mu.Lock()
		if st = s.caps.state.Load(); st == nil {
			st = s.ask(ctx)
		}
		s.caps.mu.Unlock()
	case time.Now().After(st.until) && s.caps.mu.TryLock():
		if st = s.caps.state.Load(); time.Now().After(st.until) {
			st = s.ask(ctx)
		}
		s.caps.mu.Unlock()
	}
	if !st.has[i] {
		return storewire.Unsupported(sentinels[i], s.String())
	}
	return nil
}

// ask asks the server what it supports, with caps.mu held, and returns
// the state to use.
func (s *Store) ask(ctx context.Context) *capState {
	if _, err := s.capabilities(ctx); err != nil {
		// Not asked again for a while: each call's own answer tells, and a
		// server that is down costs one call, not two.
		st := &capState{has: allCaps, until: time.Now().Add(capsRetry)}
		if old := s.caps.state.Load(); old != nil {
			st.has = old.has
		}
		s.caps.state.Store(st)
	}
	return s.caps.state.Load()
}
