package memcachestore_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/memcachedtest"
	"github.com/sluicehq/sluice/memcachestore"
)

// TestNoAllocs: a decision on a context without a Done channel allocates
// nothing: admitted or denied, by compare-and-swap or incr, or a peek.
func TestNoAllocs(t *testing.T) {
	m := memcachedtest.Server(t)
	s := open(t, memcachestore.Options{}, m.Addr)
	for _, tt := range []struct {
		name string
		lim  sluice.Limit
		n    int
	}{
		{"admitted", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1 << 30, Period: time.Hour}, 1},
		{"denied", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Hour}, 1},
		{"peek", sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 10, Period: time.Hour}, 0},
		{"charge", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour, Counting: sluice.CountAll}, 1},
	} {
		allow(t, s, "k", tt.lim, tt.n)
		if n := testing.AllocsPerRun(200, func() { allow(t, s, "k", tt.lim, tt.n) }); n != 0 {
			t.Errorf("%s: %v allocations per decision, want 0", tt.name, n)
		}
	}
}
