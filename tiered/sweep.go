package tiered

import (
	"context"
	"sync"
	"time"
)

// giveBack is leased units to return.
type giveBack struct {
	ck    ckey
	units int64
	at    time.Time
}

// giveBack returns units; on a caller's path (queue true) a failure queues
// them for the sweeper.
//
// Every unit goes back: for TokenBucket and GCRA the store's Return credits
// n units less what has refilled since the lease's time at, so it never
// credits the refill twice.
func (s *Store) giveBack(ctx context.Context, r giveBack, queue bool) {
	n := r.units
	if n <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.returnTimeout)
	err := s.shared.Return(ctx, r.ck.key, r.ck.lim, int(n), r.at)
	cancel()
	s.shared_.Add(1)
	if err == nil {
		s.returned.Add(n)
		return
	}
	if queue && !s.closed.Load() {
		s.pendMu.Lock()
		s.pending = append(s.pending, r)
		s.pendMu.Unlock()
		return
	}
	s.returnErrors.Add(1)
	s.log.Warn("tiered: return of leased units failed; they stay counted until they expire", "key", r.ck.key, "limit", r.ck.lim, "units", r.units, "err", err)
}

// sweep ends the leases that have ended, returns their units, and forgets
// idle entries: every sweep interval, in the background.
func (s *Store) sweep() {
	if rets := s.collect(false); len(rets) > 0 {
		s.giveBackAll(rets, nil)
	}
}

// collect ends the leases that have ended (all of them when all is true),
// takes the pending returns, and forgets idle entries. It leaves alone the
// shards with a reset on its way (Reset), and their pending returns.
func (s *Store) collect(all bool) []giveBack {
	now := s.mono()
	s.pendMu.Lock()
	var rets, keep []giveBack
	for _, r := range s.pending {
		if sh := s.shardOf(r.ck.key); sh.resetsBegun.Load() != sh.resetsDone.Load() {
			keep = append(keep, r) // for the next sweep, unless the reset drops it
		} else {
			rets = append(rets, r)
		}
	}
	s.pending = keep
	s.pendMu.Unlock()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if sh.resetsBegun.Load() != sh.resetsDone.Load() {
			// A reset is on its way: the leases it is about to drop must
			// not be given back after it. The next sweep takes the rest.
			sh.mu.Unlock()
			continue
		}
		for ck, e := range sh.m {
			if e.fetching != nil {
				continue
			}
			for _, g := range []*grant{&e.g, &e.next} {
				if g.units > 0 && (all || now >= g.expires) {
					if g.returnBy == 0 || now < g.returnBy {
						rets = append(rets, giveBack{ck, g.units, g.at})
					}
					*g = grant{}
				}
			}
			if e.g.units == 0 && e.next.units == 0 && !e.refreshing && now >= e.denyStop && now-e.lastUse >= s.idle {
				forget(sh, ck, e)
			}
		}
		sh.mu.Unlock()
	}
	return rets
}

// giveBackAll returns rets concurrently, each under its own timeout, or
// all under ctx when it is not nil.
func (s *Store) giveBackAll(rets []giveBack, ctx context.Context) {
	sem := make(chan struct{}, returnWorkers)
	var wg sync.WaitGroup
	for _, r := range rets {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, cancel := ctx, context.CancelFunc(func() {})
			if c == nil {
				c, cancel = context.WithTimeout(context.Background(), s.returnTimeout)
			}
			defer cancel()
			s.giveBack(c, r, false)
		}()
	}
	wg.Wait()
}
