package region

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/validate"
)

// Reserve implements sluice.Reserver: it takes n units from those held, as
// AllowN does, for a client that spends them itself (tiered's leases over
// this store, a region's processes leasing from their region's service).
// The time it reports is that of the units' grant, moved so that the
// client, which measures what is left of a window from the time (for the
// window algorithms: algo.WindowLeft), spends them no later than this
// store would: the units' window, less than what is left here. While the
// home store does not answer and no units are held, a FailOpen limit's
// Reserve leases units of this region's allowance (within the window they
// are counted in, as for a grant), and any other is denied until the next
// window or probe; neither answer is Degraded, so that the client keeps
// the lease, or caches the denial, instead of asking for every decision.
// Stats counts them as the failure mode's.
func (s *Store) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	return s.decide(ctx, key, lim, n, true)
}

// Return implements sluice.Reserver. Units of a grant still held (the
// time is one Reserve reported) go back to it, to be spent here again;
// units of a grant that has ended are dropped, as this store would have
// dropped them. A refund with a zero time, and every refund of a limit
// not decided from grants, passes to the home store.
func (s *Store) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	if at.IsZero() || !grantable(lim) {
		return s.global.Return(ctx, key, lim, n, at)
	}
	if err := validate.Request(key, lim.WithCounting(sluice.CountAll), n); err != nil {
		return err
	}
	now := s.mono()
	sh := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[ckey{key, lim}]
	if e == nil {
		return nil
	}
	e.dropEnded(s, ckey{key, lim}, now)
	per := lim.Period.Microseconds()
	win := func(t time.Time) int64 { u := t.UnixMicro(); return u - mod(u, per) }
	for i := len(e.grants) - 1; i >= 0; i-- {
		g := &e.grants[i]
		same := g.at.Equal(at)
		if a := lim.Algorithm; a == sluice.FixedWindow || a == sluice.SlidingWindow {
			same = win(g.at) == win(at)
		}
		if same {
			k := min(int64(n), g.size-g.units)
			g.units += k
			e.held += k
			return nil
		}
	}
	return nil
}
