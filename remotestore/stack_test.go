package remotestore_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/stack"
	"github.com/sluicehq/sluice/tiered"
)

// TestStackConformance: the stack over a remote store, as sluice serve
// --remote-store builds it, decides as the stack over any shared store:
// failover alone, with the denial cache, and with leases (reserved from
// the served store over the wire, and returned).
func TestStackConformance(t *testing.T) {
	for _, tt := range []struct {
		name  string
		local bool
		opts  []tiered.Option
		suite []sluicetest.Option
	}{
		{"Failover", false, nil, nil},
		{"DenialCache", true, nil, nil},
		{"Leases", true, []tiered.Option{tiered.WithLeases(64, 0.5, 50*time.Millisecond)}, []sluicetest.Option{sluicetest.MayDenyEarly()}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			build := func(t *testing.T, now func() time.Time) sluice.Store {
				mo, fo, to := []memstore.Option{}, []failover.Option{failover.WithTimeout(5 * time.Second)}, tt.opts
				if now != nil {
					mo, fo, to = append(mo, memstore.WithClock(now)), append(fo, failover.WithClock(now)), append(to, tiered.WithClock(now))
				}
				rs := dial(t, serve(t, newMem(t, mo...)))
				opts := []stack.Option{stack.WithFailover(fo...)}
				if tt.local {
					opts = append(opts, stack.WithTiered(to...))
				}
				st, err := stack.New(rs, opts...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				return st
			}
			sluicetest.Run(t, func(t *testing.T) sluice.Store { return build(t, nil) },
				append(tt.suite, sluicetest.WithClock(func(t *testing.T, c *sluicetest.Clock) sluice.Store { return build(t, c.Now) }))...)
		})
	}
}
