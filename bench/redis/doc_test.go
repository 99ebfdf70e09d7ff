// Package redis benchmarks sluice's redisstore against the Redis rate
// limiters people use today, on one local redis-server that the package
// starts itself (on a free loopback port; skipped when redis-server is
// missing, failed under CI=true):
//
//   - BenchmarkDecisions: decisions/s, p50/p99 latency and the server's
//     command time per decision, with a fixed pool of c workers (c = 1, 16,
//     64, 256), for 10,000 keys and for one hot key, per implementation:
//     sluice through rueidis and through go-redis for every algorithm,
//     redis_rate v10 (GCRA), ulule/limiter v3 (redis store), python-zset
//     (the sliding-log ZSET script of a widely used Python/Redis limiter,
//     through go-redis), EVALSHA of a one-line INCR through rueidis (the
//     cheapest scripted decision), and floor-gcra, the least a GCRA script
//     on Redis time can do (TIME, GET, SET PX).
//   - TestMemoryUsage: Redis bytes per key (MEMORY USAGE) after 100
//     admissions per key at 100/minute, and bytes per log entry.
//   - TestRatios: the throughput and latency targets as ratios, from a
//     saved benchmark run (SLUICE_BENCH_FILE).
//
// Run:
//
//	go test -run '^$' -bench Decisions -benchtime 100000x -count 5 ./redis | tee redis.txt
//	SLUICE_BENCH_FILE=redis.txt go test -run TestRatios -v ./redis
//	go test -run TestMemoryUsage -v ./redis
package redis
