package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/engine"
)

// defaultMemoryMaxKeys is the default of --memory-max-keys. A state of the
// memory store costs 64 bytes in its shard's table (85 to 170 with the
// table's spare room) plus its key: about 250 MB for a million states with
// keys of up to 64 bytes. The worst a caller can make a state cost is a key
// of 1 KiB and a full sliding log (8 KB at --max-log-rate's default of
// 500): about 9 GB for a million; lower the bound on a small machine.
const defaultMemoryMaxKeys = 1_000_000

// limitsFlags are the bounds on what callers send (engine.Bounds) and on the
// memory store; docs/bounds.md explains each default.
type limitsFlags struct {
	maxRate, maxLogRate, maxBurst        int
	maxHits                              int
	maxPeriod                            time.Duration
	maxDescriptors, maxDescriptorEntries int
	memoryMaxKeys                        int
	maxPermits                           int
	maxPermitLease                       time.Duration
	maxPermitsPerClient                  int
}

func (g *limitsFlags) register(fs *flag.FlagSet) {
	d := engine.DefaultBounds
	fs.IntVar(&g.maxRate, "max-rate", d.MaxRate, "largest `rate` a caller may send: /v1/check's rate, an RLS descriptor's limit override")
	fs.IntVar(&g.maxLogRate, "max-log-rate", d.MaxLogRate, "largest `rate` of a sliding_log limit a caller may send (/v1/check): its log keeps an entry per time of admission, up to the rate; the configuration's rules may have any rate")
	fs.IntVar(&g.maxBurst, "max-burst", d.MaxBurst, "largest `burst` of a /v1/check limit")
	fs.DurationVar(&g.maxPeriod, "max-period", d.MaxPeriod, "longest `period` a caller may send: /v1/check's period, an override's unit")
	fs.IntVar(&g.maxHits, "max-hits", d.MaxHits, "largest cost of one request: hits_addend (of a request or a descriptor), /v1/check's cost")
	fs.IntVar(&g.maxDescriptors, "max-descriptors", d.MaxDescriptors, "most descriptors in one ShouldRateLimit or /json request")
	fs.IntVar(&g.maxDescriptorEntries, "max-descriptor-entries", d.MaxDescriptorEntries, "most entries in one descriptor")
	fs.IntVar(&g.maxPermits, "max-permits", d.MaxPermits, "largest `max` of a concurrency limit a caller may send: /v1/acquire's and /v1/extend's max (at most 10000)")
	fs.DurationVar(&g.maxPermitLease, "max-permit-lease", d.MaxPermitLease, "longest `lease` a caller may send: /v1/acquire's and /v1/extend's (work that takes longer extends its permit)")
	fs.IntVar(&g.maxPermitsPerClient, "max-permits-per-client", d.MaxPermitsPerClient, "most permits one client (its address, as /v1/auth establishes it) holds at once through /v1/acquire; beyond, 429 until one is released or its lease ends")
	fs.IntVar(&g.memoryMaxKeys, "memory-max-keys", defaultMemoryMaxKeys, "most states the memory store holds (one per key, algorithm and period), and with --redis the local limiter that --failure-mode open uses while Redis is down: a new one first removes expired states, then evicts the live state that expires soonest of a sample; 0 is unbounded (with --redis: failover's default of 100000)")
}

func (g *limitsFlags) validate() error {
	for _, b := range []struct {
		name string
		v    int
	}{
		{"--max-rate", g.maxRate}, {"--max-log-rate", g.maxLogRate}, {"--max-burst", g.maxBurst}, {"--max-hits", g.maxHits},
		{"--max-descriptors", g.maxDescriptors}, {"--max-descriptor-entries", g.maxDescriptorEntries},
		{"--max-permits-per-client", g.maxPermitsPerClient},
	} {
		if b.v < 1 {
			return fmt.Errorf("%s %d: must be >= 1", b.name, b.v)
		}
	}
	if g.maxPermits < 1 || g.maxPermits > sluice.MaxPermits {
		return fmt.Errorf("--max-permits %d: must be within [1, %d]", g.maxPermits, sluice.MaxPermits)
	}
	if g.maxPermitLease < sluice.MinLease || g.maxPermitLease > sluice.MaxLease {
		return fmt.Errorf("--max-permit-lease %v: must be within [%v, %v]", g.maxPermitLease, sluice.MinLease, sluice.MaxLease)
	}
	if g.maxPeriod < time.Millisecond {
		return fmt.Errorf("--max-period %v: must be >= 1ms", g.maxPeriod)
	}
	if g.memoryMaxKeys < 0 {
		return fmt.Errorf("--memory-max-keys %d: must be >= 0 (0 is unbounded)", g.memoryMaxKeys)
	}
	return nil
}

// bounds are the bounds of the RLS service and the HTTP server.
func (g *limitsFlags) bounds() engine.Bounds {
	return engine.Bounds{
		MaxRate: g.maxRate, MaxLogRate: g.maxLogRate, MaxBurst: g.maxBurst, MaxPeriod: g.maxPeriod, MaxHits: g.maxHits,
		MaxDescriptors: g.maxDescriptors, MaxDescriptorEntries: g.maxDescriptorEntries, MaxPermits: g.maxPermits,
		MaxPermitLease: g.maxPermitLease, MaxPermitsPerClient: g.maxPermitsPerClient,
	}
}
