// Package memcachestore is the memcached sluice.Store: a fleet of
// processes shares one quota through memcached servers, as with
// envoyproxy/ratelimit's memcached backend, but every decision is atomic.
// It speaks memcached's text protocol itself (get, gets, add, cas, incr,
// decr, delete, version: memcached 1.4 or later), over a small pool of
// connections per server, with the standard library only.
//
//	s, err := memcachestore.Open(ctx, memcachestore.Options{
//		Servers: []string{"10.0.0.7:11211", "10.0.0.8:11211"},
//	})
//
// # Algorithms
//
// memcached changes one item atomically in two ways: incr and decr, and
// compare-and-swap (gets reads an item with a unique number that every
// change renews; cas writes it only if that number is still the item's).
// The store decides what one item can hold:
//
//   - fixed_window: the window's count, an item per window (its start in
//     the item's name). Counting every hit (sluice.CountAll, the counting
//     of envoyproxy/ratelimit) is incr: one round trip, atomic, never
//     retried. Counting admitted hits only (the default) is
//     compare-and-swap: the count is read, the decision made, and the new
//     count written only if nobody wrote it since.
//   - sliding_window: "start:prev:cur" in one item, by compare-and-swap.
//   - token_bucket and gcra: the theoretical arrival time (the time the
//     bucket is full again) in one item, by compare-and-swap.
//
// sliding_log is refused: a log keeps an entry per time of admission (up
// to its Rate), which memcached can only hold as one value
// that every decision would read and rewrite whole, several KB per round
// trip and retried whole under contention; sliding_window gives nearly the
// same limit with two counters. Its calls return a *sluice.LimitError on
// "Algorithm" wrapping ErrAlgorithmUnsupported (which wraps
// sluice.ErrInvalidLimit), before anything is sent; Supports says which
// algorithms the store decides. AllowMulti (several limits all or
// nothing) is not offered: memcached has no operation on several items at
// once, and the store does not implement sluice.MultiStore.
//
// # What is exact
//
// Every decision is one atomic change of one item: a compare-and-swap
// decision is made on the state it replaces, and a decision whose cas
// finds the item changed reads it again and decides again (up to
// Options.MaxCASAttempts times, then it is an error wrapping
// ErrContended: no decision, nothing counted). So the decisions on a
// state are those of some order of the calls, each made on the state the
// previous ones left, as in memstore: a denial counts nothing, and no
// window, bucket or counter ever admits more than its limit, across any
// number of processes. The calls of one process on one state take turns
// (an in-process lock per item name, by hash), so that only other
// processes' writes make a decision try again. An incr (a fixed window
// counting every hit) is atomic in itself. A denial and a peek (n = 0)
// write nothing: one round trip (get, or gets). An admission is two:
// gets, then cas (add when the item does not exist yet). Only the first
// command of a call is sent again, on a new connection, and only when a
// reused connection turned out closed by the server before it (a restart,
// an idle timeout): the server never saw it. Nothing is repeated after a
// timeout: a write whose reply was lost may have been applied.
//
// # Time
//
// memcached has no command that tells its time, so every process decides
// on its own clock (Options.Clock, time.Now by default), as
// envoyproxy/ratelimit does. The decisions are exact for the times the
// processes give them; between processes whose clocks differ by up to d,
// a window starts and ends up to d apart for them, and a state written
// by a process behind has refilled up to d early for a process ahead: a
// token bucket or GCRA may admit up to Rate·d/Period more than its limit
// in an interval, and a window's count holds what the processes' own
// clocks put in it. Keep the clocks synchronized (NTP);
// Options.ClockSkew (1s by default) is how far apart they are assumed to
// be, for item lifetimes. A fixed window's item is named by its window, so
// a clock that runs back (or a process behind) counts in the window its
// clock is in, not in the newest one the key has seen; the other states
// carry their times and never go back.
//
// # Items
//
// The state of (key, algorithm, period) lives in one item (a fixed
// window's, one per window):
//
//	<prefix><escaped key>:<algorithm letter><period>[.<window>]
//
// The prefix is Options.Prefix ("sluice:"). In the escaped key, each byte
// memcached refuses in a key (space, control characters, DEL) and '%'
// become %XX; keys are otherwise any bytes, up to sluice.MaxKeyLen. A name
// longer than memcached's 250 bytes keeps the start of the escaped key,
// then "%#" and 32 hexadecimal digits of the key's SHA-256 (128 bits).
// The letter is f (fixed window), s (sliding window), b (token bucket) or
// g (GCRA), in upper case with the period in seconds in base 36 when the
// period is whole seconds, else in lower case with the period in µs; a
// fixed window adds "." and its number (start / period) in base 36.
// Values are decimal text: the count ("3"), "start:prev:cur", the TAT in
// µs ("1764979200123456" or "at:frac").
//
// Every write gives the item a lifetime: the time its state matters (a
// fixed window's end; until a counter or bucket is back to untouched),
// rounded up to seconds, plus 1s (memcached counts whole seconds), plus
// Options.ClockSkew. Up to 30 days it is relative; beyond, it is a Unix
// time of this process's clock (memcached reads larger numbers so), at
// most 2038-01-19 (memcached's 32-bit limit): a state that would matter
// longer, such as the debt of a huge charge, is forgotten then. An idle
// key leaves nothing behind.
//
// memcached is a cache: it evicts items when its memory is full (least
// recently used first), and a restarted server starts empty. An evicted or
// lost state starts again untouched: its key may then admit up to one
// more limit's worth. Give memcached the memory the states need (a state of a
// 27-byte key takes a 120-byte chunk with the default prefix), or start
// it with -M, which makes writes fail instead (the store then reports the
// server's error: no decision). A server run with -C (no CAS) cannot
// decide atomically: calls that need compare-and-swap return ErrNoCAS.
//
// With Options.ReferenceKeys, fixed windows of whole seconds keep
// envoyproxy/ratelimit's names instead: the key itself (the reference's
// ends with "_") followed by the window's start in Unix seconds, without
// prefix or escaping. Given the
// key that envoyproxy/ratelimit builds and the same servers, both count on
// one item (its value, the count, and its incr are the same), so that a
// fleet moving from one to the other keeps its counts. Otherwise the
// names differ, and a fleet that switches starts its windows afresh.
//
// # Servers and connections
//
// Options.Servers lists the servers (or Options.SRV names them, resolved
// by DNS, optionally again every Options.SRVRefresh). An item lives on one
// server, chosen by the CRC-32 of its name modulo the number of servers,
// the choice of gomemcache, which envoyproxy/ratelimit uses. A server that
// does not answer fails the calls for its items (failover decides them by
// the limit's failure mode); the items are not moved to another server,
// which would start their states afresh.
//
// Each server has up to Options.MaxConns connections in use at once (a
// call waits for one), and keeps up to Options.MaxIdleConns open between
// calls. A connection serves one call at a time: a command is written
// whole and its reply read whole, and a connection that fails, times out
// or reads a reply it does not expect is closed, never reused. Every call
// ends at its context's deadline or after Options.Timeout (500ms),
// whichever comes first, and at once when its context is cancelled.
// Replies are bounded: a line of 1 KiB, a value of 128 bytes (a longer
// value is not a state of the store: an error, ValueError). With
// Options.TLS every connection is TLS (1.2 or later), verifying the
// servers against the CA file (or the system's) and the server name (each
// server's host unless given), with a client certificate when given.
//
// # Failures
//
// A server error (ServerError), a timeout, a refused or broken connection,
// ErrContended and ErrNoCAS are errors: no decision was made. Wrap the
// store in package failover (or stack) to decide by each limit's failure
// mode while memcached does not answer; Ping lets failover's breaker probe
// the servers.
package memcachestore
