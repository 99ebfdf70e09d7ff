package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

var algorithms = []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.TokenBucket, sluice.GCRA}

func TestRedisKey(t *testing.T) {
	s := &Store{prefix: DefaultPrefix}
	tests := []struct {
		key  string
		lim  sluice.Limit
		want string
	}{
		{"tenant-1", sluice.PerMinute(10), "sluice:{tenant-1}G1o"},
		{"tenant-1", sluice.PerSecond(10).With(sluice.FixedWindow), "sluice:{tenant-1}F1"},
		{"tenant-1", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 1, Period: 1500 * time.Millisecond}, "sluice:{tenant-1}lw5eo"},
		{"tenant-1", sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 1, Period: 24 * time.Hour}, "sluice:{tenant-1}S1uo0"},
		{"tenant-1", sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 1, Period: time.Millisecond}, "sluice:{tenant-1}brs"},
		{"a{b}c", sluice.PerSecond(1), "sluice:{a%7Bb%7Dc}G1"},
		{"50%", sluice.PerSecond(1), "sluice:{50%25}G1"},
		{"a:b\x00\xff", sluice.PerSecond(1), "sluice:{a:b\x00\xff}G1"},
	}
	for _, tt := range tests {
		if got := s.redisKey(tt.key, tt.lim); got != tt.want {
			t.Errorf("redisKey(%q, %v) = %q, want %q", tt.key, tt.lim, got, tt.want)
		}
	}
	ms := &Store{prefix: DefaultPrefix, msLayout: true}
	if got, want := ms.redisKey("a{b}", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: time.Second}), "rl:a{b}"; got != want {
		t.Errorf("millisecond layout redisKey = %q, want %q", got, want)
	}
	if got, want := ms.redisKey("a", sluice.PerSecond(1)), "sluice:{a}G1"; got != want {
		t.Errorf("millisecond layout redisKey for GCRA = %q, want %q (sluice's layout)", got, want)
	}
	tagged := &Store{prefix: escape("x{y}:"), slotKey: func(k string) string { k, _, _ = strings.Cut(k, "/"); return k }}
	if got, want := tagged.redisKey("t{1}/route", sluice.PerSecond(1)), "x%7By%7D:{t%7B1%7D}t%7B1%7D/route}G1"; got != want {
		t.Errorf("WithSlotKey redisKey = %q, want %q", got, want)
	}
}

// TestEscapeInjective: keys that differ only in escaped characters, or
// that spell another key's escape, never share a name, and no name holds a
// brace inside its hash tag.
func TestEscapeInjective(t *testing.T) {
	keys := []string{"a{b", "a%7Bb", "a%7bb", "a}b", "a%7Db", "a%b", "a%25b", "a%2525b", "{", "}", "%", "{}", "%7B%7D", "a", "a}G1", "a\x00", "a\x00b"}
	s := &Store{prefix: DefaultPrefix}
	seen := map[string]string{}
	for _, k := range keys {
		name := s.redisKey(k, sluice.PerSecond(1))
		if other, ok := seen[name]; ok {
			t.Errorf("keys %q and %q share the Redis key %q", k, other, name)
		}
		seen[name] = k
		tag := name[strings.IndexByte(name, '{')+1 : strings.LastIndexByte(name, '}')]
		if strings.ContainsAny(tag, "{}") {
			t.Errorf("redisKey(%q) = %q: hash tag %q holds a brace", k, name, tag)
		}
		if got, want := slot(name), crc16(escape(k))&16383; got != want {
			t.Errorf("slot(%q) = %d, want the slot of the escaped key, %d", name, got, want)
		}
	}
}

func TestSlot(t *testing.T) {
	tests := []struct {
		key  string
		want uint16
	}{
		{"123456789", 0x31C3 & 16383}, // CRC16/XMODEM check value
		{"foo", 12182},                // from the Redis Cluster specification
		{"{user1000}.following", slot("user1000")},
		{"foo{}{bar}", slot("foo{}{bar}")}, // empty tag: the whole key
		{"foo{{bar}}zap", slot("{bar")},
	}
	for _, tt := range tests {
		if got := slot(tt.key); got != tt.want {
			t.Errorf("slot(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
	if slot("foo{}{bar}") == slot("bar") {
		t.Errorf("slot(%q) used the second tag", "foo{}{bar}")
	}
}

// stores returns the ways of deciding on one server: rueidis with and
// without batching, and go-redis, each with its own prefix.
func stores(t *testing.T, srv *redistest.Instance, opts ...Option) map[string]*Store {
	rc := newRueidis(t, srv.Addr)
	gc := newGoRedis(t, false, srv.Addr)
	with := func(name string, more ...Option) []Option {
		return append(append(append([]Option{}, opts...), more...), WithPrefix(name+":"))
	}
	return map[string]*Store{
		"rueidis":             NewRueidis(rc, with("rueidis")...),
		"rueidis-no-batching": NewRueidis(rc, with("rueidis-no-batching", WithBatching(false))...),
		"go-redis":            NewGoRedis(gc, with("go-redis")...),
	}
}

func TestInvalidInput(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	ok := sluice.PerSecond(5)
	for name, s := range stores(t, srv) {
		tests := []struct {
			name string
			key  string
			lim  sluice.Limit
			n    int
			want error
		}{
			{"empty key", "", ok, 1, sluice.ErrInvalidKey},
			{"long key", strings.Repeat("k", sluice.MaxKeyLen+1), ok, 1, sluice.ErrInvalidKey},
			{"no algorithm", "k", sluice.Limit{Rate: 1, Period: time.Second}, 1, sluice.ErrInvalidLimit},
			{"zero rate", "k", sluice.Limit{Algorithm: sluice.GCRA, Period: time.Second}, 1, sluice.ErrInvalidLimit},
			{"short period", "k", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Microsecond}, 1, sluice.ErrInvalidLimit},
			{"negative burst", "k", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Second, Burst: -1}, 1, sluice.ErrInvalidLimit},
			{"negative n", "k", ok, -1, sluice.ErrInvalidCost},
			{"n over capacity", "k", ok, 6, sluice.ErrExceedsCapacity},
		}
		for _, tt := range tests {
			_, err := s.AllowN(ctx, tt.key, tt.lim, tt.n)
			if !errors.Is(err, tt.want) {
				t.Errorf("%s: %s: AllowN(%.20q, %v, %d) error = %v, want %v", name, tt.name, tt.key, tt.lim, tt.n, err, tt.want)
			}
		}
		ms := NewRueidis(newRueidis(t, srv.Addr), WithMillisecondLayout())
		if _, err := ms.AllowN(ctx, "k", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 1, Period: 1500 * time.Microsecond}, 1); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("millisecond layout with a Period of 1.5ms: error = %v, want ErrInvalidLimit", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.AllowN(cctx, "k", ok, 1); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: AllowN with a cancelled context: error = %v, want context.Canceled", name, err)
		}
	}
}

// TestOddKeys: keys with braces, separators, NUL and invalid UTF-8, and
// keys that spell another key's escaping, each get their own state.
func TestOddKeys(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	keys := []string{"a{b", "a%7Bb", "a}b", "a%7Db", "{", "}", "{}", "a:b", "a", "a\x00", "a\x00b", "\xff\xfe", "\xff", strings.Repeat("k", sluice.MaxKeyLen), "a}G1", "a}F1"}
	for name, s := range stores(t, srv) {
		for _, a := range algorithms {
			lim := sluice.Limit{Algorithm: a, Rate: 3, Period: time.Minute}
			// Key i is given i%3+1 units; each key must then have exactly
			// Rate - its own units left.
			for i, k := range keys {
				n := i%3 + 1
				if d, err := s.AllowN(ctx, k, lim, n); err != nil || !d.Allowed {
					t.Fatalf("%s: AllowN(%q, %v, %d) = %+v, %v; want allowed", name, k, lim, n, d, err)
				}
			}
			for i, k := range keys {
				d, err := s.AllowN(ctx, k, lim, 0)
				if want := 3 - (i%3 + 1); err != nil || d.Remaining != want {
					t.Errorf("%s: peek(%q, %v) = %+v, %v; want Remaining %d (state shared with another key?)", name, k, lim, d, err, want)
				}
			}
		}
	}
}

func TestScriptFlush(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	// A clock that stands still: a minute's window never ends during the
	// test, however busy the machine.
	clock := time.UnixMicro(1_800_000_000_000_000)
	for name, s := range stores(t, srv, WithTestClock(func() time.Time { return clock })) {
		for _, a := range algorithms {
			lim := sluice.Limit{Algorithm: a, Rate: 4, Period: time.Minute}
			k := name + "/" + a.String()
			for i := range 4 {
				srv.MustDo("SCRIPT", "FLUSH")
				d, err := s.AllowN(ctx, k, lim, 1)
				if err != nil || !d.Allowed || d.Remaining != 3-i {
					t.Fatalf("%s: AllowN(%q) #%d after SCRIPT FLUSH = %+v, %v; want allowed, Remaining %d", name, k, i, d, err, 3-i)
				}
			}
			srv.MustDo("SCRIPT", "FLUSH")
			d, at, err := s.Reserve(ctx, k+"/lease", lim, 2)
			if err != nil || !d.Allowed {
				t.Fatalf("%s: Lease after SCRIPT FLUSH = %+v, %v", name, d, err)
			}
			srv.MustDo("SCRIPT", "FLUSH")
			if err := s.Return(ctx, k+"/lease", lim, 2, at); err != nil {
				t.Fatalf("%s: Return after SCRIPT FLUSH: %v", name, err)
			}
			srv.MustDo("SCRIPT", "FLUSH")
			ds, err := s.AllowMulti(ctx, []sluice.Request{{Key: k + "/lease", Limit: lim, N: 4}, {Key: k, Limit: lim, N: 0}})
			if err != nil || !ds[0].Allowed || ds[0].Remaining != 0 || ds[1].Remaining != 0 {
				t.Fatalf("%s: AllowMulti after SCRIPT FLUSH (and a returned lease) = %+v, %v; want allowed, Remaining 0 and 0", name, ds, err)
			}
		}
	}
}

// TestTTL: every key expires when its state no longer matters.
func TestTTL(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	s := NewRueidis(newRueidis(t, srv.Addr))
	for _, a := range algorithms {
		lim := sluice.Limit{Algorithm: a, Rate: 10, Period: time.Minute}
		k := "ttl/" + a.String()
		before := time.Now()
		d, err := s.AllowN(ctx, k, lim, 3)
		after := time.Now()
		if err != nil || !d.Allowed {
			t.Fatalf("AllowN(%q, %v, 3) = %+v, %v", k, lim, d, err)
		}
		// The decision's Redis time is between before and after.
		checkExpiry(t, srv, s.redisKey(k, lim), before.Add(d.ResetAfter), after.Add(d.ResetAfter),
			fmt.Sprintf("%v: the decision's ResetAfter, %v", a, d.ResetAfter))
	}
	ms := NewRueidis(newRueidis(t, srv.Addr), WithMillisecondLayout())
	lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: 30 * time.Second}
	before := time.Now()
	if _, err := ms.AllowN(ctx, "ttl", lim, 1); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	checkExpiry(t, srv, "rl:ttl", before.Add(lim.Period), after.Add(lim.Period), "millisecond layout: the window, 30 s")
}

// checkExpiry checks that name expires at a time in [earliest, latest]
// (on Redis's clock, this machine's), within Redis's rounding to the
// millisecond: its PTTL, read between r0 and r1, is at least earliest-r1
// and at most latest-r0; or, when the key is gone, r1 is past earliest.
// The bounds hold however long the scheduler keeps the caller away.
func checkExpiry(t *testing.T, srv *redistest.Instance, name string, earliest, latest time.Time, what string) {
	t.Helper()
	const rounding = 2 * time.Millisecond
	r0 := time.Now()
	out := srv.MustDo("PTTL", name)
	r1 := time.Now()
	ms, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("PTTL %s = %q: %v", name, out, err)
	}
	if ms == -2 {
		if r1.Before(earliest.Add(-rounding)) {
			t.Errorf("%s: key %s gone %v before it should expire", what, name, earliest.Sub(r1))
		}
		return
	}
	pttl := time.Duration(ms) * time.Millisecond
	lo, hi := earliest.Sub(r1)-rounding, latest.Sub(r0)+rounding
	if ms < 0 || pttl < lo || pttl > hi {
		t.Errorf("%s: PTTL %s = %d ms, want between %v and %v", what, name, ms, lo, hi)
	}
}

// dirty is Redis's count of writes since the last save: a denial or a peek
// must not move it.
func dirty(t *testing.T, srv *redistest.Instance) string {
	for _, l := range strings.Split(srv.MustDo("INFO", "persistence"), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "rdb_changes_since_last_save:"); ok {
			return v
		}
	}
	t.Fatal("INFO persistence has no rdb_changes_since_last_save")
	return ""
}

func TestDeniedWritesNothing(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	for name, s := range stores(t, srv) {
		for _, a := range algorithms {
			lim := sluice.Limit{Algorithm: a, Rate: 2, Period: time.Minute}
			k := name + "/" + a.String()
			if d, err := s.AllowN(ctx, k, lim, 2); err != nil || !d.Allowed {
				t.Fatalf("%s: AllowN(%q, 2) = %+v, %v", name, k, d, err)
			}
			rk := s.redisKey(k, lim)
			dump, w := srv.MustDo("DUMP", rk), dirty(t, srv)
			d, err := s.AllowN(ctx, k, lim, 1)
			if err != nil || d.Allowed || d.RetryAfter <= 0 {
				t.Fatalf("%s: AllowN(%q, 1) on a full key = %+v, %v; want denied with a RetryAfter", name, k, d, err)
			}
			if _, err := s.AllowN(ctx, k, lim, 0); err != nil {
				t.Fatal(err)
			}
			ds, err := s.AllowMulti(ctx, []sluice.Request{{Key: k, Limit: lim, N: 1}, {Key: k + "/other", Limit: lim, N: 1}})
			if err != nil || ds[0].Allowed || ds[1].Allowed {
				t.Fatalf("%s: AllowMulti with a full key = %+v, %v; want both denied", name, ds, err)
			}
			if got := srv.MustDo("DUMP", rk); got != dump {
				t.Errorf("%s: %v: the key changed on a denial or a peek", name, a)
			}
			if got := dirty(t, srv); got != w {
				t.Errorf("%s: %v: Redis counted writes (%s, then %s) on a denial or a peek", name, a, w, got)
			}
			if _, err := srv.Do("EXISTS", s.redisKey(k+"/other", lim)); err != nil || srv.MustDo("EXISTS", s.redisKey(k+"/other", lim)) != "0" {
				t.Errorf("%s: %v: the admissible request of a denied AllowMulti was written", name, a)
			}
		}
	}
}

// TestMemoryUsage holds the bytes per key (MEMORY USAGE, key name
// included) after 100 admissions at 100/minute to its targets.
// A string key costs 40 bytes (dictEntry and object) plus its name's
// allocation; the fixed window reaches 56 only with a name of at most 12
// bytes, so without the default prefix.
func TestMemoryUsage(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	c := newRueidis(t, srv.Addr)
	usage := func(s *Store, lim sluice.Limit, key string) int {
		for i := range 100 {
			if d, err := s.AllowN(ctx, key, lim, 1); err != nil || !d.Allowed {
				t.Fatalf("admission %d of %q: %+v, %v", i, key, d, err)
			}
		}
		n, err := strconv.Atoi(srv.MustDo("MEMORY", "USAGE", s.redisKey(key, lim), "SAMPLES", "0"))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	per := func(a sluice.Algorithm) sluice.Limit {
		return sluice.Limit{Algorithm: a, Rate: 100, Period: time.Minute}
	}
	tests := []struct {
		name    string
		s       *Store
		lim     sluice.Limit
		key     string
		entries int
		max     int
	}{
		{"gcra", NewRueidis(c), per(sluice.GCRA), "mem:42", 1, 72},
		{"fixed_window", NewRueidis(c), per(sluice.FixedWindow), "mem:43", 1, 72},
		{"fixed_window, no prefix", NewRueidis(c, WithPrefix("")), per(sluice.FixedWindow), "mem:44", 1, 56},
		{"gcra, no prefix", NewRueidis(c, WithPrefix("")), per(sluice.GCRA), "mem:45", 1, 56},
		{"sliding_log per entry", NewRueidis(c), per(sluice.SlidingLog), "mem:46", 100, 20},
	}
	for _, tt := range tests {
		got := usage(tt.s, tt.lim, tt.key) / tt.entries
		t.Logf("%s: %d bytes", tt.name, got)
		if got > tt.max {
			t.Errorf("%s: MEMORY USAGE after 100 admissions = %d bytes (per entry), want <= %d", tt.name, got, tt.max)
		}
	}
}

// TestMillisecondLayout: a fleet running the Python sliding-log script and
// sluice workers share one quota on the same ZSET.
func TestMillisecondLayout(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	const pythonScript = `
local key, now_ms      = KEYS[1], tonumber(ARGV[1])
local window_ms, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local member           = ARGV[4]
redis.call('ZREMRANGEBYSCORE', key, 0, now_ms - window_ms)
local used = redis.call('ZCARD', key)
if used < limit then
  redis.call('ZADD', key, now_ms, member)
  redis.call('PEXPIRE', key, window_ms)
  return {1, limit - used - 1, 0}
end
local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
return {0, 0, (tonumber(oldest[2]) + window_ms) - now_ms}`
	python := func(i int) string { // a Python worker, on Redis's clock here
		nowMs := strconv.FormatInt(time.Now().UnixMilli(), 10)
		out := srv.MustDo("EVAL", pythonScript, "1", "rl:tenant-1", nowMs, "60000", "5", fmt.Sprintf("%s-%08x", nowMs, i))
		return strings.SplitN(out, "\n", 2)[0]
	}
	lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: time.Minute}
	for name, s := range stores(t, srv, WithMillisecondLayout()) {
		srv.MustDo("DEL", "rl:tenant-1")
		for i := range 3 {
			if got := python(i); got != "1" {
				t.Fatalf("%s: the Python script, call %d: allowed = %s, want 1", name, i, got)
			}
		}
		d, err := s.AllowN(ctx, "tenant-1", lim, 2)
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("%s: sluice after 3 of 5 taken by the Python script: AllowN(2) = %+v, %v; want allowed, Remaining 0", name, d, err)
		}
		d, err = s.AllowN(ctx, "tenant-1", lim, 1)
		if err != nil || d.Allowed || d.RetryAfter <= 50*time.Second || d.RetryAfter > time.Minute {
			t.Errorf("%s: sluice with the quota used up: AllowN(1) = %+v, %v; want denied, RetryAfter near 1m", name, d, err)
		}
		if got := python(9); got != "0" {
			t.Errorf("%s: the Python script after sluice took the rest: allowed = %s, want 0", name, got)
		}
		members := strings.Split(srv.MustDo("ZRANGE", "rl:tenant-1", "0", "-1", "WITHSCORES"), "\n")
		if len(members) != 10 {
			t.Fatalf("%s: rl:tenant-1 holds %v, want 5 entries", name, members)
		}
		for i := 0; i < len(members); i += 2 {
			ms, _, ok := strings.Cut(members[i], "-")
			if !ok || ms != members[i+1] || len(members[i]) != len(ms)+9 {
				t.Errorf("%s: entry %q scored %s; want <ms>-<8 hex> scored in ms", name, members[i], members[i+1])
			}
		}
	}
}

func TestLeaseReturn(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	for name, s := range stores(t, srv) {
		for _, a := range algorithms {
			lim := sluice.Limit{Algorithm: a, Rate: 5, Period: time.Minute}
			k := name + "/" + a.String()
			before := time.Now()
			d, at, err := s.Reserve(ctx, k, lim, 4)
			if err != nil || !d.Allowed || d.Remaining != 1 {
				t.Fatalf("%s: Lease(4 of 5) = %+v, %v", name, d, err)
			}
			if at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
				t.Errorf("%s: Lease time %v is not Redis's time now (%v)", name, at, before)
			}
			if err := s.Return(ctx, k, lim, 3, at); err != nil {
				t.Fatalf("%s: Return: %v", name, err)
			}
			d, err = s.AllowN(ctx, k, lim, 0)
			if err != nil || d.Remaining != 4 {
				t.Errorf("%s: %v: peek after returning 3 of 4 = %+v, %v; want Remaining 4", name, a, d, err)
			}
		}
	}
}

func TestMultiCrossSlot(t *testing.T) {
	cl := redistest.Cluster(t, 3, 0)
	ctx := context.Background()
	s := NewRueidis(newRueidis(t, cl.Addrs()...))
	lim := sluice.PerSecond(5)
	// "a" and "b" hash to different slots.
	_, err := s.AllowMulti(ctx, []sluice.Request{{Key: "a", Limit: lim, N: 1}, {Key: "b", Limit: lim, N: 1}})
	if !errors.Is(err, ErrCrossSlot) || !strings.Contains(err.Error(), `"a"`) || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("AllowMulti(a, b) on Cluster: error = %v, want ErrCrossSlot naming both keys", err)
	}
	// One key's limits share its slot.
	ds, err := s.AllowMulti(ctx, []sluice.Request{{Key: "a{x}", Limit: lim, N: 1}, {Key: "a{x}", Limit: sluice.PerMinute(10).With(sluice.SlidingLog), N: 1}})
	if err != nil || !ds[0].Allowed || !ds[1].Allowed {
		t.Errorf("AllowMulti(two limits of one key) on Cluster = %+v, %v; want both allowed", ds, err)
	}
	want := []sluice.Decision{{Allowed: true, Limit: lim, Remaining: 4, ResetAfter: 200 * time.Millisecond}}
	got, err := s.AllowMulti(ctx, []sluice.Request{{Key: "solo", Limit: lim, N: 1}})
	if err != nil || cmp.Diff(want, got) != "" {
		t.Errorf("AllowMulti(one request) on Cluster = %+v, %v; want %+v", got, err, want)
	}
}

// TestRing: a go-redis Ring shards by hash tag, so batching is off and
// AllowMulti needs one tag; every decision still lands on its key's shard.
func TestRing(t *testing.T) {
	a, b := redistest.Server(t), redistest.Server(t)
	r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}, MaxRetries: -1})
	t.Cleanup(func() { r.Close() })
	s := NewGoRedis(r)
	if s.batch != nil || s.slotBatch != nil {
		t.Fatal("batching is on with a Ring")
	}
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Minute}
	for i := range 20 {
		k := fmt.Sprintf("ring-%d", i)
		for j := range 4 {
			d, err := s.AllowN(ctx, k, lim, 1)
			if err != nil || d.Allowed != (j < 3) {
				t.Fatalf("AllowN(%q) #%d = %+v, %v; want allowed %v", k, j, d, err, j < 3)
			}
		}
	}
	_, err := s.AllowMulti(ctx, []sluice.Request{{Key: "x", Limit: lim, N: 1}, {Key: "y", Limit: lim, N: 1}})
	if !errors.Is(err, ErrCrossSlot) {
		t.Errorf("AllowMulti(x, y) on a Ring: error = %v, want ErrCrossSlot", err)
	}
	ds, err := s.AllowMulti(ctx, []sluice.Request{{Key: "x", Limit: lim, N: 1}, {Key: "x", Limit: sluice.PerSecond(2), N: 1}})
	if err != nil || !ds[0].Allowed || !ds[1].Allowed {
		t.Errorf("AllowMulti(two limits of x) on a Ring = %+v, %v; want both allowed", ds, err)
	}
}

// The sliding log trims its expired entries at every 8th admission: a key
// holds its live entries, '#', and at most 7 expired ones; the decisions
// are those of a log trimmed at every admission.
func TestSlidingLogTrimsEveryEighthAdmission(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	var now atomic.Int64
	now.Store(1_700_000_000_000_000)
	for _, batching := range []bool{false, true} {
		s := NewRueidis(newRueidis(t, srv.Addr), WithBatching(batching),
			WithTestClock(func() time.Time { return time.UnixMicro(now.Load()) }))
		lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 4, Period: time.Second}
		key := fmt.Sprintf("trim-%v", batching)
		name := s.redisKey(key, lim)
		maxCard := 0
		for i := range 100 {
			now.Add(300_000) // 300ms: 4 entries live at most, 3 after this step
			d, err := s.AllowN(ctx, key, lim, 1)
			if err != nil || !d.Allowed || d.Remaining != max(4-min(i+1, 4), 0) {
				t.Fatalf("batching %v: admission %d = %+v, %v; want admitted, Remaining %d", batching, i, d, err, max(4-min(i+1, 4), 0))
			}
			card, err := strconv.Atoi(srv.MustDo("ZCARD", name))
			if err != nil {
				t.Fatal(err)
			}
			maxCard = max(maxCard, card)
			if seq := i + 1; seq%8 == 0 && card != 4+1 {
				t.Errorf("batching %v: after admission %d (a multiple of 8) the log holds %d members, want its 4 live entries and '#'", batching, seq, card)
			}
		}
		if maxCard > 4+1+7 {
			t.Errorf("batching %v: the log held up to %d members, want at most 4 live, '#' and 7 expired", batching, maxCard)
		}
		if maxCard <= 4+1 {
			t.Errorf("batching %v: the log never held an expired entry (%d members at most): trimmed at every admission?", batching, maxCard)
		}
	}
}
