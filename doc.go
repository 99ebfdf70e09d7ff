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
//
// # Writing a store, or a layer between stores
//
// A store needs one method, AllowN: implement Store and pass it to New.
// Beyond it, a store may have capabilities, each a few methods: deciding
// several limits all or nothing (AllowMulti), reserving units and
// returning them (Reserve, Return), putting a key back to untouched
// (Reset), concurrency limits (Acquire, Release, Extend, and Freed to wake
// waiters), and Close. FullStore has them all. A store that lacks one
// still has its methods, which report it with the capability's sentinel
// (ErrMultiUnsupported, ErrReserveUnsupported, ErrResetUnsupported,
// ErrSemaphoreUnsupported); embedding Unsupported gives a store all of
// them, so that it implements AllowN and what it supports:
//
//	type Store struct {
//		sluice.Unsupported
//		// ...
//	}
//
//	var _ sluice.FullStore = (*Store)(nil)
//
// A layer between stores (failover, tiered, stack, one that times or
// traces store calls) holds a FullStore and forwards each call it does not
// handle itself, without asking what the store below can do: Lift turns
// the Store it is given into a FullStore, and what that store lacks comes
// back as the capability's error, passed on as is. sluicetest.Run holds a
// store to the contract of each capability it has.
//
// # Three words
//
// A reservation is units admitted ahead and given back if unused
// (Reserver: Reserve and Return; Limiter.Reserve). A lease is what the
// local tier of package tiered takes with Reserve: units reserved from the
// shared store and spent locally within a lifetime. A permit's TTL
// (ConcurrencyLimit.TTL) is how long a permit of a concurrency limit lives
// unless it is released or extended.
package sluice
