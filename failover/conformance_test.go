package failover_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// A healthy shared store behind failover decides exactly as it would alone.
// The deadline is long: on a loaded machine under -race a goroutine can be
// descheduled past the default 50ms, and a degraded decision is not what
// this test is about.
func TestConformance(t *testing.T) {
	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		m := memstore.New()
		t.Cleanup(func() { m.Close() })
		return mustNew(t, m, failover.WithTimeout(5*time.Second))
	}, sluicetest.WithClock(func(t *testing.T, c *sluicetest.Clock) sluice.Store {
		m := memstore.New(memstore.WithClock(c.Now))
		t.Cleanup(func() { m.Close() })
		return mustNew(t, m, failover.WithClock(c.Now), failover.WithTimeout(5*time.Second))
	}))
}
