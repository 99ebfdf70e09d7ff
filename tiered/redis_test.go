package tiered_test

import (
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redisclock"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/tiered"
)

func newRueidis(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("rueidis.NewClient(%v): %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestConformanceRedis runs the suite on tiered over a real redis-server:
// the denial cache alone (exact), and with leases (MayDenyEarly: a lease
// may deny earlier than an exact store when another holder has units).
func TestConformanceRedis(t *testing.T) {
	srv := redistest.Server(t)
	c := newRueidis(t, srv.Addr)
	for _, tt := range []struct {
		name  string
		opts  []tiered.Option
		suite []sluicetest.Option
	}{
		{"DenialCache", nil, nil},
		{"Leases", []tiered.Option{tiered.WithLeases(64, 0.5, 50*time.Millisecond)}, []sluicetest.Option{sluicetest.MayDenyEarly()}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sluicetest.Run(t, func(t *testing.T) sluice.Store {
				s := newTiered(t, redisstore.NewRueidis(c), tt.opts...)
				t.Cleanup(func() { s.Close() })
				return s
			}, append(tt.suite, sluicetest.WithClock(func(t *testing.T, clk *sluicetest.Clock) sluice.Store {
				s := newTiered(t, redisstore.NewRueidis(c, redisclock.Option[redisstore.Option](clk.Now)), append(tt.opts, tiered.WithClock(clk.Now))...)
				t.Cleanup(func() { s.Close() })
				return s
			}))...)
		})
	}
}
