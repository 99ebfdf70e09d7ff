// Package redisstore is the Redis sluice.Store: a fleet of processes shares
// one exact quota through Redis. Every decision is one Lua script run on
// Redis, atomic, in one round trip, on Redis's own clock (TIME, in integer
// microseconds), with the same integer math as memstore: the five
// algorithms give the same decisions here as there, to the microsecond.
// A limit that counts every hit (sluice.CountAll) runs its algorithm's
// charge, in scripts of its own, with the same debt bounds as memstore;
// Return with a zero time refunds at Redis's time.
//
// # Clients
//
// NewRueidis takes a rueidis.Client, the fast path: rueidis pipelines
// concurrent commands automatically. NewGoRedis takes an existing go-redis
// UniversalClient (*redis.Client, *redis.ClusterClient, or the failover
// client of Sentinel); give it MaxRetries: -1, since go-redis otherwise
// resends a command after a network error and a resent decision may count
// twice. Open builds a rueidis client from a URL:
//
//	redis://[user:password@]host:port[/db]        one node (a Cluster is detected)
//	rediss://...                                  TLS
//	redis://host:port?addr=host2:port&addr=...    several seed addresses
//	redis+cluster://[user:password@]h1:p1,h2:p2   Redis Cluster
//	redis+sentinel://s1:p1,s2:p2?master=mymaster  the master Sentinel names
//	                                              (sentinel_user, sentinel_password
//	                                              authenticate to the sentinels)
//	rediss+cluster://..., rediss+sentinel://...   the same over TLS
//
// The scripts need Redis 7.0 or later (SET with NX and GET together).
//
// Scripts are called with EVALSHA; on a NOSCRIPT reply only (a restarted
// server, SCRIPT FLUSH, a failover) the script is sent once with EVAL. No
// call is ever repeated after a timeout or a connection error: the script
// may have run, and a repeat could count the request twice. Such an error
// means "no decision"; package failover decides what happens then. A call
// returns when its context ends, even while the client is still busy (rueidis
// re-dials a hung server for about a second whatever the context says); the
// error then matches the context's (errors.Is with
// context.DeadlineExceeded), and the script may still run.
//
// Under load, the store gathers the decisions of concurrent callers that
// arrive while earlier ones are in flight into one script run (a lone call
// runs a cheaper script of its own), each still exactly
// one atomic decision, so that Redis spends its time deciding rather than
// starting scripts and reading TIME. Lua, not the calls it makes, is most of
// a decision's cost in Redis: a batch computes once per group of equal
// arguments what an absent key is set to, and admits such a key with its one
// SET NX GET. A key denied in a batch is denied again, from that first
// denial, for its later calls with the same arguments in the batch (a denial
// writes nothing, and they share its time): one hot key over its limit costs
// Redis almost nothing per request. On Cluster, a
// script's keys share a hash slot, so decisions are batched per slot; on a
// go-redis Ring batching is off (WithBatching).
//
// # Keys and values
//
// The state of (key, algorithm, period) lives in one Redis key:
//
//	<prefix>{<escaped key>}<suffix>
//
// The prefix is "sluice:" (WithPrefix). In the escaped key, '%', '{' and '}'
// become %25, %7B and %7D: two different keys never share a name, and no
// key can end the hash tag early, so a key's slot on Cluster is the slot of
// its escaped text, whatever bytes it holds (any bytes are allowed: ':',
// NUL, invalid UTF-8). The suffix is the algorithm's letter (f fixed
// window, l sliding log, s sliding window, b token bucket, g GCRA) and the
// period in base 36: in seconds, with the letter in upper case, when the
// period is whole seconds ("G1o" is GCRA per minute), else in µs
// ("lw5eo" is a log per 1.5 s). With WithSlotKey the name is
// <prefix>{<escaped slot key>}<escaped key>}<suffix>.
//
// Values are short strings, integers where possible, since a string key
// costs 40 bytes (dict entry and object) plus its name: MEMORY USAGE after
// 100 admissions at 100/minute is 72 bytes for GCRA and the fixed window
// with the default prefix and a 6-byte key, 56 bytes without a prefix.
//
//	fixed window    start+count as one integer (start is a multiple of the
//	                period and count < period), else "start:count"
//	sliding window  "start:prev:cur"
//	token bucket    as GCRA: the time the bucket is full again (the
//	                letter was t while it held "deficit:last", a deficit in
//	                units that changed with Rate; those keys are not read)
//	GCRA            the theoretical arrival time in µs, or "tat:frac"
//	sliding log     a ZSET: one entry per time of admission, scored by the
//	                time in µs, member the number of its first unit (units
//	                are numbered per key as they are admitted); an entry
//	                holds the units up to the next one's number, the newest
//	                up to the last number used, the member "#" scored
//	                minus itself
//
// Every write sets the key's TTL to the time its state matters (the
// decision's ResetAfter, rounded up to a millisecond): idle keys leave
// nothing behind. A denied request and a peek (n = 0) write nothing.
// The counters (all but the sliding log) decide in one command (SET NX
// GET, Redis 7.0 or later) a request that finds its key at rest: the SET
// writes the state admission leaves, or, when the key exists, writes
// nothing and returns the value the script then decides on.
//
// # The sliding log's memory
//
// A log keeps one entry per time of admission in its last Period (the
// units admitted at one time share it), so at most Rate + 1 live ones. An
// entry costs about 13.5 bytes while the ZSET is a listpack, that is up to
// zset-max-listpack-entries entries (128 by default; the "#" member takes
// one, and expired entries not trimmed yet a few more). Beyond, Redis
// converts the ZSET to a skiplist and each entry costs about 94 bytes: a
// log of 200 entries takes 20 KB (25 KB in the millisecond layout), one
// of 100,000 about 9.4 MB (docs/bounds.md has the measurement per Rate).
// For large limits where a bounded error is fine, prefer the
// sliding-window counter (sluice.SlidingWindow), which keeps two counts
// per key for any Rate. Large logs are freed when their key expires: set
// Redis's lazyfree-lazy-expire to yes, so that the freeing of a key of
// thousands of entries does not block the server.
//
// # The work of one script
//
// A script blocks Redis while it runs, so that the work of each is bounded,
// whatever the request. A sliding-log decision writes one entry whatever
// its cost, counts the window as a difference of two unit numbers, finds
// the unit whose expiry admits a denial by rank (bisection over ranks when
// entries hold several units), and trims at most 16 expired entries (when
// the units' numbers pass a multiple of 8; in AllowMulti at most 2 per log
// at every write): its work grows with the
// logarithm of the log's length, not with its cost or the entries that
// expired, and a log holds at most Rate + 25 entries. A return renumbers at
// most 63 entries (it reaches the newest 64 times of admission). In the
// millisecond layout each unit is an entry, so that a call asks at most
// MaxMillisecondUnits units and trims at most its cost + 2 entries. A
// permit script removes at most 16 expired holders. AllowMulti takes at
// most sluice.MaxMultiRequests requests, a batch at most 128 decisions and
// a budget of work. At those bounds, and at a Rate of 100,000, the fastest
// of 5 runs of each worst case took at most about 0.8 ms (16 logs in one
// AllowMulti) on a 2-core machine under a load average of 20 to 35 from
// other work
// (TestScriptTime; docs/bounds.md has the figures).
//
// # The millisecond layout
//
// WithMillisecondLayout keeps sliding-log limits in the layout of a widely
// used Python/Redis sliding-log script, so that a fleet still running such
// workers shares one quota with sluice: key rl:<key> (no prefix, no
// escaping), a ZSET scored in milliseconds, members "<ms>-<8 hex digits>",
// trimmed of entries scored at or below now-window (sluice trims at most
// its cost + 2 of them per admission; the Python script trims them all),
// one entry per unit (at most MaxMillisecondUnits in one call)
// and given PEXPIRE window on admission, counting the entries scored above
// now-window (what the Python script's ZREMRANGEBYSCORE leaves and its
// ZCARD counts). Periods must be whole milliseconds. sluice uses Redis's
// clock for its own entries; the Python workers use theirs.
//
// # AllowMulti and Cluster
//
// AllowMulti decides all requests in one script, all or nothing. On a
// single node (or Sentinel) any keys can be combined. On Cluster the keys
// must share a hash slot: one key's limits always do (every algorithm and
// period of a key shares its hash tag); keys of different subjects do with
// WithSlotKey (for example the tenant of "tenant42/route/x"); otherwise
// AllowMulti returns an error wrapping ErrCrossSlot that names two keys,
// before sending anything. A go-redis Ring shards by hash tag: there the
// keys must share it.
//
// # Concurrency limits
//
// Store implements sluice.Semaphore: at most Max permits of a key held at
// once, across every process sharing the Redis. Each Acquire, Release and
// Extend is one script run on Redis's clock. A key's holders are one ZSET,
// <prefix>{<key>}c, in the key's hash slot (so on Cluster too), scored by
// the end of each holder's TTL in µs: every call first removes the
// expired holders, so a permit whose process died frees when its TTL
// ends, never later; the key's Redis TTL follows its latest permit's, so
// an idle key vanishes. At most Max (sluice.MaxPermits) holders are
// stored, so a call's work is bounded. A denial carries RetryAfter, the
// time until the earliest permit's TTL ends; Acquire does not wait (sluice.Limiter's AcquireWait
// sleeps until then, or until its context ends).
//
// A call is never retried after a timeout: an acquire whose reply was lost
// may have taken a permit, which stays taken for one TTL at most
// (Release with the same holder frees it at once). A server restarted
// without persistence forgets the permits it held, as it forgets rate
// state: for up to one TTL more than Max may run, and their Extend
// reports sluice.ErrPermitLost. Each held permit costs Redis about 52
// bytes while a key has up to 128 holders (a listpack), about 135 beyond.
//
// # Differences from memstore
//
// The sliding log drops expired entries when it admits, not when it denies
// or peeks (those write nothing); the two differ only when the clock then
// runs back past those entries' expiry, which Redis's TIME does not do.
// The sliding log's times must not be before 1970 (the "#" member is
// scored below zero).
package redisstore
