package refstats

import "github.com/sluicehq/sluice/service/engine"

// loaderStats are the reference's runtime loader's statistics (its
// configuration files under RUNTIME_ROOT): runtime.load_attempts,
// runtime.load_failures and the gauge runtime.num_values.
type loaderStats struct {
	attempts, failures *Counter
	values             *Gauge
}

// FilesRead counts a read of the configuration's files, as the
// reference's runtime loader counts a load of its directory: files is
// the number of files read; failed says that they could not be read (a
// file that reads but does not validate is ConfigLoaded's error, not
// this). The statistics exist from the first call: a configuration from
// xDS has none.
func (s *Stats) FilesRead(files int, failed bool) {
	s.mu.Lock()
	if s.loader.attempts == nil {
		s.loader = loaderStats{
			attempts: s.counter("runtime.load_attempts"),
			failures: s.counter("runtime.load_failures"),
			values:   s.st.Gauge(s.tags.Name("runtime.num_values")),
		}
	}
	l := s.loader
	s.mu.Unlock()
	l.attempts.Inc()
	if failed {
		l.failures.Inc()
		return
	}
	l.values.Set(uint64(max(files, 0)))
}

// Pool counts the connections of a connection pool to Redis, as the
// reference's ratelimit.<name>.cx_active (a gauge), cx_total and
// cx_local_close.
type Pool struct {
	active        *Gauge
	total, closes *Counter
}

// Pool returns the statistics of the Redis pool called name (redis_pool,
// or redis_per_second_pool for the per-second Redis); they are sent from
// now on, the gauge every flush.
func (s *Stats) Pool(name string) *Pool {
	p := "ratelimit." + name + "."
	return &Pool{active: s.st.Gauge(s.tags.Name(p + "cx_active")), total: s.counter(p + "cx_total"), closes: s.counter(p + "cx_local_close")}
}

// Opened counts a connection made.
func (p *Pool) Opened() {
	p.total.Inc()
	p.active.Add(1)
}

// Closed counts a connection closed.
func (p *Pool) Closed() {
	p.closes.Inc()
	p.active.Sub(1)
}

// LocalCache sends the counts of the local cache of over-limit keys as the
// reference's ratelimit.localcache gauges, read before each flush:
// entryCount (the keys held), hitCount (lookups that found their key:
// limits denied without a store call), missCount and lookupCount (both).
// The reference's other gauges there (evacuateCount, expiredCount,
// overwriteCount, averageAccessTime) are figures of its cache library's
// memory that sluice's cache does not have: they are not sent.
func (s *Stats) LocalCache(read func() engine.LocalCacheStats) {
	g := func(name string) *Gauge { return s.st.Gauge(s.tags.Name("ratelimit.localcache." + name)) }
	entries, hits, misses, lookups := g("entryCount"), g("hitCount"), g("missCount"), g("lookupCount")
	s.st.generate(func() {
		c := read()
		entries.Set(uint64(max(c.Entries, 0)))
		hits.Set(uint64(max(c.Hits, 0)))
		misses.Set(uint64(max(c.Misses, 0)))
		lookups.Set(uint64(max(c.Hits+c.Misses, 0)))
	})
}
