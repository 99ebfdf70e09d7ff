package region

import (
	"time"

	"github.com/sluicehq/sluice"
)

// modeOf is lim's failure mode: its own, or the store's default.
func (s *Store) modeOf(lim sluice.Limit) sluice.FailureMode {
	if lim.FailureMode != sluice.FailDefault {
		return lim.FailureMode
	}
	return s.cfg.mode
}

// degrade decides n without the home store, which does not answer, and
// without units held, by the limit's failure mode (see the package
// documentation). sh.mu is held.
func (s *Store) degrade(e *entry, ck ckey, now time.Duration, n int) sluice.Decision {
	d := sluice.Decision{Limit: ck.lim, Degraded: true, RetryAfter: s.link.timeout()}
	switch s.modeOf(ck.lim) {
	case sluice.FailOpenUnbounded:
		d.Allowed, d.RetryAfter = true, 0
	case sluice.FailOpen:
		if rem, _, ok := s.failOpen(e, ck, now, n); ok {
			d.Allowed, d.RetryAfter, d.Remaining = true, 0, rem
		}
	}
	if d.Allowed {
		s.st.degradedAllowed.Add(1)
	} else {
		s.st.degradedDenied.Add(1)
	}
	return d
}

// failOpen admits n from this holder's allowance when it can, and returns
// what is left of it. The allowance is what the home store reserves for
// this holder in every pool window, and so the most it may admit in one,
// grants included: it admits n only if, in every window the store's clock
// may be in now (the link's anchor bounds it), the units granted plus
// those admitted here stay within it, and counts n in each. It relies on
// the allowance only while the home store keeps it: less than the report
// TTL after the last confirmed call was sent. Calls sent while it admits
// this way are reports (N = 0, plan), and its admissions are told with
// the next call (GrantRequest.Spent), before any unit is asked for: so
// the store counts them before it grants this holder more in the window.
func (s *Store) failOpen(e *entry, ck ckey, now time.Duration, n int) (int, time.Time, bool) {
	if !e.confirmed || now >= e.lastOKSent+s.cfg.reportTTL || e.fetching && e.fetchN > 0 {
		// No allowance confirmed, or no longer kept; or a call asking for
		// units is on its way: units it brings back would add to what is
		// admitted here meanwhile, which it did not report.
		return 0, time.Time{}, false
	}
	lo, hi, ok := s.link.storeTime(now)
	if !ok {
		return 0, time.Time{}, false
	}
	a := e.allowanceAt(lo)
	per := ck.lim.Period.Microseconds()
	starts := []int64{lo - mod(lo, per)}
	if h := hi - mod(hi, per); h != starts[0] {
		starts = append(starts, h)
	}
	left := a
	for _, st := range starts {
		w := e.win(st, true)
		if w.received+w.spent+int64(n) > a {
			return 0, time.Time{}, false
		}
		left = min(left, a-w.received-w.spent-int64(n))
	}
	for _, st := range starts {
		e.win(st, true).spent += int64(n)
	}
	// A time for units leased to a client (Reserve): in the later window,
	// with no more of it left than the store's clock may have left.
	end := starts[len(starts)-1] + per
	return int(left), time.UnixMicro(end - max(end-hi, 1)), true
}

// degradeReserve is a Reserve while the home store does not answer and
// no units are held. For a FailOpen limit it leases n units of the
// allowance (failOpen), which the client spends itself, within the window
// they were counted in (the time reported says so); otherwise, or when
// the allowance is spent, it denies until the next window or the next
// probe. Neither answer is Degraded, so that the client keeps the lease,
// or the denial for its RetryAfter, rather than asking for each decision;
// Stats counts both as the failure mode's.
func (s *Store) degradeReserve(e *entry, ck ckey, now time.Duration, n int) (sluice.Decision, time.Time) {
	d := sluice.Decision{Limit: ck.lim, RetryAfter: s.link.timeout()}
	switch s.modeOf(ck.lim) {
	case sluice.FailOpenUnbounded:
		if _, hi, ok := s.link.storeTime(now); ok {
			s.st.degradedAllowed.Add(1)
			s.st.degradedLeased.Add(int64(n))
			d.Allowed, d.RetryAfter = true, 0
			return d, time.UnixMicro(hi)
		}
	case sluice.FailOpen:
		if rem, at, ok := s.failOpen(e, ck, now, n); ok {
			s.st.degradedAllowed.Add(1)
			s.st.degradedLeased.Add(int64(n))
			d.Allowed, d.RetryAfter, d.Remaining = true, 0, rem
			return d, at
		}
		if _, hi, ok := s.link.storeTime(now); ok {
			per := ck.lim.Period.Microseconds()
			d.RetryAfter = min(d.RetryAfter, time.Duration(per-mod(hi, per))*time.Microsecond)
		}
	}
	s.st.degradedDenied.Add(1)
	return d, time.Time{}
}
