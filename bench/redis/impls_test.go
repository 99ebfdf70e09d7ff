package redis

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

var algorithms = []sluice.Algorithm{
	sluice.GCRA, sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.TokenBucket,
}

// sluiceImpl is redisstore through rueidis (client "rueidis") or go-redis
// (client "goredis", retries off as redisstore recommends).
func sluiceImpl(client string, lim sluice.Limit, opts ...redisstore.Option) impl {
	name := "sluice-" + client + "-" + lim.Algorithm.String()
	return impl{name: name, setup: func(tb testing.TB, s *server) (decideFunc, func()) {
		var st *redisstore.Store
		var closeClient func()
		switch client {
		case "rueidis":
			c := newRueidis(tb, s)
			st, closeClient = redisstore.NewRueidis(c, opts...), c.Close
		case "goredis":
			c := goredis.NewClient(&goredis.Options{Addr: s.Addr, MaxRetries: -1})
			st, closeClient = redisstore.NewGoRedis(c, opts...), func() { c.Close() }
		default:
			tb.Fatalf("unknown client %q", client)
		}
		return func(ctx context.Context, key string) error {
				_, err := st.AllowN(ctx, key, lim, 1)
				return err
			}, func() {
				st.Close()
				closeClient()
			}
	}}
}

// logRate is the sliding logs' limit (sluice's and the Python ZSET script's).
const logRate = benchRate

// impls lists every implementation BenchmarkDecisions runs, at benchRate
// per second per key.
func impls() []impl {
	var out []impl
	for _, client := range []string{"rueidis", "goredis"} {
		for _, a := range algorithms {
			out = append(out, sluiceImpl(client, sluice.Limit{Algorithm: a, Rate: benchRate, Period: time.Second}))
		}
	}
	return append(out, peerImpls()...)
}

// memImpls lists the implementations TestMemoryUsage measures at
// 100/minute.
func memImpls() []impl {
	var out []impl
	for _, a := range algorithms {
		out = append(out, sluiceImpl("rueidis", sluice.Limit{Algorithm: a, Rate: memRate, Period: memPeriod}))
	}
	// Key names count in MEMORY USAGE: the same state without the
	// "sluice:" prefix.
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.FixedWindow} {
		im := sluiceImpl("rueidis", sluice.Limit{Algorithm: a, Rate: memRate, Period: memPeriod}, redisstore.WithPrefix(""))
		im.name += "-noprefix"
		out = append(out, im)
	}
	msLayout := sluiceImpl("rueidis", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: memRate, Period: memPeriod}, redisstore.WithMillisecondLayout())
	msLayout.name = "sluice-rueidis-ms_layout"
	return append(out,
		msLayout,
		redisRate(memRate, memRate, memPeriod),
		ulule(memRate, memPeriod),
		pythonZset(memRate, memPeriod),
	)
}
