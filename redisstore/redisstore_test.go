package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// newRueidis returns a rueidis client for addrs, closed when t ends.
func newRueidis(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	// Replies wait up to goRedisTimeout (rueidis's default, a few
	// seconds, was reached by a COPY of a full log at load 25): calls that
	// must end sooner carry a context deadline.
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true, ConnWriteTimeout: goRedisTimeout})
	if err != nil {
		t.Fatalf("rueidis.NewClient(%v): %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

// newGoRedis returns a go-redis client (a ClusterClient for a cluster),
// with retries off, closed when t ends. Its read and write timeouts
// (goRedisTimeout) are ones a starved machine cannot reach: calls that
// must end sooner carry a context deadline.
func newGoRedis(t testing.TB, cluster bool, addrs ...string) redis.UniversalClient {
	t.Helper()
	var c redis.UniversalClient
	if cluster {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, ReadTimeout: goRedisTimeout, WriteTimeout: goRedisTimeout})
	} else {
		c = redis.NewClient(&redis.Options{Addr: addrs[0], MaxRetries: -1, ReadTimeout: goRedisTimeout, WriteTimeout: goRedisTimeout})
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// goRedisTimeout is the tests' go-redis read and write timeout (go-redis's
// default, 3 s, was reached by a reply at load 50).
const goRedisTimeout = 30 * time.Second

func runConformance(t *testing.T, mk func(t *testing.T, opts ...Option) *Store) {
	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		return mk(t)
	}, sluicetest.WithClock(func(t *testing.T, c *sluicetest.Clock) sluice.Store {
		return mk(t, WithTestClock(c.Now))
	}))
}

func TestConformance(t *testing.T) {
	srv := redistest.Server(t)
	t.Run("rueidis", func(t *testing.T) {
		c := newRueidis(t, srv.Addr)
		runConformance(t, func(t *testing.T, opts ...Option) *Store { return NewRueidis(c, opts...) })
	})
	t.Run("go-redis", func(t *testing.T) {
		c := newGoRedis(t, false, srv.Addr)
		runConformance(t, func(t *testing.T, opts ...Option) *Store { return NewGoRedis(c, opts...) })
	})
}

// testSubject is the slot key of sluicetest's keys, "sluicetest/<test
// name>/<random>": the keys of one subtest share a slot (AllowMulti works on
// Cluster), those of different subtests spread over the masters.
func testSubject(key string) string {
	if i := strings.LastIndexByte(key, '/'); i > 0 {
		return key[:i]
	}
	return key
}

func TestConformanceCluster(t *testing.T) {
	cl := redistest.Cluster(t, 3, 0)
	t.Run("rueidis", func(t *testing.T) {
		c := newRueidis(t, cl.Addrs()...)
		if !NewRueidis(c).c.isCluster() {
			t.Fatal("rueidis client on a Cluster: isCluster() = false")
		}
		runConformance(t, func(t *testing.T, opts ...Option) *Store {
			return NewRueidis(c, append(opts, WithSlotKey(testSubject))...)
		})
	})
	t.Run("go-redis", func(t *testing.T) {
		c := newGoRedis(t, true, cl.Addrs()...)
		if !NewGoRedis(c).c.isCluster() {
			t.Fatal("go-redis ClusterClient: isCluster() = false")
		}
		runConformance(t, func(t *testing.T, opts ...Option) *Store {
			return NewGoRedis(c, append(opts, WithSlotKey(testSubject))...)
		})
	})
}

func TestParseURL(t *testing.T) {
	tests := []struct {
		url                string
		addrs              []string
		user, pass, master string
		sentUser, sentPass string
		tls                bool
		db                 int
	}{
		{url: "redis://127.0.0.1:7000", addrs: []string{"127.0.0.1:7000"}},
		{url: "redis://u:p%40ss@127.0.0.1:7000/2", addrs: []string{"127.0.0.1:7000"}, user: "u", pass: "p@ss", db: 2},
		{url: "redis://:secret@127.0.0.1", addrs: []string{"127.0.0.1:6379"}, pass: "secret"},
		{url: "rediss://h.example:7000", addrs: []string{"h.example:7000"}, tls: true},
		{url: "redis://a:1?addr=b:2&addr=c:3", addrs: []string{"a:1", "b:2", "c:3"}},
		{url: "redis+cluster://u:p@a:1,b:2,c:3", addrs: []string{"a:1", "b:2", "c:3"}, user: "u", pass: "p"},
		{url: "rediss+cluster://a:1,b:2", addrs: []string{"a:1", "b:2"}, tls: true},
		{url: "redis+sentinel://u:p@s1:26379,s2:26379?master=mymaster&sentinel_password=sp", addrs: []string{"s1:26379", "s2:26379"}, user: "u", pass: "p", master: "mymaster", sentPass: "sp"},
		{url: "unix:///run/redis.sock", addrs: []string{"/run/redis.sock"}},
		{url: "unix://u:p%40ss@/run/redis.sock?db=3", addrs: []string{"/run/redis.sock"}, user: "u", pass: "p@ss", db: 3},
	}
	for _, tt := range tests {
		o, err := parseURL(tt.url)
		if err != nil {
			t.Errorf("parseURL(%q): %v", tt.url, err)
			continue
		}
		got := []any{o.InitAddress, o.Username, o.Password, o.Sentinel.MasterSet, o.Sentinel.Username, o.Sentinel.Password, o.TLSConfig != nil, o.SelectDB}
		want := []any{tt.addrs, tt.user, tt.pass, tt.master, tt.sentUser, tt.sentPass, tt.tls, tt.db}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("parseURL(%q) (-want +got):\n%s", tt.url, d)
		}
	}
	for _, bad := range []string{"127.0.0.1:6379", "http://a:1", "redis+foo://a:1", "redis+sentinel://s:1", "redis://a:1/x/y"} {
		if _, err := parseURL(bad); err == nil {
			t.Errorf("parseURL(%q) = nil error, want one", bad)
		}
	}
	if got := redact("redis://u:secret@h:1/0"); strings.Contains(got, "secret") {
		t.Errorf("redact kept the password: %q", got)
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	lim := sluice.PerSecond(2)
	check := func(t *testing.T, url string, cluster bool) {
		t.Helper()
		s, err := Open(ctx, url)
		if err != nil {
			t.Fatalf("Open(%q): %v", url, err)
		}
		if s.c.isCluster() != cluster {
			t.Errorf("Open(%q): cluster = %v, want %v", url, s.c.isCluster(), cluster)
		}
		d, err := s.AllowN(ctx, "k", lim, 2)
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("Open(%q): AllowN = %+v, %v; want allowed, remaining 0", url, d, err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if _, err := s.AllowN(ctx, "k", lim, 1); !errors.Is(err, sluice.ErrClosed) {
			t.Fatalf("AllowN after Close: err = %v, want ErrClosed", err)
		}
	}
	t.Run("acl", func(t *testing.T) {
		srv := redistest.Server(t, redistest.WithUser("app", "s3cret"))
		check(t, "redis://app:s3cret@"+srv.Addr, false)
		if _, err := Open(ctx, "redis://app:wrong@"+srv.Addr); err == nil || strings.Contains(err.Error(), "wrong") {
			t.Errorf("Open with a wrong password: error = %v, want one that hides the password", err)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.Cluster(t, 3, 0)
		check(t, "redis+cluster://"+strings.Join(cl.Addrs(), ","), true)
	})
	t.Run("sentinel", func(t *testing.T) {
		si := redistest.Sentinel(t, 0)
		check(t, "redis+sentinel://"+si.Addr()+"?master="+redistest.MasterName, false)
	})
}
