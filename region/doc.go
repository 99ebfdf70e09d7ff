// Package region decides one quota shared by several regions (or
// clusters), each a round trip of tens to hundreds of milliseconds away
// from the store that counts it, the home store: Redis in one region
// (redisstore), or another sluice. A region's Store holds units that the
// home store granted it and decides from them, so that a decision never
// crosses the WAN while the units last; the units for the next decisions
// are fetched ahead, in the background.
//
// The home store must be a sluice.Granter (memstore and redisstore are):
// a grant is counted by the limit's algorithm when it is made, as a
// Reserve is, and sized by the home store's holder table: each call
// reports the region's demand, and a region is granted at most its fair
// share of a window by demand (a quiet region gives back, a busy one gets
// more, under saturation each gets an equal part), plus the allowance it
// reserved for its failure mode. See sluice.Granter for the semantics.
//
// A region's service fleet can hold the region's units and hand smaller
// leases to its own processes: Store implements sluice.Reserver for them
// (tiered.WithLeases over a Store, reached through the remote store API
// or in process).
//
// # Deciding
//
// A decision spends units held (the oldest grant first). When none are
// left it is denied at once, with RetryAfter the time the next answer is
// due, and a call for more is made in the background if none is on its
// way: decisions never wait for the home store, except the first ones of
// a key (nothing is known of it yet), which wait for its first answer and
// are served in the order they came, each admitted when the grant covers
// it, otherwise denied: no decision waits for a second call. Store.Warm
// makes a key known before its first decision (a process warms the keys
// it knows before it takes traffic), so that none of its decisions waits.
//
// A call is due when the units held will not last until an answer sent
// now comes back: the demand (units asked for, admitted or not, an
// exponentially weighted rate) times the measured round trip, its
// variation and a scheduler's margin. It asks for the demand over that
// time and WithRefresh more, so that at a steady demand a key calls the
// home store about once per refresh, whatever its decision rate. The
// background loop also sends a report alone (no units asked for) when the
// demand or the allowance to reserve moved since the last call, and
// tells the home store when a key goes idle, so that its share and
// allowance are freed at once.
//
// # Windows, and what a grant may be spent on
//
// For FixedWindow and SlidingWindow, a grant's units count in the home
// store's window of the grant's time: they are spent only within it, the
// window's end measured locally from the call's send time (the time the
// call took to reach the store is not known), so never after the
// window's end, whatever the round trip. An answer that comes back after
// its window ended is dropped, its units not spent (Stats.Late): nothing
// held in a slow or cut link is admitted against a window it no longer
// belongs to. Near a window's end a call is held until it reaches the
// store in the next window (a grant of the current one would end before
// it came back), and a call near the end asks only for what can be spent
// before it. So below the limit a key admits nothing for about half a
// round trip at each edge of a window: its units of one window end half a
// round trip before it, and the next window's come a round trip into it.
// Under saturation nothing is lost: the share is spent in the rest of the
// window.
//
// For TokenBucket and GCRA, units are spent within WithLeaseTime of the
// call's send time; as for tiered's stamped leases, the algorithm's bound
// holds over the grants' times and widens by that time in real time.
// Units left when such a grant ends are given back (Return). SlidingLog
// limits and limits that count every hit are not granted: their
// decisions pass to the home store's AllowN.
//
// AllowMulti decides from the units held too, all-or-nothing across its
// keys (each request spends its units, or none does), once every key it
// needs units of has had an answer; a key's first use, or the home store
// not answering, sends the call to the home store (see AllowMulti).
//
// # Denials
//
// A denial of the home store (nothing granted) is cached from the call's
// send time, for its RetryAfter: it was decided between the send and the
// answer, so it holds at least until then, whatever the round trip. When
// units were free but this region's share or the others' allowances
// bound it, the shares may move before the window ends: it is cached for
// at most a refresh. Under overload a key so makes at most one call per
// round trip, and sheds the rest locally.
//
// # Deadlines and the failure mode
//
// Every call has a deadline that follows the measured round trip: SRTT +
// 4 RTTVAR (as TCP's retransmission timeout), clamped by WithTimeout; a
// call also carries that deadline to the home store
// (sluice.GrantRequest.NotAfter), which ignores it once past: a request
// held in a black-holed link and delivered at the heal changes nothing.
// A failed call marks the link down; while it is down, decisions that
// the units held cannot serve follow the limit's failure mode:
//
//   - FailClosed denies (Degraded).
//   - FailOpen admits from this region's allowance: the units per window
//     that the home store reserves for it (WithFailOpenShare of its share
//     by demand, asked for with each call) and grants to nobody else. In
//     each window (the store's, bounded through the clock anchor of the
//     last answer, so that clock skew does not matter) the region admits
//     at most its allowance, units granted included; it relies on the
//     allowance for at most the report TTL (WithReportTTL) after its last
//     confirmed call was sent, and on the smaller of the allowance
//     confirmed and every one asked for since that the store may still
//     apply. Its admissions are told to the home store with its next call
//     (before it asks for more units), so that it is not granted its
//     allowance twice in a window. So while a region is cut off, what the
//     regions admit together in a window stays within the limit: the
//     allowance is a share of the limit that the others give up, not an
//     addition to it.
//   - FailOpenUnbounded admits everything (Degraded): an addition to the
//     limit, only when named.
//
// Calls go on while the link is down (each key at most every half
// deadline or refresh), as reports alone; the first answer marks it up.
//
// # What is given up
//
// Units granted and not spent: those held when a window ends (at most a
// call's worth per key), those of late answers, and the allowances other
// regions hold for their failure modes, which no one else is granted.
// Stats counts them.
package region
