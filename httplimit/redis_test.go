package httplimit_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// newRedisStore starts a redis-server (skipping when the binary is
// missing, unless CI=true) and returns a redisstore on it.
func newRedisStore(t *testing.T, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	srv := redistest.Server(t)
	s, err := redisstore.Open(context.Background(), "redis://"+srv.Addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
