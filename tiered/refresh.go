package tiered

import (
	"context"

	"github.com/sluicehq/sluice"
	"time"
)

// refreshSize is the size of the next lease to take ahead for e, or 0 when
// none is due: refresh ahead is on, e's lease is down to the low water,
// and no lease is already ahead or on its way. It marks e refreshing. The
// shard's lock is held.
func (s *Store) refreshSize(e *entry, now time.Duration, lim sluice.Limit) int {
	// A lease of one request's units (k = n: little demand) is not
	// refreshed: the next request may never come.
	if s.refresh == 0 || e.refreshing || e.refreshOff || e.fetching != nil || e.next.units > 0 ||
		e.g.size < 2 || float64(e.g.units) > s.refresh*float64(e.g.size) || s.closed.Load() {
		return 0
	}
	e.refreshing = true
	return s.size(e, now, 1, lim)
}

// startRefresh takes the next lease of ck's key in the background.
func (s *Store) startRefresh(ck ckey, k int) {
	s.refreshing.Add(1)
	go func() {
		defer s.refreshing.Done()
		s.refreshLease(ck, k)
	}()
}

// refreshLease leases k units for ck ahead of need and keeps them as the
// key's next lease (or gives them back when the key no longer wants them).
// It holds the store's life read-lock, so that Close waits for it and then
// returns what it kept. A denied, degraded or failed lease turns refresh
// off for the key until a caller's own lease succeeds.
func (s *Store) refreshLease(ck ckey, k int) {
	sh := s.shardOf(ck.key)
	s.life.RLock()
	defer s.life.RUnlock()
	var (
		d   sluice.Decision
		at  time.Time
		err = sluice.ErrClosed
	)
	sh.mu.Lock()
	e0 := sh.m[ck] // the entry that asked; a reset forgets it
	sh.mu.Unlock()
	sent := s.mono()
	if !s.closed.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), s.returnTimeout)
		d, at, err = s.shared.Reserve(ctx, ck.key, ck.lim, k)
		cancel()
		s.shared_.Add(1)
	}
	granted := err == nil && d.Allowed && !d.Degraded
	if granted {
		s.leases.Add(1)
		s.leased.Add(int64(k))
		s.refreshes.Add(1)
	}
	sh.mu.Lock()
	e := sh.m[ck]
	if e0 == nil || e0.dead {
		// A reset forgot the entry while the lease was on its way: the
		// lease may predate it, and is neither kept nor given back.
		e, granted = nil, false
	}
	if e != nil {
		e.refreshing = false
		e.refreshOff = !granted
		if granted && e.next.units == 0 {
			e.next = s.newGrant(ck.lim, k, at, sent, d)
			granted = false // kept
		}
	}
	sh.mu.Unlock()
	if granted { // the entry is gone: nobody will spend them
		s.giveBack(context.Background(), giveBack{ck, int64(k), at}, true)
	}
}
