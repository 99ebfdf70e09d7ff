package memcachestore

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
)

// OpenTestClock is Open deciding on now, with every item living an hour
// longer and every expiry relative: a test clock stands still, or runs
// far from the servers' clocks, while items expire in real time.
func OpenTestClock(ctx context.Context, o Options, now func() time.Time) (*Store, error) {
	o.Clock = now
	s, err := Open(ctx, o)
	if err == nil {
		s.testSlack = true
	}
	return s, err
}

// Name is the item name of key's state under lim at now (µs), as the
// store writes it.
func (s *Store) Name(key string, lim sluice.Limit, now int64) (string, error) {
	o := op{lim: lim, p: params(lim), now: now}
	b, err := s.name(nil, key, &o)
	return string(b), err
}

// Exptime is the expiry the store gives a state written at now that
// matters for ttl (µs).
func (s *Store) Exptime(now, ttl int64) int64 { return s.exptime(now, ttl) }

// SetBeforeSwap makes f run between every compare-and-swap decision's
// read and its write, until the test ends.
func SetBeforeSwap(t interface{ Cleanup(func()) }, f func(name string)) {
	beforeSwap = func(name []byte) { f(string(name)) }
	t.Cleanup(func() { beforeSwap = nil })
}

// RefreshSRV resolves the SRV name now, as the refresher does.
func (s *Store) RefreshSRV(ctx context.Context) error { return s.refreshOnce(ctx) }
