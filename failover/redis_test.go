package failover_test

import (
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/redisclock"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// A healthy redis-server behind failover decides exactly as redisstore
// alone. The deadline is long here: under -race on a busy machine some of
// the suite's concurrent calls take more than the default 50ms, and a
// degraded decision is not what this test is about (the fault tests are).
func TestConformanceRedis(t *testing.T) {
	srv := redistest.Server(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("rueidis.NewClient(%s): %v", srv.Addr, err)
	}
	t.Cleanup(c.Close)
	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		return mustNew(t, redisstore.NewRueidis(c), failover.WithTimeout(5*time.Second))
	}, sluicetest.WithClock(func(t *testing.T, clk *sluicetest.Clock) sluice.Store {
		return mustNew(t, redisstore.NewRueidis(c, redisclock.Option[redisstore.Option](clk.Now)), failover.WithClock(clk.Now), failover.WithTimeout(5*time.Second))
	}))
}
