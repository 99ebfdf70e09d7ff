package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// Peers use their clients' default options, as their users would.

func newGoRedis(tb testing.TB, s *server) *goredis.Client {
	tb.Helper()
	return goredis.NewClient(&goredis.Options{Addr: s.Addr})
}

func newRueidis(tb testing.TB, s *server) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	if err != nil {
		tb.Fatalf("rueidis.NewClient(%s): %v", s.Addr, err)
	}
	return c
}

// redisRate is github.com/go-redis/redis_rate/v10 (GCRA, float math).
func redisRate(rate, burst int, period time.Duration) impl {
	return impl{name: "redis_rate", setup: func(tb testing.TB, s *server) (decideFunc, func()) {
		rdb := newGoRedis(tb, s)
		l := redis_rate.NewLimiter(rdb)
		lim := redis_rate.Limit{Rate: rate, Burst: burst, Period: period}
		return func(ctx context.Context, key string) error {
			_, err := l.Allow(ctx, key, lim)
			return err
		}, func() { rdb.Close() }
	}}
}

// ulule is github.com/ulule/limiter/v3 with its redis store (fixed
// window, INCRBY script).
func ulule(rate int, period time.Duration) impl {
	return impl{name: "ulule", setup: func(tb testing.TB, s *server) (decideFunc, func()) {
		rdb := newGoRedis(tb, s)
		store, err := ulredis.NewStoreWithOptions(rdb, limiter.StoreOptions{Prefix: "ulule"})
		if err != nil {
			tb.Fatalf("ulule store: %v", err)
		}
		l := limiter.New(store, limiter.Rate{Period: period, Limit: int64(rate)})
		return func(ctx context.Context, key string) error {
			_, err := l.Get(ctx, key)
			return err
		}, func() { rdb.Close() }
	}}
}

// pythonZsetScript is the sliding-log script of a widely used Python/Redis
// limiter, verbatim: client millisecond time, a ZSET member
// "<now_ms>-<8 hex>" per attempt.
const pythonZsetScript = `
local key, now_ms      = KEYS[1], tonumber(ARGV[1])
local window_ms, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local member           = ARGV[4]
redis.call('ZREMRANGEBYSCORE', key, 0, now_ms - window_ms)
local used = redis.call('ZCARD', key)
if used < limit then
  redis.call('ZADD', key, now_ms, member)
  redis.call('PEXPIRE', key, window_ms)
  return {1, limit - used - 1, 0}
end
local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
return {0, 0, (tonumber(oldest[2]) + window_ms) - now_ms}
`

// pythonZset runs pythonZsetScript through go-redis (EVALSHA, EVAL on
// NOSCRIPT), as a Python worker runs it with redis-py's register_script
// (EVALSHA first).
func pythonZset(rate int, period time.Duration) impl {
	return impl{name: "python-zset", setup: func(tb testing.TB, s *server) (decideFunc, func()) {
		rdb := newGoRedis(tb, s)
		script := goredis.NewScript(pythonZsetScript)
		windowMs := period.Milliseconds()
		return func(ctx context.Context, key string) error {
			now := time.Now().UnixMilli()
			member := fmt.Sprintf("%d-%08x", now, rand.Uint32())
			return script.Run(ctx, rdb, []string{"rl:" + key}, now, windowMs, rate, member).Err()
		}, func() { rdb.Close() }
	}}
}

// evalshaIncr is the cheapest possible scripted decision: EVALSHA of a
// one-line INCR through rueidis with auto-pipelining.
func evalshaIncr() impl {
	return impl{name: "evalsha-incr", setup: func(tb testing.TB, s *server) (decideFunc, func()) {
		c := newRueidis(tb, s)
		script := rueidis.NewLuaScript("return redis.call('INCR', KEYS[1])")
		return func(ctx context.Context, key string) error {
			return script.Exec(ctx, c, []string{"incr:" + key}, nil).Error()
		}, c.Close
	}}
}

// floorGCRAScript is the least a GCRA decision on Redis time can do:
// TIME, GET, SET PX, no validation, no Remaining or reset.
const floorGCRAScript = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local T = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new = tat + T
if new - now > tonumber(ARGV[2]) * T then return {0, new - now - tonumber(ARGV[2]) * T} end
redis.call('SET', KEYS[1], string.format('%d', new), 'PX', math.ceil((new - now) / 1000))
return {1, 0}
`

// floorGCRA runs floorGCRAScript through rueidis: not a limiter to use, a
// floor that shows what any Redis-time GCRA script costs.
func floorGCRA(rate int, period time.Duration) impl {
	return impl{name: "floor-gcra", setup: func(tb testing.TB, s *server) (decideFunc, func()) {
		c := newRueidis(tb, s)
		script := rueidis.NewLuaScript(floorGCRAScript)
		args := []string{fmt.Sprint(period.Microseconds() / int64(rate)), fmt.Sprint(rate)}
		return func(ctx context.Context, key string) error {
			return script.Exec(ctx, c, []string{"floor:" + key}, args).Error()
		}, c.Close
	}}
}

// peerImpls are the libraries sluice is compared with.
func peerImpls() []impl {
	return []impl{
		evalshaIncr(),
		floorGCRA(benchRate, time.Second),
		redisRate(benchRate, benchRate, time.Second),
		ulule(benchRate, time.Second),
		pythonZset(logRate, time.Second),
	}
}
