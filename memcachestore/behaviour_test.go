package memcachestore_test

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/memcachedtest"
	"github.com/sluicehq/sluice/memcachestore"
	"github.com/sluicehq/sluice/sluicetest"
)

var ctx = context.Background()

func allow(t *testing.T, s sluice.Store, key string, lim sluice.Limit, n int) sluice.Decision {
	t.Helper()
	d, err := s.AllowN(ctx, key, lim, n)
	if err != nil {
		t.Fatalf("AllowN(%q, %v, %d): %v", key, lim, n, err)
	}
	return d
}

// value returns the value of item name on m ("" when absent).
func value(t *testing.T, m *memcachedtest.Instance, name string) string {
	t.Helper()
	r := m.MustDo("get " + name)
	if r == "END" {
		return ""
	}
	lines := strings.Split(r, "\n")
	if len(lines) != 3 {
		t.Fatalf("get %s = %q", name, r)
	}
	return strings.TrimRight(lines[1], " ")
}

// exp returns the seconds item name has left on m (meta get's t flag),
// -1 for no expiry.
func exp(t *testing.T, m *memcachedtest.Instance, name string) int {
	t.Helper()
	r := m.MustDo("mg " + name + " t")
	for _, f := range strings.Fields(r)[1:] {
		if v, ok := strings.CutPrefix(f, "t"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("mg %s t = %q", name, r)
			}
			return n
		}
	}
	t.Fatalf("mg %s t = %q: no TTL", name, r)
	return 0
}

// TestItems: the states are the items and values the package
// documentation describes, with the lifetimes it describes.
func TestItems(t *testing.T) {
	m := memcachedtest.Server(t)
	c := sluicetest.NewClock(time.Date(2026, 12, 1, 0, 0, 30, 0, time.UTC))
	s := open(t, memcachestore.Options{Clock: c.Now}, m.Addr)
	ws := c.Now().Truncate(time.Minute).Unix() / 60
	perMinute := sluice.Limit{Rate: 10, Period: time.Minute}

	allow(t, s, "k", perMinute.With(sluice.FixedWindow), 3)
	fw := "sluice:k:F1o." + strconv.FormatInt(ws, 36)
	if v := value(t, m, fw); v != "3" {
		t.Errorf("fixed window item %s = %q, want 3", fw, v)
	}
	// 30s left in the window, plus 1s and the clock skew (1s).
	if e := exp(t, m, fw); e < 31 || e > 32 {
		t.Errorf("fixed window item expires in %ds, want 31 to 32", e)
	}
	allow(t, s, "k", perMinute.With(sluice.FixedWindow).WithCounting(sluice.CountAll), 20)
	if v := value(t, m, fw); v != "23" {
		t.Errorf("fixed window item after a charge of 20 = %q, want 23 (one count for both countings)", v)
	}

	allow(t, s, "k", perMinute.With(sluice.SlidingWindow), 2)
	sw := "sluice:k:S1o"
	want := fmt.Sprintf("%d:0:2", ws*60_000_000)
	if v := value(t, m, sw); v != want {
		t.Errorf("sliding window item = %q, want %q", v, want)
	}
	if e := exp(t, m, sw); e < 91 || e > 92 { // the window's end + a period, + 2s
		t.Errorf("sliding window item expires in %ds, want 91 to 92", e)
	}

	allow(t, s, "k", perMinute.With(sluice.GCRA), 4) // T = 6s: TAT = now + 24s
	want = strconv.FormatInt(c.Now().Add(24*time.Second).UnixMicro(), 10)
	if v := value(t, m, "sluice:k:G1o"); v != want {
		t.Errorf("GCRA item = %q, want %q", v, want)
	}
	rate7 := sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 7, Period: time.Second}
	allow(t, s, "k", rate7, 1) // 1/7 s: a fraction of a µs
	want = fmt.Sprintf("%d:1", c.Now().Add(142857*time.Microsecond).UnixMicro())
	if v := value(t, m, "sluice:k:B1"); v != want {
		t.Errorf("token bucket item = %q, want %q", v, want)
	}
	// A denial and a peek write nothing.
	before := value(t, m, "sluice:k:G1o")
	allow(t, s, "k", perMinute.With(sluice.GCRA), 0)
	if d := allow(t, s, "k", perMinute.With(sluice.GCRA), 10); d.Allowed {
		t.Fatalf("AllowN(10) with 6 left = %+v, want denied", d)
	}
	if v := value(t, m, "sluice:k:G1o"); v != before {
		t.Errorf("GCRA item after a peek and a denial = %q, want %q unchanged", v, before)
	}
	if err := s.Reset(ctx, "k", perMinute.With(sluice.GCRA)); err != nil {
		t.Fatal(err)
	}
	if v := value(t, m, "sluice:k:G1o"); v != "" {
		t.Errorf("GCRA item after Reset = %q, want none", v)
	}
}

// TestReferenceKeysShareCount: with ReferenceKeys, a fixed window counts
// on the item envoyproxy/ratelimit writes (its name, its decimal count),
// so that counts carry over between the two.
func TestReferenceKeysShareCount(t *testing.T) {
	m := memcachedtest.Server(t)
	// The store's clock stands still in the middle of an hour, so that
	// no window ends while the test runs (memcached's item lifetimes
	// still count on the real clock, hours from their end).
	now := time.Now().Truncate(time.Hour).Add(30 * time.Minute)
	s := openClock(t, func() time.Time { return now }, memcachestore.Options{ReferenceKeys: true}, m.Addr)
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour, Counting: sluice.CountAll}
	key := "ratelimit_dom_k1_v1_"
	start := now.Truncate(time.Hour).Unix()
	name := key + strconv.FormatInt(start, 10) // the reference's: "ratelimit_dom_k1_v1_1764979200"
	// What the reference does for 4 hits: add, then incr.
	m.MustDo("add " + name + " 0 3600 1\r\n1")
	m.MustDo("incr " + name + " 3")
	d := allow(t, s, key, lim, 2)
	if !d.Allowed || d.Remaining != 4 {
		t.Errorf("AllowN(2) after the reference counted 4 = %+v, want allowed, Remaining 4", d)
	}
	if v := value(t, m, name); v != "6" {
		t.Errorf("item %s = %q, want 6", name, v)
	}
	d = allow(t, s, key, lim.WithCounting(sluice.CountAdmitted), 5)
	if d.Allowed {
		t.Errorf("AllowN(5) counting admitted, with 4 left = %+v, want denied", d)
	}
	allow(t, s, key, lim.WithCounting(sluice.CountAdmitted), 4)
	if v := value(t, m, name); v != "10" {
		t.Errorf("item %s = %q, want 10", name, v)
	}
}

// TestNotAState: a value the store did not write (another application
// under the prefix, or one too long to be a state) is a ValueError, the
// item is left as it is, and the connection serves the next call.
func TestNotAState(t *testing.T) {
	m := memcachedtest.Server(t)
	s := open(t, memcachestore.Options{MaxIdleConns: 1, MaxConns: 1}, m.Addr)
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Minute}
	m.MustDo("set sluice:word:G1o 0 60 5\r\nhello")
	m.MustDo("set sluice:long:G1o 0 60 200\r\n" + strings.Repeat("1", 200))
	for _, k := range []string{"word", "long"} {
		for _, n := range []int{0, 1} {
			var ve *memcachestore.ValueError
			if _, err := s.AllowN(ctx, k, lim, n); !errors.As(err, &ve) {
				t.Errorf("AllowN(%q, %d) = %v, want a ValueError", k, n, err)
			}
		}
		if d := allow(t, s, "fine", lim, 1); !d.Allowed {
			t.Fatalf("AllowN on another key after a ValueError = %+v", d)
		}
	}
	if v := value(t, m, "sluice:word:G1o"); v != "hello" {
		t.Errorf("foreign item = %q, want it untouched", v)
	}
}

// TestNoCAS: a server run without CAS (-C) cannot decide by
// compare-and-swap: ErrNoCAS, nothing counted; incr still counts a fixed
// window that counts every hit.
func TestNoCAS(t *testing.T) {
	m := memcachedtest.Server(t, memcachedtest.WithArgs("-C"))
	s := open(t, memcachestore.Options{}, m.Addr)
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Minute}
	allow(t, s, "k", lim, 1) // absent: add needs no CAS
	if _, err := s.AllowN(ctx, "k", lim, 1); !errors.Is(err, memcachestore.ErrNoCAS) {
		t.Fatalf("AllowN on an existing item without CAS = %v, want ErrNoCAS", err)
	}
	if d := allow(t, s, "k", lim, 0); d.Remaining != 9 {
		t.Errorf("peek = %+v, want Remaining 9 (the refused call counted nothing)", d)
	}
	charge := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Minute, Counting: sluice.CountAll}
	for i := 1; i <= 3; i++ {
		if d := allow(t, s, "k", charge, 1); d.Remaining != 10-i {
			t.Errorf("charge %d without CAS = %+v, want Remaining %d", i, d, 10-i)
		}
	}
}

// TestRefusedBeforeSending: a sliding log is refused with a
// *sluice.LimitError on Algorithm before the store sends anything (no
// server listens here), and a failover store would not degrade it.
func TestRefusedBeforeSending(t *testing.T) {
	s, err := memcachestore.New(ctx, memcachestore.Options{Servers: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	log := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: time.Minute}
	_, err = s.AllowN(ctx, "k", log, 1)
	var le *sluice.LimitError
	if !errors.As(err, &le) || le.Field != "Algorithm" || !errors.Is(err, memcachestore.ErrAlgorithmUnsupported) || !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Fatalf("AllowN(sliding_log) = %v, want a *sluice.LimitError on Algorithm wrapping ErrAlgorithmUnsupported and ErrInvalidLimit", err)
	}
	if !strings.Contains(err.Error(), "sliding_log") || !strings.Contains(err.Error(), "sliding_window") {
		t.Errorf("error %q should name the algorithm refused and the one to use", err)
	}
	for _, a := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow, sluice.TokenBucket, sluice.GCRA} {
		if !memcachestore.Supports(a) {
			t.Errorf("Supports(%v) = false", a)
		}
	}
	if memcachestore.Supports(sluice.SlidingLog) {
		t.Error("Supports(sliding_log) = true")
	}
}

// TestContended: a write between a decision's read and its swap makes it
// read and decide again, on the new state; a decision that loses every
// attempt is ErrContended and counts nothing.
func TestContended(t *testing.T) {
	m := memcachedtest.Server(t)
	// A clock that stands still: the item's name holds the window, and
	// every call must count in the one named here.
	now := time.Now()
	s := open(t, memcachestore.Options{MaxCASAttempts: 3, Clock: func() time.Time { return now }}, m.Addr)
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: time.Hour}
	name, err := s.Name("k", lim, now.UnixMicro())
	if err != nil {
		t.Fatal(err)
	}
	allow(t, s, "k", lim, 1)
	// Another writer takes 3 more between the read and the swap, once.
	writes := 0
	memcachestore.SetBeforeSwap(t, func(string) {
		if writes < 1 {
			m.MustDo("incr " + name + " 3")
		}
		writes++
	})
	if d := allow(t, s, "k", lim, 2); d.Allowed {
		t.Fatalf("AllowN(2) after another writer took 3 of the 4 left = %+v, want denied (decided on the new state)", d)
	}
	if d := allow(t, s, "k", lim, 1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("AllowN(1) = %+v, want allowed, Remaining 0", d)
	}
	// Every attempt loses: no decision.
	memcachestore.SetBeforeSwap(t, func(string) { m.MustDo("incr " + name + "c 1") })
	name += "c"
	name = strings.Replace(name, ":k:", ":kc:", 1)
	name = strings.TrimSuffix(name, "c")
	allow(t, s, "kc", lim, 1)
	memcachestore.SetBeforeSwap(t, func(string) { m.MustDo("incr " + name + " 1") })
	_, err = s.AllowN(ctx, "kc", lim, 1)
	if !errors.Is(err, memcachestore.ErrContended) {
		t.Fatalf("AllowN with every swap lost = %v, want ErrContended", err)
	}
	if v := value(t, m, name); v != "4" { // 1, and the other writer's 3
		t.Errorf("count after the contended call = %q, want 4 (nothing counted)", v)
	}
}

// TestOwnCallsNeverContend: the calls of one store on one state take
// turns, so that with a single CAS attempt none of them fails.
func TestOwnCallsNeverContend(t *testing.T) {
	m := memcachedtest.Server(t)
	now := time.Now()
	s := open(t, memcachestore.Options{MaxCASAttempts: 1, MaxIdleConns: 16, Clock: func() time.Time { return now }}, m.Addr)
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1_000_000, Period: time.Hour}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for range 100 {
				if _, err := s.AllowN(ctx, "hot", lim, 1); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if d := allow(t, s, "hot", lim, 0); d.Remaining != 1_000_000-1600 {
		t.Errorf("after 1600 admissions: %+v, want Remaining %d", d, 1_000_000-1600)
	}
}

// TestHugeCharges: the largest charges keep every count and time within
// its bound, in memcached's limits (an expiry memcached takes).
func TestHugeCharges(t *testing.T) {
	m := memcachedtest.Server(t)
	s := open(t, memcachestore.Options{}, m.Addr)
	fw := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: 24 * time.Hour, Counting: sluice.CountAll}
	name, _ := s.Name("big", fw, time.Now().UnixMicro())
	const debt = 1 << 52
	m.MustDo(fmt.Sprintf("set %s 0 600 %d\r\n%d", name, len(strconv.Itoa(debt-5)), debt-5))
	for range 3 {
		if d := allow(t, s, "big", fw, sluice.MaxCharge); d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
			t.Fatalf("charge of MaxCharge = %+v, want denied", d)
		}
	}
	if v := value(t, m, name); v != strconv.Itoa(debt) {
		t.Errorf("count after charges beyond the bound = %s, want %d", v, debt)
	}
	for _, a := range []sluice.Algorithm{sluice.SlidingWindow, sluice.TokenBucket, sluice.GCRA} {
		lim := sluice.Limit{Algorithm: a, Rate: 1, Period: 24 * time.Hour, Counting: sluice.CountAll}
		for range 3 {
			if d := allow(t, s, "big", lim, sluice.MaxCharge); d.Allowed || d.RetryAfter <= 0 {
				t.Fatalf("%v: charge of MaxCharge = %+v, want denied", a, d)
			}
		}
		if d := allow(t, s, "big", lim, 0); d.Allowed {
			t.Errorf("%v: peek after huge charges = %+v, want denied (the debt kept)", a, d)
		}
	}
	// The bucket's debt lies years ahead: its item expires in 2038 at the
	// latest, and memcached keeps it.
	name, _ = s.Name("big", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: 24 * time.Hour}, 0)
	if e := exp(t, m, name); e <= 30*24*3600 || e > math.MaxInt32 {
		t.Errorf("a bucket in debt for years expires in %ds, want beyond 30 days, within 2038", e)
	}
	// n beyond the bounds is refused before anything is sent.
	for _, tt := range []struct {
		lim sluice.Limit
		n   int
	}{{fw, sluice.MaxCharge + 1}, {fw.WithCounting(sluice.CountAdmitted), 11}, {fw, -1}} {
		if _, err := s.AllowN(ctx, "big", tt.lim, tt.n); !errors.Is(err, sluice.ErrExceedsCapacity) && !errors.Is(err, sluice.ErrInvalidCost) {
			t.Errorf("AllowN(%v, %d) = %v, want ErrExceedsCapacity or ErrInvalidCost", tt.lim, tt.n, err)
		}
	}
}

// TestLongKeys: keys up to sluice.MaxKeyLen bytes, of any bytes, each
// have a state of their own on a name memcached takes.
func TestLongKeys(t *testing.T) {
	m := memcachedtest.Server(t)
	s := open(t, memcachestore.Options{}, m.Addr)
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Hour}
	keys := []string{
		strings.Repeat("\x00", sluice.MaxKeyLen),
		strings.Repeat("\x00", sluice.MaxKeyLen-1) + "\x01",
		strings.Repeat(" ", sluice.MaxKeyLen),
		strings.Repeat("é", sluice.MaxKeyLen/2),
	}
	for _, k := range keys {
		if d := allow(t, s, k, lim, 2); !d.Allowed {
			t.Errorf("AllowN(%d-byte key, 2) = %+v, want allowed (its own state)", len(k), d)
		}
		if d := allow(t, s, k, lim, 1); d.Allowed {
			t.Errorf("AllowN(%d-byte key, 1) on a full state = %+v, want denied", len(k), d)
		}
		name, _ := s.Name(k, lim, time.Now().UnixMicro())
		if v := value(t, m, name); v != "2" {
			t.Errorf("item %q = %q, want 2", name, v)
		}
	}
}

// TestServers: an item lives on the server gomemcache would pick, the
// CRC-32 of its name modulo the number of servers, in the given order.
func TestServers(t *testing.T) {
	ms := []*memcachedtest.Instance{memcachedtest.Server(t), memcachedtest.Server(t), memcachedtest.Server(t)}
	s := open(t, memcachestore.Options{}, ms[0].Addr, ms[1].Addr, ms[2].Addr)
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Minute}
	used := map[int]bool{}
	for i := range 30 {
		k := fmt.Sprintf("key%d", i)
		allow(t, s, k, lim, 1)
		name, _ := s.Name(k, lim, 0)
		want := int(crc32.ChecksumIEEE([]byte(name)) % 3)
		used[want] = true
		for j, m := range ms {
			if got := value(t, m, name) != ""; got != (j == want) {
				t.Errorf("item %s on server %d: %v, want only on server %d", name, j, got, want)
			}
		}
	}
	if len(used) != 3 {
		t.Errorf("30 keys used servers %v, want all three", used)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	ms[1].Kill()
	if err := s.Ping(ctx); err == nil || !strings.Contains(err.Error(), ms[1].Addr) {
		t.Errorf("Ping with server 1 down = %v, want an error naming %s", err, ms[1].Addr)
	}
}
