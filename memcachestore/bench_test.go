package memcachestore_test

import (
	"testing"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/memcachedtest"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/memcachestore"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// BenchmarkStores runs sluicetest.Bench (per algorithm the store decides:
// keys=1 and keys=10000, serial and parallel, with allocations) on
// memcachestore and, in the same run, on memstore and redisstore (rueidis,
// batching on), so that its figures read as ratios to theirs:
//
//	go test -run '^$' -bench Stores -count 10 ./memcachestore | tee bench.txt
//	benchstat -col /store bench.txt
func BenchmarkStores(b *testing.B) {
	algs := sluicetest.WithAlgorithms(decided...)
	b.Run("store=memcache", func(b *testing.B) {
		m := memcachedtest.Server(b)
		sluicetest.Bench(b, func(b *testing.B) sluice.Store {
			return open(b, memcachestore.Options{MaxIdleConns: 64}, m.Addr)
		}, algs)
	})
	b.Run("store=memory", func(b *testing.B) {
		sluicetest.Bench(b, func(b *testing.B) sluice.Store {
			s := memstore.New()
			b.Cleanup(func() { s.Close() })
			return s
		}, algs)
	})
	b.Run("store=redis", func(b *testing.B) {
		srv := redistest.Server(b)
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		sluicetest.Bench(b, func(b *testing.B) sluice.Store { return redisstore.NewRueidis(c) }, algs)
	})
}
