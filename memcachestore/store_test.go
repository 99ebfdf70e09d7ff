package memcachestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/testserver/memcachedtest"
	"github.com/sluicehq/sluice/memcachestore"
	"github.com/sluicehq/sluice/sluicetest"
)

// decided are the algorithms the store decides.
var decided = []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow, sluice.TokenBucket, sluice.GCRA}

// busyTimeout is the calls' timeout of a test that does not test
// timeouts: long enough for a machine whose cores are busy with other work
// (the default, 500ms, is not).
const busyTimeout = 30 * time.Second

// open opens a store on the servers at addrs, closed when the test ends.
func open(t testing.TB, o memcachestore.Options, addrs ...string) *memcachestore.Store {
	t.Helper()
	o.Servers = addrs
	if o.Timeout == 0 {
		o.Timeout = busyTimeout
	}
	s, err := memcachestore.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openClock is open deciding on now (OpenTestClock).
func openClock(t testing.TB, now func() time.Time, o memcachestore.Options, addrs ...string) *memcachestore.Store {
	t.Helper()
	o.Servers = addrs
	if o.Timeout == 0 {
		o.Timeout = busyTimeout
	}
	s, err := memcachestore.OpenTestClock(context.Background(), o, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	m := memcachedtest.Server(t)
	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		return open(t, memcachestore.Options{}, m.Addr)
	}, sluicetest.WithClock(func(t *testing.T, c *sluicetest.Clock) sluice.Store {
		return openClock(t, c.Now, memcachestore.Options{}, m.Addr)
	}), sluicetest.WithAlgorithms(decided...), sluicetest.FixedWindowsApart())
}

// TestConformanceRealTime runs the suite on the real clock, where items
// expire as the store tells memcached.
func TestConformanceRealTime(t *testing.T) {
	m := memcachedtest.Server(t)
	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		return open(t, memcachestore.Options{}, m.Addr)
	}, sluicetest.WithAlgorithms(decided...), sluicetest.FixedWindowsApart())
}

// TestConformanceFailover: a healthy memcached behind failover decides
// exactly as the store alone, and a sliding log is still refused, not
// decided by a failure mode. The deadline is long: a degraded decision
// is not what this test is about (the fault tests are).
func TestConformanceFailover(t *testing.T) {
	m := memcachedtest.Server(t)
	wrap := func(t *testing.T, s sluice.Store, opts ...failover.Option) sluice.Store {
		fs, err := failover.New(s, append(opts, failover.WithTimeout(5*time.Second))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fs.Close() })
		return fs
	}
	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		return wrap(t, open(t, memcachestore.Options{}, m.Addr))
	}, sluicetest.WithClock(func(t *testing.T, c *sluicetest.Clock) sluice.Store {
		return wrap(t, openClock(t, c.Now, memcachestore.Options{}, m.Addr), failover.WithClock(c.Now))
	}), sluicetest.WithAlgorithms(decided...), sluicetest.FixedWindowsApart())
}
