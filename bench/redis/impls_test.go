package redis

import "time"

// impls lists every implementation BenchmarkDecisions runs.
func impls() []impl { return peerImpls() }

// memImpls lists the implementations TestMemoryUsage measures at
// 100/minute.
func memImpls() []impl {
	return []impl{
		redisRate(memRate, memRate, time.Minute),
		ulule(memRate, time.Minute),
		seed(memRate, time.Minute),
	}
}
