package main

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// tieredFlags put a local tier in front of Redis, and say how it leases (a
// group of redisFlags).
type tieredFlags struct {
	on            bool
	leaseMax      int
	leaseFraction float64
	leaseLifetime time.Duration
	leaseRefresh  float64
}

func (g *tieredFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&g.on, "tiered", false, "with --redis: put a local tier in front of Redis (cached denials: exact, no extra admissions)")
	fs.IntVar(&g.leaseMax, "lease-max", 0, "with --tiered: take up to `N` units per Redis call and spend them locally (fixed and sliding windows; 0: no leases)")
	fs.Float64Var(&g.leaseFraction, "lease-fraction", 0.1, "with --lease-max: a lease is at most this fraction of a limit's capacity")
	fs.DurationVar(&g.leaseLifetime, "lease-lifetime", time.Second, "with --lease-max: longest time a lease is spent")
	fs.Float64Var(&g.leaseRefresh, "lease-refresh-ahead", 0.25, "with --lease-max: take a key's next lease in the background once its lease is down to this `fraction` (0 < F < 1), so that steady traffic never waits for Redis; 0 turns it off")
}

// set reports whether --tiered or --lease-max asks for a local tier.
func (g *tieredFlags) set() bool { return g.on || g.leaseMax > 0 }

func (g *tieredFlags) validate() error {
	if g.leaseMax > 0 && !g.on {
		return errors.New("--lease-max needs --tiered")
	}
	if g.leaseRefresh < 0 || g.leaseRefresh >= 1 {
		return fmt.Errorf("--lease-refresh-ahead %v: want 0 (off) or a fraction in (0, 1)", g.leaseRefresh)
	}
	if g.leaseMax < 0 || (g.leaseMax > 0 && (g.leaseFraction <= 0 || g.leaseFraction > 1 || g.leaseLifetime <= 0)) {
		return fmt.Errorf("--lease-max %d, --lease-fraction %v, --lease-lifetime %v: want N >= 0, a fraction in (0, 1] and a positive lifetime", g.leaseMax, g.leaseFraction, g.leaseLifetime)
	}
	return nil
}
