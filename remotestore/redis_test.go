package remotestore_test

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestConformanceRedis runs the conformance suite against a Store
// reaching a store API over Redis (a real redis-server), as a region
// reaches a home sluice: every capability crosses the wire to the Redis
// scripts and back. Redis keeps its own time, so the cases that need an
// injected clock run over the memory store only (TestConformance).
func TestConformanceRedis(t *testing.T) {
	srv := redistest.Server(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		return dial(t, serve(t, redisstore.NewRueidis(c)))
	})
}
