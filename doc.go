// Package sluice is a distributed rate limiter: five exact algorithms
// (fixed window, sliding-window log, sliding-window counter, token bucket
// and GCRA) behind one [Store] interface, with a caller-facing [Limiter]
// that offers Allow, AllowN, Wait and the all-or-nothing AllowMulti.
//
// A Store applies one algorithm step for one key atomically. The in-process
// store lives in package memstore; the Redis store, whose every decision is
// one Lua script and one round trip on Redis time, lives in redisstore.
// Wrappers add a deliberate way to fail while the shared store does not
// answer, chosen per limit by its [FailureMode] (failover), and a local
// tier that spares the hot path a round trip (tiered).
//
// A denial is a [Decision] with Allowed false, never an error: an error means
// that no decision could be made (invalid input, store unreachable, closed).
// Invalid input is a [*LimitError] naming the field.
//
// All stores share the same exact semantics: time is integer microseconds,
// a denied request changes no state, n = 0 is a peek, and time never runs
// backwards for a key.
package sluice
