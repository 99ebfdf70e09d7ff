package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// newRueidis returns a rueidis client for addrs, closed when t ends.
func newRueidis(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("rueidis.NewClient(%v): %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

// newGoRedis returns a go-redis client (a ClusterClient for a cluster),
// with retries off, closed when t ends.
func newGoRedis(t testing.TB, cluster bool, addrs ...string) redis.UniversalClient {
	t.Helper()
	var c redis.UniversalClient
	if cluster {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1})
	} else {
		c = redis.NewClient(&redis.Options{Addr: addrs[0], MaxRetries: -1})
	}
	t.Cleanup(func() { c.Close() })
	return c
}

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

func TestOpen(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	s, err := Open(ctx, "redis://"+srv.Addr)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	d, err := s.AllowN(ctx, "k", sluice.PerSecond(2), 2)
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("AllowN = %+v, %v; want allowed, remaining 0", d, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.AllowN(ctx, "k", sluice.PerSecond(2), 1); err != sluice.ErrClosed {
		t.Fatalf("AllowN after Close: err = %v, want ErrClosed", err)
	}
	_ = time.Second
}
