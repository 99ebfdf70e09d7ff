package tiered

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/validate"
)

// grant is one lease: units admitted by the shared store at its time at.
type grant struct {
	units     int64
	size      int64         // units at the lease
	at        time.Time     // store time of the admission, for Return
	got       time.Duration // local time before the call
	expires   time.Duration // local: no spending at or after
	returnBy  time.Duration // local: a Return after this changes nothing (0: any time)
	remaining int           // the store's Remaining at the lease
	reset     time.Duration // the store's ResetAfter at the lease
	denied    int           // fetch only: the size of a denied lease
}

// viaLease decides through leases: spend from the key's lease, wait for a
// lease another caller is taking, or take one. e is ck's entry as the fast
// path found it, or nil.
func (s *Store) viaLease(ctx context.Context, sh *shard, ck ckey, e *entry, n int) (sluice.Decision, error) {
	counted := false
	for {
		now := s.mono()
		sh.mu.Lock()
		if e = s.live(sh, ck, e); e == nil {
			sh.mu.Unlock()
			return s.direct(ctx, sh, ck, nil, n)
		}
		e.lastUse = now
		if !counted {
			e.demand += int64(n)
			counted = true
		}
		if d, k, ok := s.fromEntry(sh, e, ck, now, n, false); ok {
			sh.mu.Unlock()
			if k > 0 {
				s.startRefresh(ck, k)
			}
			return d, nil
		}
		if ch := e.fetching; ch != nil {
			sh.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return sluice.Decision{}, ctx.Err()
			}
		}
		return s.lease(ctx, sh, ck, e, n, now)
	}
}

// lease takes a lease for ck's entry e, whose shard lock is held (and
// released here), and decides n from it.
func (s *Store) lease(ctx context.Context, sh *shard, ck ckey, e *entry, n int, now time.Duration) (sluice.Decision, error) {
	ch := make(chan struct{})
	e.fetching = ch
	old := e.g
	e.g = grant{}
	k := s.size(e, now, n, ck.lim)
	refunds, resets := sh.refunds.Load(), sh.resetMark()
	if sh.resetSince(resets) {
		old = grant{} // its units may be in a state being reset: never given back
	}
	sh.mu.Unlock()

	d, g, err := s.fetch(ctx, ck, n, k, old, now)

	sh.mu.Lock()
	e.fetching = nil
	close(ch)
	switch {
	case e.dead && err == nil && !d.Degraded:
		// A reset forgot the entry while the lease was on its way: the
		// lease may predate it (its units deleted with the state) and is
		// not kept, nor given back. The request itself was decided.
	case err != nil:
		if validate.IsInput(err) && e.leases <= 1 && e.denyN == 0 && e.next.units == 0 && !e.refreshing {
			forget(sh, ck, e) // a new key's invalid request keeps no state
		}
	case d.Degraded:
		// Decide without leases for as long as the store asks: each
		// decision meanwhile passes the store once, by AllowN.
		e.noLeaseUntil = now + d.RetryAfter
	case d.Allowed:
		if cur := e.g; cur.units > 0 {
			// While this lease was on its way, the key's lease taken
			// ahead moved in (take) and was spent from: this one
			// replaces it, and its units go back, or they would stay
			// counted in the store for the rest of its window.
			s.queueBack(ck, cur, s.mono())
		}
		e.g = g
		e.denyN = 0
		e.refreshOff = false
	default:
		e.record(g.denied, now, d, sh.refunds.Load() != refunds || sh.resetSince(resets))
	}
	sh.mu.Unlock()
	if err == nil && d.Degraded {
		// Nothing was leased: the shared store decides n by itself, and
		// its degraded answer is not kept.
		d, err = s.shared.AllowN(ctx, ck.key, ck.lim, n)
		s.shared_.Add(1)
	}
	return d, err
}

// take spends n units from the key's lease, moving on to the lease taken
// ahead when the current one cannot serve n (the current one's units, if
// any, are queued for return).
func (s *Store) take(e *entry, ck ckey, now time.Duration, n int) (sluice.Decision, bool) {
	if d, ok := e.spend(now, n, ck.lim); ok {
		return d, true
	}
	if e.next.units < int64(n) || now >= e.next.expires {
		return sluice.Decision{}, false
	}
	s.queueBack(ck, e.g, now)
	e.g, e.next = e.next, grant{}
	return e.spend(now, n, ck.lim)
}

// queueBack queues the units g has left for the sweeper to give back, when
// giving them back still changes something at now.
func (s *Store) queueBack(ck ckey, g grant, now time.Duration) {
	if g.units > 0 && (g.returnBy == 0 || now < g.returnBy) {
		s.pendMu.Lock()
		s.pending = append(s.pending, giveBack{ck, g.units, g.at})
		s.pendMu.Unlock()
	}
}

// spend takes n units from the key's lease when it has them.
func (e *entry) spend(now time.Duration, n int, lim sluice.Limit) (sluice.Decision, bool) {
	g := &e.g
	if g.units < int64(n) || now >= g.expires {
		return sluice.Decision{}, false
	}
	g.units -= int64(n)
	return sluice.Decision{
		Allowed:    true,
		Limit:      lim,
		Remaining:  min(g.remaining+int(g.units), lim.Capacity()),
		ResetAfter: max(g.reset-(now-g.got), 0),
	}, true
}

// size is the number of units to lease for a request of n: the demand per
// lifetime (an exponentially weighted average), within [n, bound].
func (s *Store) size(e *entry, now time.Duration, n int, lim sluice.Limit) int {
	if e.leases > 0 {
		el := max(now-e.lastLease, time.Microsecond)
		perLife := float64(e.demand) * float64(s.lifetime) / float64(el)
		if e.leases == 1 {
			e.ewma = perLife // the first measure
		} else {
			e.ewma = 0.5*e.ewma + 0.5*perLife
		}
	}
	e.leases = min(e.leases+1, 2)
	e.lastLease, e.demand = now, 0
	bound := max(min(s.leaseMax, int(s.leaseFraction*float64(lim.Capacity()))), 1)
	k := min(int(math.Ceil(e.ewma)), bound)
	return max(k, n)
}

// fetch gives back old's units and leases k units (k >= n), spending n.
// When the store denies k > n, it asks once for what the store's Remaining
// says is free (or n alone, for n's exact RetryAfter). On a denial the
// returned grant's denied field is the size denied; a degraded answer is
// returned as is, with no grant.
func (s *Store) fetch(ctx context.Context, ck ckey, n, k int, old grant, sent time.Duration) (sluice.Decision, grant, error) {
	if old.units > 0 && (old.returnBy == 0 || sent < old.returnBy) {
		s.giveBack(ctx, giveBack{ck, old.units, old.at}, true)
	}
	for attempt := 0; ; attempt++ {
		d, at, err := s.shared.Reserve(ctx, ck.key, ck.lim, k)
		s.shared_.Add(1)
		if errors.Is(err, sluice.ErrReserveUnsupported) {
			// The shared store cannot reserve: no leases from now on, and
			// this request is decided as a degraded lease's is, by AllowN.
			s.noReserve.Store(true)
			return sluice.Decision{Limit: ck.lim, Degraded: true}, grant{}, nil
		}
		if err != nil || d.Degraded {
			return d, grant{}, err
		}
		if d.Allowed {
			s.leases.Add(1)
			s.leased.Add(int64(k))
			g := s.newGrant(ck.lim, k-n, at, sent, d)
			g.size = int64(k)
			d.Remaining = min(d.Remaining+k-n, ck.lim.Capacity())
			return d, g, nil
		}
		if k == n {
			return d, grant{denied: n}, nil
		}
		next := n
		if attempt == 0 && d.Remaining >= n {
			next = min(d.Remaining, k)
		}
		if next == k { // raced: the store's Remaining moved
			next = n
		}
		k = next
	}
}

// newGrant builds the grant of a lease of units (left after the spend of
// the request) admitted at the store's time at.
func (s *Store) newGrant(lim sluice.Limit, units int, at time.Time, sent time.Duration, d sluice.Decision) grant {
	g := grant{units: int64(units), size: int64(units), at: at, got: sent, expires: sent + s.lifetime, remaining: d.Remaining, reset: d.ResetAfter}
	switch lim.Algorithm {
	case sluice.FixedWindow, sluice.SlidingWindow:
		// The lease's units count in the store's window of at: spend them
		// only within it, measured locally from before the call (never later
		// than the store's window end).
		left := time.Duration(algo.WindowLeft(at.UnixMicro(), lim.Period.Microseconds())) * time.Microsecond
		g.expires = min(g.expires, sent+left)
		g.returnBy = sent + left
		if lim.Algorithm == sluice.SlidingWindow {
			g.returnBy += lim.Period // still weighs in the next window
		}
	case sluice.SlidingLog:
		g.returnBy = sent + lim.Period
	}
	return g
}
