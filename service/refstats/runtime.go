package refstats

import "runtime"

// runtimeStats are the Go runtime's statistics that the reference sends
// under ratelimit.go (lyft/gostats's runtime statistics), set before each
// flush.
type runtimeStats struct {
	alloc, sys, heapAlloc, heapSys, heapIdle, heapInuse, heapReleased, heapObjects *Gauge
	nextGC, lastGC, gcCPUPercent, numGoroutine                                     *Gauge
	totalAlloc, mallocs, frees, pauseTotalNs, numGC                                *Counter
}

func newRuntimeStats(st *Store, tags Tags) *runtimeStats {
	g := func(name string) *Gauge { return st.Gauge(tags.Name("ratelimit.go." + name)) }
	c := func(name string) *Counter { return st.Counter(tags.Name("ratelimit.go." + name)) }
	return &runtimeStats{
		alloc: g("alloc"), totalAlloc: c("totalAlloc"), sys: g("sys"), mallocs: c("mallocs"), frees: c("frees"),
		heapAlloc: g("heapAlloc"), heapSys: g("heapSys"), heapIdle: g("heapIdle"), heapInuse: g("heapInuse"),
		heapReleased: g("heapReleased"), heapObjects: g("heapObjects"),
		nextGC: g("nextGC"), lastGC: g("lastGC"), pauseTotalNs: c("pauseTotalNs"), numGC: c("numGC"),
		gcCPUPercent: g("gcCPUPercent"), numGoroutine: g("numGoroutine"),
	}
}

// generate reads the runtime's memory statistics (a stop of the world of
// microseconds, once per flush) into the statistics.
func (r *runtimeStats) generate() {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	r.alloc.Set(m.Alloc)
	r.totalAlloc.Set(m.TotalAlloc)
	r.sys.Set(m.Sys)
	r.mallocs.Set(m.Mallocs)
	r.frees.Set(m.Frees)
	r.heapAlloc.Set(m.HeapAlloc)
	r.heapSys.Set(m.HeapSys)
	r.heapIdle.Set(m.HeapIdle)
	r.heapInuse.Set(m.HeapInuse)
	r.heapReleased.Set(m.HeapReleased)
	r.heapObjects.Set(m.HeapObjects)
	r.nextGC.Set(m.NextGC)
	r.lastGC.Set(m.LastGC)
	r.pauseTotalNs.Set(m.PauseTotalNs)
	r.numGC.Set(uint64(m.NumGC))
	r.gcCPUPercent.Set(uint64(m.GCCPUFraction * 100))
	r.numGoroutine.Set(uint64(runtime.NumGoroutine()))
}
