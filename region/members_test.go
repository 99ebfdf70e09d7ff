package region_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/region"
	"github.com/sluicehq/sluice/tiered"
)

// A region's processes lease from its Store (tiered leases, taken ahead,
// over region.Store's Reserve): through a partition of that region, the
// units they lease, granted or of the allowance, are spent within their
// window, and no window admits more than the limit.
func TestMembersThroughPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		home := newHome(t)
		lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Second, FailureMode: sluice.FailOpen}
		var stores []*region.Store
		var wans []*wan
		for i, name := range []string{"eu", "us", "ap"} {
			w := newWAN(home, 80*time.Millisecond, 10*time.Millisecond, uint64(i))
			wans = append(wans, w)
			stores = append(stores, mustNew(t, w, name))
		}
		var members []*tiered.Store
		for range 3 {
			m, err := tiered.New(stores[2], tiered.WithLeases(50, 0.05, time.Second), tiered.WithRefreshAhead(0.5))
			if err != nil {
				t.Fatal(err)
			}
			members = append(members, m)
		}
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		start := time.Now()
		waits := []func() []rec{
			load(stores[0], 0, "k", lim, 1000, 9*time.Second),
			load(stores[1], 1, "k", lim, 1000, 9*time.Second),
		}
		for _, m := range members {
			waits = append(waits, load(m, 2, "k", lim, 333, 9*time.Second))
		}
		time.Sleep(3*time.Second + 300*time.Millisecond)
		wans[2].set("hole")
		time.Sleep(3 * time.Second)
		wans[2].set("")
		var recs []rec
		for _, f := range waits {
			recs = append(recs, f()...)
		}
		for _, m := range members {
			m.Close()
		}
		st := stores[2].Stats()
		for _, s := range stores {
			s.Close()
		}
		t.Logf("ap: %+v", st)
		if st.DegradedLeased == 0 {
			t.Errorf("the cut region leased nothing of its allowance")
		}
		for w, c := range perWindow(recs, time.Second) {
			t.Logf("window %v: %v", w.Sub(start), c)
			if c[3] > lim.Rate {
				t.Errorf("window %v: %d admitted (%v), limit %d", w.Sub(start), c[3], c, lim.Rate)
			}
		}
	})
}
