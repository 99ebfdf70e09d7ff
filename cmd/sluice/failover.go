package main

import (
	"flag"
	"fmt"

	"github.com/sluicehq/sluice"
)

// failoverFlags say how serve decides while the shared store is down (a
// group of redisFlags).
type failoverFlags struct {
	modeName      string             // --failure-mode as given
	mode          sluice.FailureMode // modeName, parsed by validate
	replicas      int
	readyzBreaker bool
}

func (g *failoverFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.modeName, "failure-mode", "closed", "when the shared store fails: `closed` (deny), error (no decision: gRPC Unknown, HTTP 503, for the caller's own policy, as envoyproxy/ratelimit answers) open (admit through a local limit at rate/replicas) or uncounted (decide each request as if nothing had been counted, counting nothing: envoyproxy/ratelimit's answer while its memcached is down); a rule's failure_mode overrides it")
	fs.IntVar(&g.replicas, "replicas", 0, "number of sluice replicas sharing the store: each admits rate/N while the store is down; required by --failure-mode open with --redis")
	fs.BoolVar(&g.readyzBreaker, "readyz-breaker", false, "make /readyz fail while the shared store's circuit breaker is open")
}

func (g *failoverFlags) validate() error {
	m, err := sluice.ParseFailureMode(g.modeName)
	if err != nil || (m != sluice.FailClosed && m != sluice.FailOpen && m != sluice.FailError && m != sluice.FailUncounted) {
		return fmt.Errorf("--failure-mode %q: want closed, error, open or uncounted", g.modeName)
	}
	g.mode = m
	if g.replicas < 0 {
		return fmt.Errorf("--replicas %d: must be >= 0", g.replicas)
	}
	return nil
}
