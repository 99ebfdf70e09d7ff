package remotestore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/remotestore"
	"github.com/sluicehq/sluice/service/storeapi"
	"github.com/sluicehq/sluice/sluicetest"
)

var ctx = context.Background()

// TestErrorsExact: every invalid request gets, through the wire, the error
// the store gives when called directly: the same *sluice.LimitError (Field,
// Reason, sentinel), and the same text when the server answered (a key,
// a holder and the size of an AllowMulti are checked before anything is
// sent, and their error does not say which request or call it was).
func TestErrorsExact(t *testing.T) {
	direct := newMem(t)
	rs := dial(t, serve(t, newMem(t)))
	gcra := sluice.PerSecond(10)
	tests := []struct {
		name string
		key  string
		lim  sluice.Limit
		n    int
	}{
		{"rate", "k", sluice.Limit{Algorithm: sluice.GCRA, Period: time.Second}, 1},
		{"unset algorithm", "k", sluice.Limit{Rate: 1, Period: time.Second}, 1},
		{"unknown algorithm", "k", sluice.Limit{Algorithm: 99, Rate: 1, Period: time.Second}, 1},
		{"period", "k", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: 1500 * time.Nanosecond}, 1},
		{"burst", "k", gcra.WithBurst(-1), 1},
		{"failure mode", "k", gcra.WithFailureMode(9), 1},
		{"counting", "k", gcra.WithCounting(7), 1},
		{"sliding log counting all", "k", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: time.Second, Counting: sluice.CountAll}, 1},
		{"bounds", "k", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1 << 53, Period: time.Second}, 1},
		{"negative n", "k", gcra, -1},
		{"n over capacity", "k", gcra, 11},
		{"charge over MaxCharge", "k", gcra.WithCounting(sluice.CountAll), sluice.MaxCharge + 1},
		{"empty key", "", gcra, 1},
		{"long key", strings.Repeat("k", sluice.MaxKeyLen+1), gcra, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, want := direct.AllowN(ctx, tt.key, tt.lim, tt.n)
			_, got := rs.AllowN(ctx, tt.key, tt.lim, tt.n)
			checkSameError(t, "AllowN", got, want)
			_, _, want = direct.Reserve(ctx, tt.key, tt.lim, tt.n)
			_, _, got = rs.Reserve(ctx, tt.key, tt.lim, tt.n)
			checkSameError(t, "Reserve", got, want)
			_, want = direct.AllowMulti(ctx, []sluice.Request{{Key: "other", Limit: gcra, N: 1}, {Key: tt.key, Limit: tt.lim, N: tt.n}})
			_, got = rs.AllowMulti(ctx, []sluice.Request{{Key: "other", Limit: gcra, N: 1}, {Key: tt.key, Limit: tt.lim, N: tt.n}})
			checkSameError(t, "AllowMulti", got, want)
		})
	}
	// The size of an AllowMulti, and permits.
	big := make([]sluice.Request, sluice.MaxMultiRequests+1)
	for i := range big {
		big[i] = sluice.Request{Key: fmt.Sprint(i), Limit: gcra, N: 1}
	}
	_, want := direct.AllowMulti(ctx, big)
	_, got := rs.AllowMulti(ctx, big)
	checkSameError(t, "AllowMulti(17 requests)", got, want)
	for _, lim := range []sluice.ConcurrencyLimit{{Max: 0, TTL: time.Second}, {Max: 1, TTL: time.Millisecond}, {Max: 1, TTL: 1500 * time.Microsecond}} {
		_, want := direct.Acquire(ctx, "k", lim, "h")
		_, got := rs.Acquire(ctx, "k", lim, "h")
		checkSameError(t, fmt.Sprintf("Acquire(%v)", lim), got, want)
	}
	_, want = direct.Acquire(ctx, "k", sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}, strings.Repeat("h", sluice.MaxHolderLen+1))
	_, got = rs.Acquire(ctx, "k", sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}, strings.Repeat("h", sluice.MaxHolderLen+1))
	checkSameError(t, "Acquire(long holder)", got, want)
}

func checkSameError(t *testing.T, op string, got, want error) {
	t.Helper()
	if want == nil {
		t.Fatalf("%s: the memory store accepted the request; the case is wrong", op)
	}
	var gl, wl *sluice.LimitError
	if !errors.As(want, &wl) {
		t.Fatalf("%s: the memory store's error %v is not a *LimitError", op, want)
	}
	if !errors.As(got, &gl) {
		t.Fatalf("%s = %v (%T), want the *LimitError %v", op, got, got, want)
	}
	local := gl.Field == "Key" || gl.Field == "Holder" || gl.Field == "Requests"
	if gl.Field != wl.Field || gl.Reason != wl.Reason || gl.Unwrap() != wl.Unwrap() || (!local && got.Error() != want.Error()) {
		t.Errorf("%s = %+v (%v), want %+v (%v)", op, gl, got, wl, want)
	}
}

// TestDecisionsExact: decisions (Remaining, RetryAfter, ResetAfter, the
// reservation's time) are those of the served store, field for field, on
// a fake clock.
func TestDecisionsExact(t *testing.T) {
	c := sluicetest.NewClock(sluicetest.Epoch())
	direct := newMem(t, memstore.WithClock(c.Now))
	rs := dial(t, serve(t, newMem(t, memstore.WithClock(c.Now))))
	lims := []sluice.Limit{
		{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Second},
		{Algorithm: sluice.SlidingLog, Rate: 3, Period: time.Second},
		{Algorithm: sluice.SlidingWindow, Rate: 3, Period: time.Second},
		{Algorithm: sluice.TokenBucket, Rate: 3, Period: time.Second, Burst: 5},
		{Algorithm: sluice.GCRA, Rate: 3, Period: 7 * time.Millisecond, Burst: 2, Counting: sluice.CountAll},
	}
	for step := range 12 {
		for i, lim := range lims {
			key := fmt.Sprint("k", i)
			n := step % 3
			dw, werr := direct.AllowN(ctx, key, lim, n)
			dg, gerr := rs.AllowN(ctx, key, lim, n)
			if diff := cmp.Diff(dw, dg); diff != "" || (werr == nil) != (gerr == nil) {
				t.Fatalf("step %d: AllowN(%q, %v, %d) = %+v, %v; the store gives %+v, %v (-store +remote):\n%s", step, key, lim, n, dg, gerr, dw, werr, diff)
			}
			rw, atw, _ := direct.Reserve(ctx, "r"+key, lim, 1)
			rg, atg, _ := rs.Reserve(ctx, "r"+key, lim, 1)
			if rw != rg || !atw.Equal(atg) {
				t.Fatalf("step %d: Reserve = %+v at %v; the store gives %+v at %v", step, rg, atg, rw, atw)
			}
			if step%4 == 3 {
				if err := rs.Return(ctx, "r"+key, lim, 1, atg); err != nil {
					t.Fatal(err)
				}
				direct.Return(ctx, "r"+key, lim, 1, atw)
			}
		}
		c.Advance(time.Duration(step*97) * time.Millisecond / 7)
	}
}

// plain is a store with AllowN alone; calls counts the calls of the
// store API that reach the server.
type plain struct{ s *memstore.Store }

func (p plain) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	return p.s.AllowN(ctx, key, lim, n)
}

// countCalls is a server option that counts the calls by method.
func countCalls(calls *callCounts) grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		calls.add(info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:])
		return h(ctx, req)
	})
}

type callCounts struct{ multi, reserve, reset, sem, caps, allow atomic.Int64 }

func (m *callCounts) add(method string) {
	switch method {
	case "AllowMulti":
		m.multi.Add(1)
	case "Reserve", "Return":
		m.reserve.Add(1)
	case "Reset":
		m.reset.Add(1)
	case "Acquire", "Release", "Extend":
		m.sem.Add(1)
	case "Capabilities":
		m.caps.Add(1)
	case "AllowN":
		m.allow.Add(1)
	}
}

// TestUnsupported: a store with AllowN alone is served as such. The
// client asks once what it supports, then reports each capability it
// lacks with the capability's sentinel, without a call; and the suite
// skips those cases.
func TestUnsupported(t *testing.T) {
	srv, err := storeapi.New(plain{newMem(t)})
	if err != nil {
		t.Fatal(err)
	}
	var calls callCounts
	rs := dial(t, serveOn(t, srv, grpc.NewServer(append(srv.ServerOptions(), countCalls(&calls))...)))
	caps, err := rs.Capabilities(ctx)
	if err != nil || caps != (remotestore.Capabilities{}) {
		t.Fatalf("Capabilities = %+v, %v; want none", caps, err)
	}
	lim := sluice.PerSecond(1)
	for range 3 {
		if _, err := rs.AllowMulti(ctx, []sluice.Request{{Key: "k", Limit: lim, N: 1}}); !errors.Is(err, sluice.ErrMultiUnsupported) {
			t.Errorf("AllowMulti = %v, want ErrMultiUnsupported", err)
		}
		if _, _, err := rs.Reserve(ctx, "k", lim, 1); !errors.Is(err, sluice.ErrReserveUnsupported) {
			t.Errorf("Reserve = %v, want ErrReserveUnsupported", err)
		}
		if err := rs.Return(ctx, "k", lim, 1, time.Time{}); !errors.Is(err, sluice.ErrReserveUnsupported) {
			t.Errorf("Return = %v, want ErrReserveUnsupported", err)
		}
		if err := rs.Reset(ctx, "k", lim); !errors.Is(err, sluice.ErrResetUnsupported) {
			t.Errorf("Reset = %v, want ErrResetUnsupported", err)
		}
		if _, err := rs.Acquire(ctx, "k", sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}, "h"); !errors.Is(err, sluice.ErrSemaphoreUnsupported) {
			t.Errorf("Acquire = %v, want ErrSemaphoreUnsupported", err)
		}
		if err := rs.Release(ctx, "k", "h"); !errors.Is(err, sluice.ErrSemaphoreUnsupported) {
			t.Errorf("Release = %v, want ErrSemaphoreUnsupported", err)
		}
		if _, err := rs.Extend(ctx, "k", sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}, "h"); !errors.Is(err, sluice.ErrSemaphoreUnsupported) {
			t.Errorf("Extend = %v, want ErrSemaphoreUnsupported", err)
		}
	}
	if n := calls.multi.Load() + calls.reserve.Load() + calls.reset.Load() + calls.sem.Load(); n != 0 || calls.caps.Load() != 1 {
		t.Errorf("%d calls of unsupported methods and %d of Capabilities reached the server; want 0 and 1", n, calls.caps.Load())
	}
	if d, err := rs.AllowN(ctx, "k", lim, 1); err != nil || !d.Allowed {
		t.Errorf("AllowN = %+v, %v", d, err)
	}

	// Without asking first: the first call of each capability learns it
	// from the server's answer.
	rs2, err := remotestore.New(mustConn(t, serve(t, plain{newMem(t)})))
	if err != nil {
		t.Fatal(err)
	}
	if err := rs2.Reset(ctx, "k", lim); !errors.Is(err, sluice.ErrResetUnsupported) {
		t.Errorf("Reset = %v, want ErrResetUnsupported", err)
	}

	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		return dial(t, serve(t, plain{newMem(t)}))
	}, sluicetest.WithClock(func(t *testing.T, c *sluicetest.Clock) sluice.Store {
		return dial(t, serve(t, plain{newMem(t, memstore.WithClock(c.Now))}))
	}))
}

// TestFailover: behind failover, a server that does not answer is a
// failure of the store (degraded decisions by the limit's failure mode,
// the breaker opens), while an invalid request is the caller's error and
// no failure.
func TestFailover(t *testing.T) {
	srv, err := storeapi.New(newMem(t))
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(srv.ServerOptions()...)
	rs := dial(t, serveOn(t, srv, g))
	fs, err := failover.New(rs, failover.WithTimeout(5*time.Second), failover.WithFailureThreshold(2), failover.WithReplicas(1))
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	lim := sluice.PerSecond(5)
	if d, err := fs.AllowN(ctx, "k", lim, 1); err != nil || !d.Allowed || d.Degraded {
		t.Fatalf("AllowN = %+v, %v; want admitted by the server", d, err)
	}
	for range 5 {
		_, err := fs.AllowN(ctx, "k", sluice.Limit{Algorithm: sluice.GCRA, Period: time.Second}, 1)
		var le *sluice.LimitError
		if !errors.As(err, &le) || le.Field != "Rate" {
			t.Fatalf("AllowN(Rate 0) = %v, want a *LimitError on Rate", err)
		}
	}
	if st := fs.Stats(); st.SharedErrors != 0 || !fs.Ready() {
		t.Fatalf("after invalid requests: %+v, ready %v; want no failure counted", st, fs.Ready())
	}
	g.Stop() // the server goes away
	for i := range 3 {
		d, err := fs.AllowN(ctx, "k", lim.WithFailureMode(sluice.FailClosed), 1)
		if err != nil || d.Allowed || !d.Degraded {
			t.Fatalf("call %d with the server down: AllowN(fail closed) = %+v, %v; want a degraded denial", i, d, err)
		}
	}
	if d, err := fs.AllowN(ctx, "k", lim.WithFailureMode(sluice.FailOpen), 1); err != nil || !d.Allowed || !d.Degraded {
		t.Fatalf("AllowN(fail open) = %+v, %v; want a degraded admission", d, err)
	}
	if fs.Ready() || fs.Stats().SharedErrors == 0 {
		t.Errorf("the breaker is closed after the server went away: %+v", fs.Stats())
	}
}

// TestServedDegraded: what the serving store's failover decides while its
// own shared store is down travels as it is: Degraded, and each limit's
// failure mode decides.
func TestServedDegraded(t *testing.T) {
	down := &downStore{}
	fs, err := failover.New(down, failover.WithReplicas(2), failover.WithFailureThreshold(1))
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	rs := dial(t, serve(t, fs))
	lim := sluice.PerSecond(4)
	d, err := rs.AllowN(ctx, "k", lim.WithFailureMode(sluice.FailClosed), 1)
	if err != nil || d.Allowed || !d.Degraded || d.Limit != lim.WithFailureMode(sluice.FailClosed) {
		t.Errorf("fail closed: %+v, %v; want a degraded denial", d, err)
	}
	for i := range 3 { // a local share of 4/2
		d, err := rs.AllowN(ctx, "open", lim.WithFailureMode(sluice.FailOpen), 1)
		if err != nil || d.Allowed != (i < 2) || !d.Degraded {
			t.Errorf("fail open, call %d: %+v, %v; want degraded, admitted by the share of 2", i, d, err)
		}
	}
	d, at, err := rs.Reserve(ctx, "k", lim, 1)
	if err != nil || d.Allowed || !d.Degraded || !at.IsZero() {
		t.Errorf("Reserve = %+v at %v, %v; want a degraded answer, nothing reserved", d, at, err)
	}
	// failover's Extend while its store is down: a degraded decision and
	// an error, both.
	pd, err := rs.Extend(ctx, "k", sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}, "h")
	if err == nil || !pd.Degraded || errors.Is(err, sluice.ErrPermitLost) {
		t.Errorf("Extend = %+v, %v; want a degraded decision with an error", pd, err)
	}
}

// downStore is a shared store that never answers.
type downStore struct{ sluice.Unsupported }

var errDown = errors.New("connection refused")

func (*downStore) AllowN(context.Context, string, sluice.Limit, int) (sluice.Decision, error) {
	return sluice.Decision{}, errDown
}

func (*downStore) Reserve(context.Context, string, sluice.Limit, int) (sluice.Decision, time.Time, error) {
	return sluice.Decision{}, time.Time{}, errDown
}

func (*downStore) Extend(context.Context, string, sluice.ConcurrencyLimit, string) (sluice.PermitDecision, error) {
	return sluice.PermitDecision{}, errDown
}

func (*downStore) Acquire(context.Context, string, sluice.ConcurrencyLimit, string) (sluice.PermitDecision, error) {
	return sluice.PermitDecision{}, errDown
}

// TestPermitLost: an Extend of a permit no longer held is a decision and
// ErrPermitLost.
func TestPermitLost(t *testing.T) {
	c := sluicetest.NewClock(sluicetest.Epoch())
	rs := dial(t, serve(t, newMem(t, memstore.WithClock(c.Now))))
	lim := sluice.ConcurrencyLimit{Max: 2, TTL: time.Second}
	d, err := rs.Acquire(ctx, "k", lim, "h")
	if err != nil || !d.Acquired || !d.Expires.Equal(sluicetest.Epoch().Add(time.Second)) {
		t.Fatalf("Acquire = %+v, %v", d, err)
	}
	c.Advance(time.Second)
	d, err = rs.Extend(ctx, "k", lim, "h")
	if !errors.Is(err, sluice.ErrPermitLost) || d.Acquired || d.Limit != lim {
		t.Errorf("Extend after the TTL = %+v, %v; want ErrPermitLost", d, err)
	}
	// The deprecated Lease travels as the TTL.
	d, err = rs.Acquire(ctx, "k", sluice.ConcurrencyLimit{Max: 2, Lease: 3 * time.Second}, "h")
	if err != nil || !d.Acquired || d.Limit != (sluice.ConcurrencyLimit{Max: 2, TTL: 3 * time.Second}) {
		t.Errorf("Acquire(Lease 3s) = %+v, %v", d, err)
	}
}

// TestTimeout: WithTimeout bounds a call; its end is a failure of the
// store (an error wrapping context.DeadlineExceeded), and a closed Store
// answers ErrClosed.
func TestTimeout(t *testing.T) {
	block := &blockingStore{release: make(chan struct{})}
	defer close(block.release)
	rs := dial(t, serve(t, block), remotestore.WithTimeout(50*time.Millisecond))
	_, err := rs.AllowN(ctx, "k", sluice.PerSecond(1), 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AllowN of a store that never answers = %v, want DeadlineExceeded", err)
	}
	rs.Close()
	if _, err := rs.AllowN(ctx, "k", sluice.PerSecond(1), 1); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("AllowN after Close = %v, want ErrClosed", err)
	}
	if _, err := remotestore.Dial("127.0.0.1:1", remotestore.WithTimeout(0)); err == nil {
		t.Error("WithTimeout(0): no error")
	}
}

// pastDeadline is a context whose deadline has passed by the clock while
// its timer has not yet cancelled it, as on a busy machine.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// TestTimeoutAnsweredFirst: a call whose deadline has passed failed by its
// deadline, even when the serving side, which ended the call at the same
// deadline, answered before this side's timer cancelled the context (seen
// at load 8: "Unavailable desc = released, want DeadlineExceeded"); an
// answer before the deadline keeps its own error.
func TestTimeoutAnsweredFirst(t *testing.T) {
	rs := dial(t, serve(t, &blockingStore{release: make(chan struct{})}))
	answer := status.Error(codes.Unavailable, "released")
	if err := remotestore.Fail(rs, pastDeadline{context.Background()}, "allow", answer); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an answer after the deadline = %v, want DeadlineExceeded", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := remotestore.Fail(rs, ctx, "allow", answer); err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "released") {
		t.Errorf("an answer before the deadline = %v, want the store's failure, released", err)
	}
}

// blockingStore answers nothing until released or the call's context
// ends.
type blockingStore struct{ release chan struct{} }

func (b *blockingStore) AllowN(ctx context.Context, _ string, _ sluice.Limit, _ int) (sluice.Decision, error) {
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return sluice.Decision{}, errors.New("released")
}
