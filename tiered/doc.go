// Package tiered puts a local tier in front of a shared sluice.Store (Redis,
// through redisstore), so that the common case pays no round trip. Each
// part is chosen by option; with none, the store only caches denials.
//
// # Denial cache (always on)
//
// After the shared store denies n units of (key, limit) with RetryAfter r,
// requests for the same n units of the same key and limit are denied
// locally until r has passed, measured from before the call was sent (so
// never longer than r after the store's decision). Another n goes to the
// store: r is the exact wait of n only. A cached denial reports the
// remaining wait as RetryAfter and the store's Remaining at the denial (for
// the buckets, plus what has refilled since, rounded down). The cache only ever
// denies: it cannot admit what the shared store would deny. And it denies
// no longer than r, which is the store's exact wait absent other traffic;
// other processes' traffic can only make the store deny longer, except
// their returned lease units and their refunds (Return), which can free
// quota before r. So a denial is cached for at most MaxCachedDenial (a
// second): a key that another process's refund freed is asked again within
// that time, even when r is the rest of a daily window. A denial decided
// while this store was passing a refund of the same shard of keys may
// predate it and is not cached.
//
// # Limits that count every hit
//
// A limit with Counting sluice.CountAll is decided by the shared store,
// every time: its charges, denied ones included, must all reach the shared
// count, which neither a lease nor a cached denial would do.
//
// The Store is a sluice.FullStore whose other calls pass to the shared
// store (lifted with sluice.Lift), which answers for what it lacks:
// AllowMulti; Reserve (a caller's reservation, apart from the local tier's
// own leases) and Return, which passes a refund through and drops the
// key's cached denials, so that the refund is seen at once; Reset (see
// below); and the concurrency limits, which a local tier cannot hold for
// the fleet.
//
// # Leases (WithLeases)
//
// A lease is units reserved from the shared store in one call (Reserve)
// and spent locally: with a store that can reserve (sluice.Reserver), a
// key's decisions take k units in one shared call and spend them locally
// (over one that cannot, the first Reserve says so, and every decision
// then goes to the shared store's AllowN); k follows this
// process's recent demand for the key (units asked per lease lifetime, an
// exponentially weighted average), bounded by the configured maximum and by
// a fraction of the limit's capacity. Units left when a lease ends are given
// back with Return: before the next lease of the key, by the background
// sweeper within a quarter of the lifetime after the lease ends, and on
// Close. (For TokenBucket and GCRA, the store credits the returned units
// less what has refilled since the lease, so the refill is never credited
// twice.) Leased units are admitted units, counted by the shared store from
// the lease's time, so the fleet as a whole never exceeds the limit as the
// shared store counts it. When a lease of k > n units is denied, the call
// asks once more for what the store's Remaining says it has (or for n, to
// get the exact RetryAfter of n): a process never denies a request that the
// store could have admitted from its free units; it may deny one that
// another process's unspent lease units would have covered (the documented
// difference, sluicetest.MayDenyEarly).
//
// Which limits are leased, and when a lease may be spent, per algorithm:
//
//   - FixedWindow and SlidingWindow: only within the window of the lease's
//     store time (the lease ends at that window's end, measured locally from
//     before the call). A unit spent later would be counted in a window
//     where it is not (FixedWindow) or weighs less than a unit of the window
//     it is spent in (SlidingWindow). Spent within its window, every unit is
//     counted exactly where it happens: leases change nothing in what these
//     algorithms admit, in stamped or in real time.
//     These two are leased by default.
//   - SlidingLog, TokenBucket, GCRA: only with WithStampedLeases, within the
//     lease's lifetime L. The store stamps the units at the lease's time,
//     and its invariant holds over those stamps: no interval of length
//     Period holds more than Rate stamps (SlidingLog), at most
//     Burst + Rate·t/Period in an interval t (buckets). A unit spent later
//     than its stamp is quota taken earlier, but not in real time: its
//     stamp leaves the store's window (or the bucket refills) while the
//     unit is still to be spent, and another process may take that room.
//     In real time the bound widens by L: at most Rate in any interval of
//     length Period − L (SlidingLog), at most Burst + Rate·(t+L)/Period in
//     an interval t (buckets); also never more than the stamped bound plus
//     the units leased but unspent at the interval's start. Without
//     WithStampedLeases these limits decide through the denial cache,
//     exactly.
//
// With WithRefreshAhead, the key's next lease is taken in the background
// once the current one is down to a fraction of its size, so that under
// steady demand no caller waits for the shared store: the caller that needs
// more than the current lease holds moves on to the next one (its current
// lease's leftover is given back). A key then holds up to two leases; both
// are counted by the shared store, so nothing above changes but how many
// units may sit unspent in one process. A refresh that is denied or fails
// is not tried again until a caller's own lease of the key succeeds.
//
// Decisions served from a lease report Remaining as the shared store's
// Remaining at the lease plus the lease's unspent units, and ResetAfter as
// the store's at the lease, less the time since.
//
// # Approximate local share (WithApproximateLocalShare)
//
// A two-tier limiter that trades exactness for fewer store calls: a local
// limiter per key at a fraction f of the limit (the same algorithm at
// floor(Rate×f) per Period, Burst scaled the same, at least 1) admits
// first; only what it denies goes to the shared store (through the denial
// cache and leases, when on). Locally admitted units are never counted by
// the shared store, so this is NOT exact: the fleet can exceed the quota by
// the sum of the local shares, up to processes × floor(Rate×f) per Period
// (for the buckets, also their scaled bursts). It is available only by that explicit option.
//
// # Deadlines and failures
//
// tiered adds no deadline and no failure mode: a shared call runs under the
// caller's context, and a failed one returns its error (callers waiting for
// a key's lease in flight wait for it, bounded by their own contexts). For
// both, put package failover inside, tiered(failover(shared)), which package
// stack builds (stack.New): decisions served locally then never wait for a
// deadline, and units leased before an outage keep being spent during it.
// tiered never caches a degraded denial (Decision.Degraded) and never keeps a
// lease from a degraded answer: when a Reserve comes back degraded, the request
// is decided by the shared store's AllowN (which applies the failure mode),
// and that answer is returned as it is.
//
// # Validation
//
// A request that the local tier decides (a spend from an existing lease, a
// cached denial, the local share) is decided without checks beyond what that
// needs: a request the shared store never accepted finds no local state. Every
// other request, and every AllowMulti, goes to the shared store, which
// validates it; a negative n is an error at once.
//
// # Counters
//
// Stats reports decisions served locally (lease spends, cached denials,
// local-share admissions), shared calls (AllowN, Reserve, Return) and leased
// and returned units.
//
// # Concurrency limits
//
// Store implements sluice.Semaphore by passing Acquire, Release and Extend
// to the shared store, every time (sluice.ErrSemaphoreUnsupported when the
// shared store has no concurrency limits). A local tier cannot hold
// permits for the fleet: a permit leased to this process would be a slot
// taken from every other one, freed only by this one, and a cached denial
// would miss a slot freed by a release elsewhere at any moment.
package tiered
