package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

// fakeClock is a test clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// testSemaphore checks the contract of concurrency.go on s, whose clock is
// clk, with exact times.
func testSemaphore(t *testing.T, s *Store, clk *fakeClock, key string) {
	ctx := context.Background()
	lim := sluice.ConcurrencyLimit{Max: 2, TTL: time.Second}
	t0 := clk.Now()
	a, err := s.Acquire(ctx, key, lim, "a")
	if err != nil || !a.Acquired || a.Held != 1 || !a.Expires.Equal(t0.Add(time.Second)) || a.RetryAfter != 0 || a.Limit != lim {
		t.Fatalf("Acquire a = %+v, %v; want acquired, held 1, expires %v", a, err, t0.Add(time.Second))
	}
	clk.Add(100 * time.Millisecond)
	b, err := s.Acquire(ctx, key, lim, "b")
	if err != nil || !b.Acquired || b.Held != 2 {
		t.Fatalf("Acquire b = %+v, %v; want acquired, held 2", b, err)
	}
	clk.Add(100 * time.Millisecond)
	c, err := s.Acquire(ctx, key, lim, "c")
	if err != nil || c.Acquired || c.Held != 2 || c.RetryAfter != 800*time.Millisecond || !c.Expires.IsZero() {
		t.Fatalf("Acquire c = %+v, %v; want denied, held 2, RetryAfter 800ms (a's lease)", c, err)
	}
	// A holder present renews and holds one permit, not two.
	a2, err := s.Acquire(ctx, key, lim, "a")
	if err != nil || !a2.Acquired || a2.Held != 2 || !a2.Expires.Equal(clk.Now().Add(time.Second)) {
		t.Fatalf("Acquire a again = %+v, %v; want renewed, held 2", a2, err)
	}
	// Now b's lease ends first: 1.1s - 0.2s.
	c, _ = s.Acquire(ctx, key, lim, "c")
	if c.Acquired || c.RetryAfter != 900*time.Millisecond {
		t.Fatalf("Acquire c after renewal = %+v; want RetryAfter 900ms (b's lease)", c)
	}
	// Extend b; then its lease runs from now.
	clk.Add(100 * time.Millisecond)
	e, err := s.Extend(ctx, key, lim, "b")
	if err != nil || !e.Acquired || e.Held != 2 || !e.Expires.Equal(clk.Now().Add(time.Second)) {
		t.Fatalf("Extend b = %+v, %v", e, err)
	}
	// Release a: a slot frees at once.
	if err := s.Release(ctx, key, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, key, "a"); err != nil {
		t.Fatalf("second Release: %v, want nil", err)
	}
	clk.Add(time.Millisecond)
	c, err = s.Acquire(ctx, key, lim, "c")
	if err != nil || !c.Acquired || c.Held != 2 {
		t.Fatalf("Acquire c after release = %+v, %v", c, err)
	}
	// b's lease ends at exactly now+1s: held 1 µs before, free at it.
	clk.Add(time.Second - time.Millisecond - time.Microsecond)
	if d, _ := s.Acquire(ctx, key, lim, "d"); d.Acquired || d.RetryAfter != time.Microsecond {
		t.Fatalf("Acquire d 1µs before b's lease ends = %+v; want denied, RetryAfter 1µs", d)
	}
	clk.Add(time.Microsecond)
	if d, _ := s.Acquire(ctx, key, lim, "d"); !d.Acquired || d.Held != 2 {
		t.Fatalf("Acquire d at b's lease end = %+v; want acquired, held 2", d)
	}
	// b expired: Extend reports the permit lost and takes none.
	lost, err := s.Extend(ctx, key, lim, "b")
	if !errors.Is(err, sluice.ErrPermitLost) || lost.Acquired || lost.Held != 2 {
		t.Fatalf("Extend of expired b = %+v, %v; want ErrPermitLost, held 2", lost, err)
	}
	if lost, err := s.Extend(ctx, key, sluice.ConcurrencyLimit{Max: 5, TTL: time.Second}, "never"); !errors.Is(err, sluice.ErrPermitLost) || lost.Acquired || lost.Held != 2 || lost.RetryAfter != 0 {
		t.Fatalf("Extend of a holder never seen = %+v, %v", lost, err)
	}
}

func TestSemaphore(t *testing.T) {
	srv := redistest.Server(t)
	for name, s := range stores(t, srv) {
		t.Run(name, func(t *testing.T) {
			clk := &fakeClock{t: time.UnixMicro(1_700_000_000_000_000)}
			s.clock = clk.Now
			testSemaphore(t, s, clk, "sem/"+name)
		})
	}
}

func TestSemaphoreCluster(t *testing.T) {
	cl := redistest.Cluster(t, 3, 0)
	for name, s := range map[string]*Store{
		"rueidis":  NewRueidis(newRueidis(t, cl.Addrs()...)),
		"go-redis": NewGoRedis(newGoRedis(t, true, cl.Addrs()...)),
	} {
		t.Run(name, func(t *testing.T) {
			// Keys on every master.
			for i := range 6 {
				clk := &fakeClock{t: time.UnixMicro(1_700_000_000_000_000)}
				s.clock = clk.Now
				testSemaphore(t, s, clk, name+"/"+strconv.Itoa(i))
			}
		})
	}
}

// TestSemaphoreRedisLayout checks the key's name, members, scores and TTL
// on Redis's own clock: an idle key vanishes when its latest lease ends.
func TestSemaphoreRedisLayout(t *testing.T) {
	srv := redistest.Server(t)
	s := NewRueidis(newRueidis(t, srv.Addr))
	ctx := context.Background()
	key := "tenant{1}%"
	name := s.semKey(key)
	if want := "sluice:{tenant%7B1%7D%25}c"; name != want {
		t.Fatalf("semKey(%q) = %q, want %q", key, name, want)
	}
	if rl := s.redisKey(key, sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Second}); slot(rl) != slot(name) || rl == name {
		t.Fatalf("holders %q and rate state %q: want the same slot, different names", name, rl)
	}
	short := sluice.ConcurrencyLimit{Max: 3, TTL: 200 * time.Millisecond}
	long := sluice.ConcurrencyLimit{Max: 3, TTL: 2 * time.Second}
	a, err := s.Acquire(ctx, key, short, "a")
	if err != nil || !a.Acquired {
		t.Fatal(a, err)
	}
	b, err := s.Acquire(ctx, key, long, "b")
	if err != nil || !b.Acquired {
		t.Fatal(b, err)
	}
	if got := srv.MustDo("ZSCORE", name, "b"); got != strconv.FormatInt(b.Expires.UnixMicro(), 10) {
		t.Fatalf("ZSCORE b = %s, want %d", got, b.Expires.UnixMicro())
	}
	checkExpiry(t, srv, name, b.Expires, b.Expires, "the latest lease, b's")
	if err := s.Release(ctx, key, "b"); err != nil {
		t.Fatal(err)
	}
	checkExpiry(t, srv, name, a.Expires, a.Expires, "after releasing b, a's lease")
	time.Sleep(time.Until(a.Expires) + 50*time.Millisecond)
	if got := srv.MustDo("EXISTS", name); got != "0" {
		t.Fatalf("EXISTS %s after the last lease = %s, want 0", name, got)
	}
}

func TestSemaphoreInvalid(t *testing.T) {
	srv := redistest.Server(t)
	s := NewRueidis(newRueidis(t, srv.Addr))
	ctx := context.Background()
	ok := sluice.ConcurrencyLimit{Max: 1, TTL: time.Second}
	long := string(make([]byte, sluice.MaxHolderLen+1))
	for _, tc := range []struct {
		name, key, holder, field string
		lim                      sluice.ConcurrencyLimit
	}{
		{"key", "", "h", "Key", ok},
		{"holder empty", "k", "", "Holder", ok},
		{"holder long", "k", long, "Holder", ok},
		{"max 0", "k", "h", "Max", sluice.ConcurrencyLimit{Max: 0, TTL: time.Second}},
		{"max big", "k", "h", "Max", sluice.ConcurrencyLimit{Max: sluice.MaxPermits + 1, TTL: time.Second}},
		{"lease", "k", "h", "TTL", sluice.ConcurrencyLimit{Max: 1, TTL: time.Millisecond}},
		{"lease µs", "k", "h", "TTL", sluice.ConcurrencyLimit{Max: 1, TTL: time.Second + time.Microsecond}},
	} {
		for op, call := range map[string]func() error{
			"acquire": func() error { _, err := s.Acquire(ctx, tc.key, tc.lim, tc.holder); return err },
			"extend":  func() error { _, err := s.Extend(ctx, tc.key, tc.lim, tc.holder); return err },
			"release": func() error { return s.Release(ctx, tc.key, tc.holder) },
		} {
			err := call()
			if op == "release" && (tc.field == "Max" || tc.field == "TTL") {
				if err != nil {
					t.Errorf("%s %s: %v, want nil (Release takes no limit)", op, tc.name, err)
				}
				continue
			}
			var le *sluice.LimitError
			if !errors.As(err, &le) || le.Field != tc.field {
				t.Errorf("%s %s: %v, want a *LimitError on %s", op, tc.name, err, tc.field)
			}
		}
	}
	if n := srv.MustDo("DBSIZE"); n != "1" && n != "0" {
		t.Errorf("DBSIZE = %s after invalid calls, want only the valid release's nothing", n)
	}
	s.Close()
	if _, err := s.Acquire(ctx, "k", ok, "h"); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("Acquire after Close: %v, want ErrClosed", err)
	}
}

// TestSemaphoreExpiredTogether: on a key whose 10,000 holders' leases ended
// together, of which a call removes only a few, the expired hold nothing:
// the holders are counted, denied and waited for as if they were gone,
// Extend finds one lost, and the ZSET never grows past the key's largest
// Max.
func TestSemaphoreExpiredTogether(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	c := newRueidis(t, srv.Addr)
	clk := &fakeClock{t: time.UnixMicro(1_800_000_000_000_000)}
	s := NewRueidis(c, WithTestClock(clk.Now))
	expiredHolders(t, c, s.semKey("pile"), sluice.MaxPermits, clk.Now())
	lim := sluice.ConcurrencyLimit{Max: 3, Lease: time.Second}
	for i, h := range []string{"a", "b", "c"} {
		clk.Add(time.Millisecond)
		if d, err := s.Acquire(ctx, "pile", lim, h); err != nil || !d.Acquired || d.Held != i+1 {
			t.Fatalf("Acquire %s = %+v, %v; want acquired, held %d", h, d, err, i+1)
		}
	}
	if d, err := s.Acquire(ctx, "pile", lim, "d"); err != nil || d.Acquired || d.Held != 3 || d.RetryAfter != time.Second-2*time.Millisecond {
		t.Errorf("Acquire d = %+v, %v; want denied, held 3, retry after %v (a's lease)", d, err, time.Second-2*time.Millisecond)
	}
	// The last of the expired holders in the ZSET's order, still there:
	// calls remove the first ones.
	old := fmt.Sprintf("holder-%0*d", sluice.MaxHolderLen-len("holder-"), sluice.MaxPermits-1)
	if srv.MustDo("ZSCORE", s.semKey("pile"), old) == "" {
		t.Fatalf("holder %s was removed: the test does not see an expired holder that is present", old)
	}
	if _, err := s.Extend(ctx, "pile", lim, old); !errors.Is(err, sluice.ErrPermitLost) {
		t.Errorf("Extend of an expired holder = %v, want ErrPermitLost", err)
	}
	if err := s.Release(ctx, "pile", "b"); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Acquire(ctx, "pile", lim, old); err != nil || !d.Acquired || d.Held != 3 {
		t.Errorf("Acquire by an expired holder after a release = %+v, %v; want acquired, held 3", d, err)
	}
	card, err := strconv.Atoi(srv.MustDo("ZCARD", s.semKey("pile")))
	if want := sluice.MaxPermits - 7*16 + 3 - 1; err != nil || card != want {
		t.Errorf("ZCARD = %d, %v; want %d: 16 expired holders removed by each of the 7 calls, 3 added, 1 released, 1 renewed in place", card, err, want)
	}
	// However many calls come, the set shrinks to its live holders.
	for range sluice.MaxPermits / 16 {
		if _, err := s.Acquire(ctx, "pile", lim, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if card, _ := strconv.Atoi(srv.MustDo("ZCARD", s.semKey("pile"))); card != 3 {
		t.Errorf("ZCARD after %d calls more = %d, want the 3 live holders", sluice.MaxPermits/16, card)
	}
}
