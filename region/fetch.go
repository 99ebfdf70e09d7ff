package region

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/validate"
)

// tickMargin is added to the round trip when timing a call ahead of need:
// what a busy scheduler may add to it.
const tickMargin = 5 * time.Millisecond

// fetch is one call to the home store, planned under the key's shard
// lock and made in the background.
type fetch struct {
	ck     ckey
	e      *entry
	req    sluice.GrantRequest
	sent   time.Duration
	asked  pendingAllowance
	spentW int64 // the window of req.Spent
	report bool  // sent for its report alone (no units wanted)
	leave  bool  // the entry's last report: it is gone
}

// lead is how long before units run out a call must be sent: the round
// trip, its variation, and the scheduler's margin.
func (s *Store) lead() time.Duration {
	srtt, rv := s.link.rtt()
	if srtt == 0 {
		srtt = s.cfg.minTimeout
	}
	return srtt + 2*rv + tickMargin
}

// fetchDue plans the key's next call when one is due now: need > 0 units
// are wanted at once (a decision the units held cannot serve), or the
// units held will not last until an answer sent now could come back (at
// the measured demand). It returns nil when no call is due or one is on
// its way. sh.mu is held.
func (s *Store) fetchDue(e *entry, ck ckey, now time.Duration, need int) *fetch {
	if e.fetching || e.dead || now < e.nextFetch || now < e.denyUntil {
		return nil
	}
	rate := e.asked.rate(now, s.tau())
	lead := s.lead()
	if need == 0 && (rate == 0 || float64(e.held) > rate*lead.Seconds()) {
		return nil
	}
	wait, spendFor := s.untilNextWindow(ck.lim, now)
	if wait > 0 {
		// Units granted now would be counted in a window that ends before
		// they could be spent: ask so as to arrive in the next one.
		e.nextFetch = now + wait
		return nil
	}
	cap := ck.lim.Capacity()
	want := ceilUnits(rate*(s.cfg.refresh+lead).Seconds(), cap) - int(e.held)
	if spendFor > 0 {
		// No more than the demand until the window ends.
		want = min(want, ceilUnits(rate*spendFor.Seconds(), cap)-int(e.held))
	}
	if !e.answered || e.unsized {
		// The first call for the key's units, its demand not known yet: a
		// tenth of the capacity, so that the decisions waiting for it are
		// served.
		want = max(want, (cap+9)/10)
	}
	want = min(max(want, need, 1), cap)
	return s.plan(e, ck, now, want, rate)
}

// untilNextWindow is, for a window algorithm, how long to hold a call so
// that the home store gets it in its next window, when a grant made in
// its current one would come back too late to be spent (0 when a call now
// is useful); and, when a call now is useful, how long from now its units
// could be spent, until its window ends (0: unknown, or not a window
// algorithm). It uses the link's anchor (the store's clock at the middle
// of its bounds) and the measured round trip: a call reaches the store
// about half a round trip after it is sent, and its answer comes back a
// round trip after.
func (s *Store) untilNextWindow(lim sluice.Limit, now time.Duration) (wait, spendFor time.Duration) {
	if lim.Algorithm != sluice.FixedWindow && lim.Algorithm != sluice.SlidingWindow {
		return 0, 0
	}
	lo, hi, ok := s.link.storeTime(now)
	srtt, rv := s.link.rtt()
	if !ok || srtt == 0 {
		return 0, 0
	}
	left := time.Duration(algo.WindowLeft((lo+hi)/2, lim.Period.Microseconds())) * time.Microsecond
	margin := 2*rv + tickMargin
	spendFor = left - srtt/2 // the units' expiry, from now
	switch {
	case spendFor-srtt > margin:
		return 0, spendFor
	case left <= srtt/2-margin:
		return 0, 0 // it reaches the store after the window's end anyway
	}
	return left - srtt/2 + margin, 0
}

// reportDue plans a report alone (no units wanted) when the demand or the
// allowance to reserve moved since the last call, or the report would
// otherwise expire at the home store; nil when none is due. sh.mu is held.
func (s *Store) reportDue(e *entry, ck ckey, now time.Duration) *fetch {
	if e.fetching || e.dead || now < e.nextFetch || now-e.lastReport < s.cfg.refresh {
		return nil
	}
	rate := e.asked.rate(now, s.tau())
	d, a := s.demand(ck.lim, rate), s.allowanceFor(e, ck.lim, rate)
	moved := func(old, cur int64) bool {
		return cur != old && math.Abs(float64(cur-old)) > 0.2*float64(max(old, cur))
	}
	if !moved(e.reported.demand, d) && !moved(e.reported.allowance, a) && now-e.lastReport < s.cfg.reportTTL/4 {
		return nil
	}
	f := s.plan(e, ck, now, 0, rate)
	if f != nil {
		f.report = true
	}
	return f
}

// demand is a rate (units per second) as units per Period.
func (s *Store) demand(lim sluice.Limit, rate float64) int64 {
	return int64(ceilUnits(rate*lim.Period.Seconds(), sluice.MaxCharge))
}

// allowanceFor is the allowance to ask the home store to reserve: for a
// FailOpen limit, WithFailOpenShare of the smaller of the demand and the
// share last confirmed (the Rate before any); nothing otherwise.
func (s *Store) allowanceFor(e *entry, lim sluice.Limit, rate float64) int64 {
	if s.modeOf(lim) != sluice.FailOpen || s.cfg.failOpenShare == 0 {
		return 0
	}
	share := int64(lim.Rate)
	if e.confirmed {
		share = e.share
	}
	a := int64(s.cfg.failOpenShare * float64(min(s.demand(lim, rate), share)))
	return min(max(a, 0), int64(lim.Rate))
}

// plan builds the call for want units (0: a report), marks the entry
// fetching, and takes a place among the calls in flight; nil when every
// place is taken or the store is closing. sh.mu is held.
func (s *Store) plan(e *entry, ck ckey, now time.Duration, want int, rate float64) *fetch {
	if s.closed.Load() {
		return nil
	}
	select {
	case s.sem <- struct{}{}:
	default:
		return nil // too many calls in flight: the next decision or tick asks
	}
	s.fetchWG.Add(1)
	f := &fetch{ck: ck, e: e, sent: now}
	f.req = sluice.GrantRequest{
		Holder: s.holder, N: want, TTL: s.cfg.reportTTL,
		Demand:    int(s.demand(ck.lim, rate)),
		Allowance: int(s.allowanceFor(e, ck.lim, rate)),
	}
	if s.link.down() {
		// A probe while the home store does not answer: a report alone.
		// Units granted to it could mix with admissions of the failure
		// mode made while it is on its way, which it cannot report.
		f.req.N = 0
	}
	var deadline int64
	if lo, hi, ok := s.link.storeTime(now); ok {
		// Applied only while an answer can still be waited for: after
		// that the call has given up, and the store must not count it.
		deadline = hi + s.link.timeout().Microseconds()
		f.req.NotAfter = time.UnixMicro(deadline)
		// Units admitted without a grant in the store's current window
		// (as far as this side can tell), not yet told.
		per := ck.lim.Period.Microseconds()
		for _, t := range [...]int64{hi, lo} {
			if w := e.win(t-mod(t, per), false); w != nil && w.spent > w.told {
				f.req.Spent, f.req.SpentWindow, f.spentW = int(w.spent-w.told), time.UnixMicro(w.start), w.start
				// Told first, and units asked for by the next call, sent
				// once no admission of the failure mode can be on its way.
				f.req.N = 0
				break
			}
		}
	}
	f.asked = pendingAllowance{value: int64(f.req.Allowance), deadline: deadline}
	e.askAllowance(f.asked.value, f.asked.deadline)
	e.fetching, e.fetchSent, e.fetchN, e.lastReport = true, now, f.req.N, now
	e.unsized = e.unsized && f.req.N == 0
	e.reported = reportState{demand: int64(f.req.Demand), allowance: int64(f.req.Allowance)}
	return f
}

// mod is a mod b for b > 0, in [0, b).
func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// start makes the call of f (nil: none) in the background.
func (s *Store) start(f *fetch) {
	if f != nil {
		go s.run(f)
	}
}

// run makes f's call under the link's deadline and applies its answer.
func (s *Store) run(f *fetch) {
	defer func() {
		<-s.sem
		s.fetchWG.Done()
	}()
	timeout := s.link.timeout()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	g, err := s.granter.Grant(ctx, f.ck.key, f.ck.lim, f.req)
	cancel()
	s.st.fetches.Add(1)
	if f.report {
		s.st.reports.Add(1)
	}
	s.finish(f, g, err, s.mono())
}

// finish applies the answer of f's call, received at recv: the units to
// the entry (or to its waiters first, in their order), a denial to the
// cache, a failure to the link.
func (s *Store) finish(f *fetch, g sluice.Grant, err error, recv time.Duration) {
	sh := s.shardOf(f.ck.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ck := f.e, f.ck
	e.fetching, e.warming = false, false
	answer := func(w *waiter, d sluice.Decision, at time.Time, err error) {
		if !w.gone {
			w.d, w.at, w.err = d, at, err
		}
		close(w.ch)
	}
	// Warm's callers (n = 0) learn whether the key was answered; the
	// decisions wait for their own answer below.
	var waiters []*waiter
	for _, w := range e.waiters {
		if w.n > 0 {
			waiters = append(waiters, w)
		}
	}
	defer func(warmers []*waiter) {
		for _, w := range warmers {
			if w.n > 0 {
				continue
			}
			switch {
			case e.answered:
				answer(w, sluice.Decision{}, time.Time{}, nil)
			case err != nil:
				answer(w, sluice.Decision{}, time.Time{}, err)
			default:
				answer(w, sluice.Decision{}, time.Time{}, errWarmLate)
			}
		}
	}(e.waiters)
	e.waiters = nil
	switch {
	case err != nil && (validate.IsInput(err) || errors.Is(err, sluice.ErrGrantUnsupported) || errors.Is(err, sluice.ErrClosed)):
		// No failure of the link: the request itself (a key beyond the
		// holders a key may have, a limit the store refuses).
		e.nextFetch = recv + s.cfg.refresh
		if !e.answered && !e.dead {
			e.dead = true
			delete(sh.m, ck)
		}
		for _, w := range waiters {
			answer(w, sluice.Decision{}, time.Time{}, err)
		}
		return
	case err != nil:
		s.st.fetchErrors.Add(1)
		if s.link.fail() {
			s.cfg.log.Warn("region: the home store does not answer; deciding by failure mode", "holder", s.holder, "store", s.global, "err", err)
		}
		e.nextFetch = recv + max(s.link.timeout()/2, s.cfg.refresh)
		for _, w := range waiters {
			answer(w, s.degrade(e, ck, recv, w.n), time.Time{}, nil)
		}
		return
	case g.Stale:
		// It reached the store after its deadline: nothing was applied.
		s.st.stale.Add(1)
		for _, w := range waiters {
			answer(w, s.waitDenial(e, ck, recv), time.Time{}, nil)
		}
		return
	}
	if s.link.observe(f.sent, recv, g.At.UnixMicro()) {
		s.cfg.log.Info("region: the home store answers again", "holder", s.holder, "store", s.global)
	}
	e.answered = true
	e.confirmAllowance(f.asked, int64(g.Allowance))
	e.share = int64(g.Share)
	e.lastOKSent = max(e.lastOKSent, f.sent)
	if f.req.Spent > 0 {
		if w := e.win(f.spentW, false); w != nil {
			w.told += int64(f.req.Spent)
		}
	}
	if g.Units > 0 {
		s.st.granted.Add(int64(g.Units))
		e.win(g.Window.UnixMicro(), true).received += int64(g.Units)
		gr := s.newGrant(ck.lim, g, f.sent)
		switch {
		case e.dead:
			// A reset forgot the entry while the call was on its way: the
			// units may predate it, and are neither spent nor given back.
			s.st.lost.Add(gr.units)
		case recv >= gr.expires:
			// The answer came after its window (or lease time) ended: its
			// units belong to a window that is over, and are not spent.
			s.st.late.Add(gr.units)
		default:
			e.grants = append(e.grants, gr)
			e.held += gr.units
			e.denyUntil = 0
		}
	} else if f.req.N > 0 {
		// Denied: true from the send time on, for RetryAfter. When units
		// are free but this holder's share or the others' allowances bound
		// it, the shares may move sooner: ask again within a refresh.
		ra := g.RetryAfter
		if g.Remaining > 0 {
			ra = min(ra, s.cfg.refresh)
		}
		e.denyUntil, e.deny, e.denySent = f.sent+ra, g.Decision, f.sent
		_, rv := s.link.rtt()
		e.nextFetch = e.denyUntil + max(rv, time.Millisecond)
	}
	for _, w := range waiters {
		if d, at, ok := s.spend(e, ck, recv, w.n); ok {
			answer(w, d, at, nil)
		} else if recv < e.denyUntil {
			answer(w, e.cachedDenial(ck.lim, recv), time.Time{}, nil)
		} else {
			answer(w, s.waitDenial(e, ck, recv), time.Time{}, nil)
		}
	}
}

// errWarmLate is Warm's error when its call reached the home store after
// its deadline.
var errWarmLate = errors.New("region: warm: the call reached the home store after its deadline (nothing applied)")

// newGrant is the grant of g's units, for a call sent at sent (local).
func (s *Store) newGrant(lim sluice.Limit, g sluice.Grant, sent time.Duration) grant {
	gr := grant{units: int64(g.Units), size: int64(g.Units), at: g.At, win: g.Window.UnixMicro(), got: sent, reset: g.ResetAfter}
	switch lim.Algorithm {
	case sluice.FixedWindow, sluice.SlidingWindow:
		// Counted in the store's window of At: spent only within it,
		// measured from before the call was sent (so never later than the
		// store's window end, whatever the round trip).
		left := time.Duration(algo.WindowLeft(g.At.UnixMicro(), lim.Period.Microseconds())) * time.Microsecond
		gr.expires = sent + left
		if lim.Algorithm == sluice.SlidingWindow {
			gr.returnBy = sent + left + lim.Period // still weighs in the next window
		}
	default:
		gr.expires = sent + s.cfg.leaseTime
		gr.returnBy = gr.expires + lim.Period
	}
	return gr
}
