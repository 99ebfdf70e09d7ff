package region

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// entry is the state of one (key, limit): the units held, the call to the
// home store on its way, the cached denial, the demand, and what the
// failure mode needs.
type entry struct {
	grants []grant // oldest first; spent from the front
	held   int64   // units in grants

	fetching  bool
	fetchSent time.Duration
	fetchN    int           // the units the call on its way asks for
	nextFetch time.Duration // no call before (pacing after a denial or a failure)
	waiters   []*waiter     // decisions waiting for the first answer
	answered  bool          // an answer (grant or denial) came since the entry was made
	warming   bool          // the call on its way is Warm's: decisions do not wait for it
	unsized   bool          // warmed: the next call for units asks as a first use does
	holdUntil time.Duration // warmed: kept until then, used or not

	// The home store's denial: true until denyUntil (local), counted from
	// the call's send time.
	denyUntil time.Duration
	deny      sluice.Decision
	denySent  time.Duration

	asked      meter // units asked for, admitted or not: the demand
	created    time.Duration
	lastUse    time.Duration
	lastReport time.Duration // send time of the last call
	reported   reportState

	// The failure mode's state: the share and allowance the home store
	// confirmed, the allowances asked for that may still be applied, the
	// send time of the last confirmed call, and per window the units
	// granted and admitted without a grant.
	share      int64
	allowance  int64
	pendAllow  []pendingAllowance
	lastOKSent time.Duration
	confirmed  bool
	windows    [4]window
	dead       bool
}

// reportState is what the last call reported, to tell when a new report
// is due.
type reportState struct {
	demand, allowance int64
}

// grant is units granted by the home store at its time at, spent locally
// until expires.
type grant struct {
	units    int64
	size     int64
	at       time.Time     // the store's time of the grant
	win      int64         // the start (µs, store time) of its pool window
	got      time.Duration // local: the call's send time
	expires  time.Duration // local: no spending at or after
	returnBy time.Duration // local: a Return after this changes nothing (0: none worth making)
	reset    time.Duration // the store's ResetAfter at the grant
}

// window counts, for one pool window of the home store (its start, µs),
// the units granted to this holder and those it admitted without a grant
// (its failure mode), and of those the ones reported to the store.
type window struct {
	start                 int64
	received, spent, told int64
	used                  bool
}

// pendingAllowance is an allowance asked for by a call that was not
// confirmed: the store may still apply it until its deadline (store time,
// µs; 0: none).
type pendingAllowance struct {
	value    int64
	deadline int64
}

// maxPending bounds pendAllow: beyond it the two oldest merge (the smaller
// value, the later deadline), which can only lower the allowance relied on.
const maxPending = 8

// maxGrants bounds the spent grants an entry keeps for Return.
const maxGrants = 32

// spend takes n units from the grants, oldest first, dropping the ended
// ones. It returns the decision and the time to report for the units
// (Reserve).
func (s *Store) spend(e *entry, ck ckey, now time.Duration, n int) (sluice.Decision, time.Time, bool) {
	e.dropEnded(s, ck, now)
	if e.held < int64(n) {
		return sluice.Decision{}, time.Time{}, false
	}
	need := int64(n)
	at := time.Time{}
	var left time.Duration = -1
	for i := 0; need > 0; i++ {
		g := &e.grants[i]
		if g.units == 0 {
			continue
		}
		k := min(g.units, need)
		g.units -= k
		need -= k
		if at.IsZero() {
			at = g.at
		}
		if l := g.expires - now; left < 0 || l < left {
			left = l
		}
	}
	e.held -= int64(n)
	// Spent grants stay until they end, so that a client's Return finds
	// them; beyond maxGrants the oldest spent ones go.
	for len(e.grants) > maxGrants && e.grants[0].units == 0 {
		e.grants = e.grants[1:]
	}
	if a := ck.lim.Algorithm; a == sluice.FixedWindow || a == sluice.SlidingWindow {
		// A sub-lease's time (Reserve): its window is the grant's, and what
		// is left of it, measured from the caller's side, no longer than
		// here (algo.WindowLeft(at) is the time left).
		per := ck.lim.Period.Microseconds()
		l := min(max(left.Microseconds(), 1), per)
		end := algo.WindowLeft(at.UnixMicro(), per) + at.UnixMicro()
		at = time.UnixMicro(end - l)
	}
	return sluice.Decision{Allowed: true, Limit: ck.lim, Remaining: int(e.held), ResetAfter: e.resetAfter(now)}, at, true
}

// dropEnded drops the grants that have ended, queueing the units worth
// giving back.
func (e *entry) dropEnded(s *Store, ck ckey, now time.Duration) {
	i := 0
	for ; i < len(e.grants) && now >= e.grants[i].expires; i++ {
		g := e.grants[i]
		if g.units > 0 {
			e.held -= g.units
			s.st.lost.Add(g.units)
			if g.returnBy > 0 && now < g.returnBy {
				s.queueBack(ck, g.units, g.at)
			}
		}
	}
	if i > 0 {
		e.grants = e.grants[i:]
	}
}

// resetAfter is the store's ResetAfter at the newest grant, less the time
// since.
func (e *entry) resetAfter(now time.Duration) time.Duration {
	if len(e.grants) == 0 {
		return 0
	}
	g := e.grants[len(e.grants)-1]
	return max(g.reset-(now-g.got), 0)
}

// cachedDenial is the home store's denial, as it stands at now.
func (e *entry) cachedDenial(lim sluice.Limit, now time.Duration) sluice.Decision {
	d := e.deny
	d.Limit = lim
	d.Remaining = int(e.held)
	d.RetryAfter = e.denyUntil - now
	d.ResetAfter = max(d.ResetAfter-(now-e.denySent), 0)
	return d
}

// win returns the counts of the pool window starting at start, made (the
// oldest one replaced) when create is true; nil otherwise.
func (e *entry) win(start int64, create bool) *window {
	slot := -1
	for i := range e.windows {
		w := &e.windows[i]
		switch {
		case w.used && w.start == start:
			return w
		case slot < 0 || !w.used && e.windows[slot].used || w.used == e.windows[slot].used && w.start < e.windows[slot].start:
			slot = i // the free slot, or the oldest window
		}
	}
	if !create {
		return nil
	}
	e.windows[slot] = window{start: start, used: true}
	return &e.windows[slot]
}

// allowanceAt is the allowance this holder can count on at the home
// store: the smaller of the last confirmed one and every one asked for
// since that the store may still apply (lo: the store's time at the
// earliest, µs).
func (e *entry) allowanceAt(lo int64) int64 {
	if !e.confirmed {
		return 0
	}
	a := e.allowance
	keep := e.pendAllow[:0]
	for _, p := range e.pendAllow {
		if p.deadline != 0 && lo > p.deadline {
			continue // the store can no longer apply it
		}
		a = min(a, p.value)
		keep = append(keep, p)
	}
	e.pendAllow = keep
	return a
}

// askAllowance notes an allowance asked for by a call being sent.
func (e *entry) askAllowance(v, deadline int64) {
	if len(e.pendAllow) >= maxPending {
		a, b := e.pendAllow[0], e.pendAllow[1]
		e.pendAllow[1] = pendingAllowance{value: min(a.value, b.value), deadline: mergeDeadline(a.deadline, b.deadline)}
		e.pendAllow = e.pendAllow[1:]
	}
	e.pendAllow = append(e.pendAllow, pendingAllowance{value: v, deadline: deadline})
}

// mergeDeadline is the later of two deadlines, 0 (none) being the latest.
func mergeDeadline(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	return max(a, b)
}

// confirmAllowance records the allowance the store confirmed for the call
// that asked for it (which is no longer pending: its value at the store is
// known).
func (e *entry) confirmAllowance(asked pendingAllowance, got int64) {
	for i, p := range e.pendAllow {
		if p == asked {
			e.pendAllow = append(e.pendAllow[:i], e.pendAllow[i+1:]...)
			break
		}
	}
	e.allowance, e.confirmed = got, true
}
