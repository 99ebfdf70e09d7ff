package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/stack"
)

// connectBound bounds the wait for a Later to reach a server that is up:
// its attempts are at most redisstore.LaterRetryMax apart, and the bound
// is generous so that a starved machine cannot fail the test.
const connectBound = time.Minute

// waitConnected waits until l has reached Redis.
func waitConnected(t *testing.T, l *redisstore.Later) {
	t.Helper()
	select {
	case <-l.Connected():
	case <-time.After(connectBound):
		t.Fatalf("the Later did not reach the running Redis within %v", connectBound)
	}
}

// A Later started while nothing listens fails every call with
// ErrNotConnected, at once; once a redis-server comes up on its address, it
// passes every call through: rate limits, AllowMulti, Reserve and Return,
// Reset, the concurrency limits. Close closes the store it opened.
func TestLaterConnectsWhenRedisComesUp(t *testing.T) {
	port := redistest.FreePort(t)
	l, err := redisstore.OpenLater("redis://127.0.0.1:" + strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Hour}
	sem := sluice.ConcurrencyLimit{Max: 1, TTL: time.Minute}

	calls := []struct {
		name string
		call func() error
	}{
		{"AllowN", func() error { _, err := l.AllowN(ctx, "k", lim, 1); return err }},
		{"AllowMulti", func() error {
			_, err := l.AllowMulti(ctx, []sluice.Request{{Key: "k", Limit: lim, N: 1}})
			return err
		}},
		{"Reserve", func() error { _, _, err := l.Reserve(ctx, "k", lim, 1); return err }},
		{"Return", func() error { return l.Return(ctx, "k", lim, 1, time.Time{}) }},
		{"Reset", func() error { return l.Reset(ctx, "k", lim) }},
		{"Acquire", func() error { _, err := l.Acquire(ctx, "p", sem, "h"); return err }},
		{"Extend", func() error { _, err := l.Extend(ctx, "p", sem, "h"); return err }},
		{"Release", func() error { return l.Release(ctx, "p", "h") }},
		{"Grant", func() error {
			_, err := l.Grant(ctx, "g", lim, sluice.GrantRequest{Holder: "eu", N: 1, TTL: time.Second})
			return err
		}},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, redisstore.ErrNotConnected) {
			t.Errorf("%s before Redis is up = %v, want ErrNotConnected", c.name, err)
		}
	}
	if l.Store() != nil {
		t.Error("Store() before Redis is up is not nil")
	}

	srv := redistest.ServerOnPort(t, port)
	waitConnected(t, l)

	d, err := l.AllowN(ctx, "k", lim, 2)
	if err != nil || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("AllowN once connected = %+v, %v; want allowed, 1 remaining", d, err)
	}
	if n, _ := strconv.Atoi(srv.MustDo("DBSIZE")); n != 1 {
		t.Errorf("DBSIZE = %d once connected, want the decision's key", n)
	}
	ds, err := l.AllowMulti(ctx, []sluice.Request{{Key: "k", Limit: lim, N: 1}, {Key: "k2", Limit: lim, N: 3}})
	if err != nil || !ds[0].Allowed || !ds[1].Allowed {
		t.Fatalf("AllowMulti once connected = %+v, %v; want both allowed", ds, err)
	}
	if err := l.Reset(ctx, "k", lim); err != nil {
		t.Fatal(err)
	}
	d, at, err := l.Reserve(ctx, "k", lim, 3)
	if err != nil || !d.Allowed || at.IsZero() {
		t.Fatalf("Reserve once connected = %+v, %v, %v; want allowed at Redis's time", d, at, err)
	}
	if err := l.Return(ctx, "k", lim, 2, at); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.AllowN(ctx, "k", lim, 0); d.Remaining != 2 {
		t.Errorf("peek after reserving 3 and returning 2 = %+v, want 2 remaining", d)
	}
	pd, err := l.Acquire(ctx, "p", sem, "h")
	if err != nil || !pd.Acquired {
		t.Fatalf("Acquire once connected = %+v, %v", pd, err)
	}
	if pd, err := l.Acquire(ctx, "p", sem, "other"); err != nil || pd.Acquired {
		t.Fatalf("second Acquire under Max 1 = %+v, %v; want denied", pd, err)
	}
	if pd, err := l.Extend(ctx, "p", sem, "h"); err != nil || !pd.Acquired {
		t.Fatalf("Extend once connected = %+v, %v", pd, err)
	}
	if err := l.Release(ctx, "p", "h"); err != nil {
		t.Fatal(err)
	}
	if g, err := l.Grant(ctx, "g", lim, sluice.GrantRequest{Holder: "eu", N: 2, Demand: 3, TTL: time.Second}); err != nil || g.Units != 2 {
		t.Fatalf("Grant once connected = %+v, %v; want 2 units", g, err)
	}
	if l.Freed("p") != nil {
		t.Error("Freed is not nil: Redis cannot tell")
	}

	rs := l.Store()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(ctx, "k", lim, 1); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("AllowN after Close = %v, want ErrClosed", err)
	}
	if _, err := rs.AllowN(ctx, "k", lim, 1); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("the connected Store after Close = %v, want ErrClosed: Close closes it", err)
	}
}

// A mistake in the URL or the options is an error of OpenLater, never a
// connection retried for ever.
func TestOpenLaterChecksTheURL(t *testing.T) {
	for _, url := range []string{"localhost:6379", "http://localhost:6379", "redis+tube://localhost:6379"} {
		if l, err := redisstore.OpenLater(url); err == nil {
			l.Close()
			t.Errorf("OpenLater(%q) = nil error, want the URL's mistake", url)
		}
	}
	if l, err := redisstore.OpenLater("redis://localhost:6379", redisstore.WithTLSConfig(nil)); err == nil {
		l.Close()
		t.Error("OpenLater(WithTLSConfig(nil)) = nil error")
	}
}

// Close before Redis is ever reached stops the attempts and returns; the
// calls after it are ErrClosed, not ErrNotConnected.
func TestLaterCloseBeforeConnect(t *testing.T) {
	l, err := redisstore.OpenLater("redis://127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(context.Background(), "k", sluice.PerSecond(1), 1); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("AllowN after Close = %v, want ErrClosed", err)
	}
	select {
	case <-l.Connected():
		t.Error("Connected after Close before any connection")
	default:
	}
}

// Redis down at start, through the stack as a service runs it: with the
// breaker open from the start (failover.WithStartOpen), decisions follow
// the failure mode; once Redis is up, the breaker closes and Redis
// decides, permits included.
func TestLaterUnderStack(t *testing.T) {
	port := redistest.FreePort(t)
	url := "redis://127.0.0.1:" + strconv.Itoa(port)
	ctx := context.Background()
	rs, err := redisstore.Open(ctx, url)
	if err == nil {
		rs.Close()
		t.Fatal("Open of a port where nothing listens succeeded")
	}
	if !redisstore.Unreachable(err) {
		t.Fatalf("Unreachable(%v) = false, want true", err)
	}
	l, err := redisstore.OpenLater(url)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := stack.New(l, stack.WithFailover(
		failover.WithDefaultMode(sluice.FailClosed),
		failover.WithStartOpen(err),
		failover.WithProbeInterval(20*time.Millisecond),
		failover.WithTimeout(10*time.Second),
	), stack.WithTiered())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 5, Period: time.Hour}
	if d, err := st.AllowN(ctx, "k", lim, 1); err != nil || d.Allowed || !d.Degraded {
		t.Fatalf("AllowN with Redis down = %+v, %v; want a degraded denial (fail closed)", d, err)
	}
	if st.Ready() {
		t.Fatal("Ready with Redis down at start")
	}

	redistest.ServerOnPort(t, port)
	waitConnected(t, l)
	deadline := time.Now().Add(connectBound)
	for !st.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("breaker still open %v after Redis came up", connectBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	d, err := st.AllowN(ctx, "k", lim, 1)
	if err != nil || !d.Allowed || d.Degraded || d.Remaining != 4 {
		t.Fatalf("AllowN once Redis is up = %+v, %v; want Redis's decision, 4 remaining", d, err)
	}
	pd, err := st.Acquire(ctx, "p", sluice.ConcurrencyLimit{Max: 1, TTL: time.Minute}, "h")
	if err != nil || !pd.Acquired || pd.Degraded {
		t.Fatalf("Acquire once Redis is up = %+v, %v; want Redis's permit", pd, err)
	}
}
