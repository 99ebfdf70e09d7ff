package tiered_test

import (
	"testing"

	"github.com/sluicehq/sluice/bench/internal/redisserver"
)

// startRedis starts a redis-server for b and stops it when b ends; it skips
// (fails under CI=true) when the binary is missing.
func startRedis(b testing.TB) *redisserver.Server {
	b.Helper()
	redisserver.Require(b)
	s, err := redisserver.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Stop)
	return s
}
