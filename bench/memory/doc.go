// Package memory benchmarks sluice's memstore against the in-process
// limiters Go services commonly use: golang.org/x/time/rate (one
// *rate.Limiter per key, in a map behind a mutex or in a sync.Map) and
// github.com/sethvargo/go-limiter/memorystore. Every limiter allows 1000
// events per second per key (burst 1000).
//
// Run and compare:
//
//	go test -run '^$' -bench . -benchmem -count=10 -cpu=1,2 ./memory/ > mem.txt
//	benchstat -col /impl mem.txt
package memory
