package region

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// giveBack is units of an ended grant to return to the home store.
type giveBack struct {
	ck    ckey
	units int64
	at    time.Time
}

// queueBack queues units for the background loop to give back.
func (s *Store) queueBack(ck ckey, units int64, at time.Time) {
	s.pendMu.Lock()
	if len(s.pending) < s.cfg.maxKeys {
		s.pending = append(s.pending, giveBack{ck, units, at})
	}
	s.pendMu.Unlock()
}

// tick is the background loop's interval.
func (s *Store) tick() time.Duration {
	return min(max(s.cfg.refresh/4, 5*time.Millisecond), 250*time.Millisecond)
}

// idle is how long an unused entry is kept.
func (s *Store) idle() time.Duration { return max(4*s.tau(), time.Second) }

// loop runs until Close: every tick it takes each key's next grant when
// its units will not last until an answer (a decision does too, but a key
// may go a while without one), sends the reports that are due, forgets the
// idle keys (telling the home store, so that their allowance is freed
// at once), and gives back the units of ended grants worth returning.
func (s *Store) loop() {
	defer close(s.done)
	t := time.NewTicker(s.tick())
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.sweep()
	}
}

func (s *Store) sweep() {
	now := s.mono()
	idle := s.idle()
	var calls []*fetch
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for ck, e := range sh.m {
			e.dropEnded(s, ck, now)
			if !e.fetching && len(e.waiters) == 0 && now-e.lastUse >= idle && now >= e.holdUntil {
				e.dead = true
				delete(sh.m, ck)
				if e.confirmed && (e.reported.allowance > 0 || e.reported.demand > 0) {
					if f := s.plan(e, ck, now, 0, 0); f != nil {
						f.report, f.leave = true, true
						calls = append(calls, f)
					}
				}
				continue
			}
			f := s.fetchDue(e, ck, now, 0)
			if f == nil {
				f = s.reportDue(e, ck, now)
			}
			if f != nil {
				calls = append(calls, f)
			}
		}
		sh.mu.Unlock()
	}
	for _, f := range calls {
		s.start(f)
	}
	s.pendMu.Lock()
	rets := s.pending
	s.pending = nil
	s.pendMu.Unlock()
	if len(rets) > 0 {
		s.giveBackAll(context.Background(), rets)
	}
}

// giveBackAll returns rets, each under the link's deadline (and ctx),
// a few at a time.
func (s *Store) giveBackAll(ctx context.Context, rets []giveBack) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	sem := make(chan struct{}, 16)
	for _, r := range rets {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, cancel := context.WithTimeout(ctx, s.link.timeout())
			err := s.global.Return(c, r.ck.key, r.ck.lim, int(r.units), r.at)
			cancel()
			if err != nil {
				mu.Lock()
				failed++
				mu.Unlock()
				s.cfg.log.Debug("region: return of unspent units failed; they stay counted until they expire", "key", r.ck.key, "units", r.units, "err", err)
			}
		}()
	}
	wg.Wait()
	return failed
}

// Close stops the background loop, waits for the calls in flight, then
// (within the close timeout) tells the home store that this holder leaves
// each key, so that its allowance is freed at once, and gives back the
// units worth returning. Later calls return sluice.ErrClosed. It does not
// close the home store. The error reports what could not be done.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		<-s.done
		for i := range s.shards { // every plan made before closed was seen is counted
			s.shards[i].mu.Lock()
			s.shards[i].mu.Unlock() //nolint:staticcheck // a barrier
		}
		s.fetchWG.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.closeTimeout)
		defer cancel()
		now := s.mono()
		var leave []ckey
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			for ck, e := range sh.m {
				for _, g := range e.grants {
					if g.units > 0 && g.returnBy > 0 && now < g.returnBy {
						s.pending = append(s.pending, giveBack{ck, g.units, g.at})
					}
				}
				e.grants, e.held, e.dead = nil, 0, true
				if e.confirmed && (e.reported.allowance > 0 || e.reported.demand > 0) {
					leave = append(leave, ck)
				}
			}
			sh.m = map[ckey]*entry{}
			sh.mu.Unlock()
		}
		var errs []error
		if failed := s.giveBackAll(ctx, s.pending); failed > 0 {
			errs = append(errs, fmt.Errorf("region: close: %d returns of unspent units failed", failed))
		}
		s.pending = nil
		failed := 0
		for _, ck := range leave {
			req := sluice.GrantRequest{Holder: s.holder, TTL: s.cfg.reportTTL}
			c, cancel := context.WithTimeout(ctx, s.link.timeout())
			if _, err := s.granter.Grant(c, ck.key, ck.lim, req); err != nil {
				failed++
			}
			cancel()
		}
		if failed > 0 {
			errs = append(errs, fmt.Errorf("region: close: %d of %d last reports failed (their allowances stay reserved until their TTL)", failed, len(leave)))
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}
