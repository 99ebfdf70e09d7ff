package redis

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/internal/redisserver"
)

// server is the one redis-server every benchmark in the package shares,
// started on first use and stopped by TestMain, with a client to inspect
// it.
type server struct {
	*redisserver.Server
	admin *goredis.Client
}

var (
	shared     *server
	sharedErr  error
	sharedOnce sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.admin.Close()
		shared.Stop()
	}
	os.Exit(code)
}

// redisServer returns the shared server, skipping (or, under CI=true,
// failing) when redis-server is not installed.
func redisServer(tb testing.TB) *server {
	tb.Helper()
	redisserver.Require(tb)
	sharedOnce.Do(func() {
		rs, err := redisserver.Start()
		if err != nil {
			sharedErr = err
			return
		}
		shared = &server{Server: rs, admin: goredis.NewClient(&goredis.Options{Addr: rs.Addr})}
	})
	if sharedErr != nil {
		tb.Fatal(sharedErr)
	}
	return shared
}

func (s *server) flush(tb testing.TB) {
	tb.Helper()
	if err := s.admin.FlushAll(context.Background()).Err(); err != nil {
		tb.Fatalf("FLUSHALL: %v", err)
	}
}

// commandUsec is the server's total command execution time so far, in µs
// (the sum of usec over INFO commandstats).
func (s *server) commandUsec(tb testing.TB) int64 {
	tb.Helper()
	info, err := s.admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatalf("INFO commandstats: %v", err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		_, rest, ok := strings.Cut(line, "usec=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			tb.Fatalf("INFO commandstats line %q: %v", line, err)
		}
		total += n
	}
	return total
}
