package memstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/validate"
)

// AllowMulti implements sluice.MultiStore: the requests are decided under
// the locks of all their shards at one instant, and either all are counted
// or none is. Requests naming the same state (key, algorithm and period)
// are decided as if made one after the other; when their costs together
// exceed a limit's capacity, the call fails with sluice.ErrExceedsCapacity,
// since no wait could admit them.
//
// A request whose limit counts every hit (sluice.CountAll) is charged
// whatever the call decides, and its denial denies the call; all or
// nothing applies to the others. Requests on one state must share their
// Counting (else a *sluice.LimitError with Field "Counting").
func (s *Store) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	if err := s.checkMulti(ctx, reqs); err != nil || len(reqs) == 0 {
		return nil, err
	}
	// Small calls, the usual, keep their bookkeeping on the stack.
	var itemBuf [8]item
	var shardBuf [8]int
	items, shards, err := s.items(reqs, itemBuf[:0], shardBuf[:0])
	if err != nil {
		return nil, err
	}
	// Lock in shard order so that concurrent calls cannot deadlock.
	slices.Sort(shards)
	shards = slices.Compact(shards)
	return s.decideLocked(reqs, items, shards), nil
}

// checkMulti is what AllowMulti and Untouched check before any lock: the
// store open, the context live, every request and the call valid.
func (s *Store) checkMulti(ctx context.Context, reqs []sluice.Request) error {
	if s.closed.Load() {
		return s.closedErr()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for i, rq := range reqs {
		if err := validate.Request(rq.Key, rq.Limit, rq.N); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
	}
	return validate.Multi(reqs)
}

// items makes the items of reqs (validated) in items, and lists their
// shards in shards, or reports requests on one state that ask more than
// its capacity or count hits differently.
func (s *Store) items(reqs []sluice.Request, items []item, shards []int) ([]item, []int, error) {
	if len(reqs) > cap(items) {
		items, shards = make([]item, 0, len(reqs)), make([]int, 0, len(reqs))
	}
	items = items[:len(reqs)]
	for i, rq := range reqs {
		it := &items[i]
		it.p, _ = s.limits.Params(rq.Limit) // validated by the caller
		it.rf = s.ref(rq.Key, it.p)
		it.first, it.sum = i, int64(rq.N)
		for j := range i {
			if sameState(&items[j].rf, &it.rf) {
				if items[j].p.Charge != it.p.Charge {
					return nil, nil, &sluice.LimitError{Field: "Counting", Reason: fmt.Sprintf("requests %d and %d on key %q (%v) count hits differently; requests on one state must share their Counting", j, i, rq.Key, rq.Limit.Algorithm)}
				}
				it.first = items[j].first
				it.sum = items[j].sum + int64(rq.N)
			}
		}
		if it.sum > it.p.Cap && !it.p.Charge {
			return nil, nil, &sluice.LimitError{Field: "N", Err: sluice.ErrExceedsCapacity, Reason: fmt.Sprintf("request %d: the requests on key %q (%v) ask %d in all, but %v admits at most %d at once",
				i, rq.Key, rq.Limit.Algorithm, it.sum, rq.Limit, it.p.Cap)}
		}
		shards = append(shards, it.rf.si)
	}
	return items, shards, nil
}

// Untouched decides reqs as AllowMulti would if none of their keys had
// anything counted, at the store's clock, and counts nothing: the answer
// of a store that has lost its counts, which failover gives under
// sluice.FailUncounted. The store's own states are neither read nor
// changed. Its errors are AllowMulti's.
func (s *Store) Untouched(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	if err := s.checkMulti(ctx, reqs); err != nil || len(reqs) == 0 {
		return nil, err
	}
	var itemBuf [8]item
	var shardBuf [8]int
	items, _, err := s.items(reqs, itemBuf[:0], shardBuf[:0])
	if err != nil {
		return nil, err
	}
	// Every state is looked up in an empty shard of the call's own: none
	// is found, and nothing is written where another call could see it.
	empty := new(shard)
	for i := range items {
		items[i].rf.sh = empty
	}
	now := s.nowMicro()
	out := make([]sluice.Decision, len(reqs))
	allowed := true
	for i := range items {
		r := decideItem(items, i, now, int64(reqs[i].N))
		out[i] = decision(reqs[i].Limit, r)
		allowed = allowed && r.Allowed
	}
	if !allowed {
		peekUnblocked(reqs, items, out, now)
	}
	return out, nil
}

// decideLocked runs decideMulti under the locks of shards (sorted, unique),
// released by deferred unlocks even if a step panics: the decisions are
// made before anything is committed, so a panic leaves the states as they
// were.
func (s *Store) decideLocked(reqs []sluice.Request, items []item, shards []int) []sluice.Decision {
	locked := 0
	defer func() {
		for _, i := range shards[:locked] {
			s.shards[i].mu.Unlock()
		}
	}()
	for _, i := range shards {
		s.shards[i].mu.Lock()
		locked++
	}
	return s.decideMulti(reqs, items)
}

// decideMulti decides reqs under the locks of all their shards.
//
// Every request is decided without counting anything, one after the
// other: a request on a state is decided after the earlier requests on it
// that were admitted (a denied one is not counted for those after it, as it
// is not counted at all). Only when all are admitted is anything counted.
func (s *Store) decideMulti(reqs []sluice.Request, items []item) []sluice.Decision {
	now := s.nowMicro()
	out := make([]sluice.Decision, len(reqs))
	allowed := true
	for i := range items {
		r := decideItem(items, i, now, int64(reqs[i].N))
		out[i] = decision(reqs[i].Limit, r)
		allowed = allowed && r.Allowed
	}
	if !allowed {
		s.commitCharges(items, now)
		peekUnblocked(reqs, items, out, now)
		return out
	}
	s.commitMulti(reqs, items, now)
	return out
}

// decideItem decides items[i] of cost n at now, after the earlier items on
// its state, without counting it. Bucket and window states advance in a
// copy held by the state's first item; a log is asked for the costs
// admitted so far plus this one, which the capacity check of AllowMulti
// keeps within its Rate.
func decideItem(items []item, i int, now, n int64) algo.Result {
	it := &items[i]
	g := &items[it.first]
	if it.first == i {
		if e := it.rf.sh.find(&it.rf); e != nil {
			if it.p.Kind == algo.SlidingLog {
				g.log = it.rf.sh.log(e)
			}
			if e.expires > now {
				g.tmp = *e
			} else if g.log != nil {
				g.log.Reset() // expired: nothing in it counts any more
			}
		}
	}
	g.changed = g.changed || n > 0
	if it.p.Kind != algo.SlidingLog {
		return it.rf.sh.step(&g.tmp, now, it.p, n, true)
	}
	// A peek (n 0) after admitted costs asks for none of them: it is never
	// denied.
	before := g.admitted
	cost := before + n
	if n == 0 {
		cost = 0
	}
	r := stepLog(g.log, now, *it.p, cost)
	if r.Allowed {
		g.admitted += n
	}
	if before > 0 && (n == 0 || !r.Allowed) {
		// The costs admitted before it are counted, and are the newest
		// entries: the log is back to empty a Period after now.
		r.Remaining = max(r.Remaining-before, 0)
		r.ResetAfter = it.p.Period
	}
	return r
}

// peekUnblocked turns the decisions of a denied call that would have been
// admitted into peeks of their state as it is, denied; the blocking ones
// keep their wait. Nothing is counted.
func peekUnblocked(reqs []sluice.Request, items []item, out []sluice.Decision, now int64) {
	for i := range out {
		if !out[i].Allowed {
			continue
		}
		it := &items[i]
		if it.p.Charge {
			out[i].Allowed = false // charged all the same
			continue
		}
		var r algo.Result
		if it.p.Kind == algo.SlidingLog {
			r = stepLog(items[it.first].log, now, *it.p, 0)
		} else {
			var cur entry
			if e := it.rf.sh.find(&it.rf); e != nil && e.expires > now {
				cur = *e
			}
			r = it.rf.sh.step(&cur, now, it.p, 0, false)
		}
		out[i] = decision(reqs[i].Limit, r)
		out[i].Allowed = false
	}
}

// commitCharges counts the requests of a denied call whose limits count
// every hit: they are charged whatever the call's decision. A state holds
// requests of one Counting only (AllowMulti), so a charged state holds no
// admission of the call's other requests.
func (s *Store) commitCharges(items []item, now int64) {
	for i := range items {
		it := &items[i]
		if it.p.Charge && it.first == i && it.changed {
			e := it.rf.sh.lookupOrInsert(&it.rf, now, s)
			e.setState(&it.tmp)
			it.rf.sh.noteExpiry(e.expires)
		}
	}
}

// commitMulti counts every request of a call that was admitted whole.
func (s *Store) commitMulti(reqs []sluice.Request, items []item, now int64) {
	for i := range items {
		it := &items[i]
		n := int64(reqs[i].N)
		if it.p.Kind == algo.SlidingLog {
			if n > 0 {
				e := it.rf.sh.lookupOrInsert(&it.rf, now, s)
				it.rf.sh.step(e, now, it.p, n, true)
				it.rf.sh.noteExpiry(e.expires)
			}
			continue
		}
		if it.first == i && it.changed {
			e := it.rf.sh.lookupOrInsert(&it.rf, now, s)
			e.setState(&it.tmp)
			it.rf.sh.noteExpiry(e.expires)
		}
	}
}

// item is one request of an AllowMulti call.
type item struct {
	rf    ref
	p     *algo.Params
	first int   // index of the first request on the same state
	sum   int64 // costs of the requests on this state up to this one
	// On the first request of a state only:
	tmp      entry // the state as the requests so far leave it (not the log)
	log      *algo.Log
	admitted int64 // a log's costs admitted so far in the call
	changed  bool  // some request on the state has n > 0
}

// stepLog decides n on log (nil: empty) without counting it.
func stepLog(log *algo.Log, now int64, p algo.Params, n int64) algo.Result {
	if log == nil {
		var empty algo.Log
		return algo.SlidingLogStep(&empty, now, p, n, false)
	}
	return algo.SlidingLogStep(log, now, p, n, false)
}

// lookupOrInsert returns the live entry for sk, resetting an expired one,
// or inserts a new one. sh.mu is held.
func (sh *shard) lookupOrInsert(rf *ref, now int64, s *Store) *entry {
	e := sh.find(rf)
	if e == nil {
		return sh.insert(rf, now, s)
	}
	if e.expires <= now {
		sh.reset(e)
	}
	return e
}

func sameState(a, b *ref) bool {
	return a.h == b.h && a.period == b.period && a.key == b.key
}

// find returns the state rf names, or nil; the pointer is valid until the
// shard's next insert. sh.mu is held.
func (sh *shard) find(rf *ref) *entry {
	if i := sh.lookup(rf); i >= 0 {
		return &sh.slots[i]
	}
	return nil
}
