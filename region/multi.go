package region

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/validate"
)

// AllowMulti implements sluice.MultiStore. When every request is on a
// granted limit (see grantable) whose key has had its first answer, the
// call is decided from the units held, all-or-nothing under the locks of
// every shard involved, as AllowN is: admitted when the units held cover
// every request (each spending its units), denied otherwise with nothing
// spent, the requests that the units held cannot serve carrying the
// RetryAfter of an AllowN's denial (the home store's cached denial, or the
// time its next answer is due) and the others RetryAfter 0 and their
// units held as Remaining. Either way the call counts in each key's
// demand, and more units are fetched ahead as for AllowN.
//
// The call passes to the home store, one round trip, when a request
// counts every hit, is a sliding log or costs 0; when a key that the
// units held cannot serve has had no answer yet (its first use, whose
// units are then fetched for the calls after), or while the link to the
// home store is down; and when two requests share a key, algorithm and
// period under different limits (one state at the home store, two here).
func (s *Store) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	if s.closed.Load() {
		return nil, sluice.ErrClosed
	}
	if len(reqs) == 0 {
		return s.global.AllowMulti(ctx, reqs)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := validate.Multi(reqs); err != nil {
		return nil, err
	}
	for i, r := range reqs {
		if !grantable(r.Limit) || r.N == 0 {
			return s.global.AllowMulti(ctx, reqs)
		}
		p, err := s.limits.Check(r.Key, r.Limit, r.N)
		if err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		sum := int64(r.N)
		for _, o := range reqs[:i] {
			if o.Key != r.Key || o.Limit.Algorithm != r.Limit.Algorithm || o.Limit.Period != r.Limit.Period {
				continue
			}
			if o.Limit != r.Limit {
				return s.global.AllowMulti(ctx, reqs)
			}
			sum += int64(o.N)
		}
		if sum > p.Cap {
			// As the home store answers it: never admissible at once.
			return nil, &sluice.LimitError{Field: "N", Err: sluice.ErrExceedsCapacity, Reason: fmt.Sprintf("request %d: the requests on key %q (%v) ask %d in all, but %v admits at most %d at once",
				i, r.Key, r.Limit.Algorithm, sum, r.Limit, p.Cap)}
		}
	}
	ds, way := s.decideMulti(reqs)
	switch way {
	case wayLocal:
		return ds, nil
	case wayFirstUse:
		// The keys' units are asked for once the home store has decided:
		// asked for at once, a grant could reach it first and leave the
		// call nothing (its units held here, where this call no longer
		// looks).
		ds, err := s.global.AllowMulti(ctx, reqs)
		s.warm(reqs)
		return ds, err
	}
	return s.global.AllowMulti(ctx, reqs)
}

// How decideMulti's call is decided.
const (
	wayLocal    = iota // from the units held
	wayHome            // by the home store
	wayFirstUse        // by the home store, then the keys' first units asked for
)

// warm asks for the units of reqs' keys that hold none and have no call
// on its way: after a first use decided by the home store.
func (s *Store) warm(reqs []sluice.Request) {
	now := s.mono()
	for _, r := range reqs {
		ck := ckey{r.Key, r.Limit}
		sh := s.shardOf(r.Key)
		sh.mu.Lock()
		var f *fetch
		if e := sh.m[ck]; e != nil && e.held == 0 {
			f = s.fetchDue(e, ck, now, r.N)
		}
		sh.mu.Unlock()
		s.start(f)
	}
}

// decideMulti decides reqs (validated, all granted) from the units held,
// or says how the home store is to decide them (see AllowMulti).
func (s *Store) decideMulti(reqs []sluice.Request) (_ []sluice.Decision, way int) {
	// The bookkeeping stays on the stack (validate.Multi bounds the call).
	var idxBuf, orderBuf [sluice.MaxMultiRequests]int
	var entBuf [sluice.MaxMultiRequests]*entry
	var blockBuf [sluice.MaxMultiRequests]bool
	var fetchBuf [sluice.MaxMultiRequests]*fetch
	idx, ents, blocks, fetches := idxBuf[:0], entBuf[:0], blockBuf[:0], fetchBuf[:0]
	for _, r := range reqs {
		idx = append(idx, int(maphash.String(s.seed, r.Key)%numShards))
	}
	// Lock in shard order so that concurrent calls cannot deadlock.
	order := append(orderBuf[:0], idx...)
	slices.Sort(order)
	order = slices.Compact(order)
	for _, i := range order {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range order {
			s.shards[i].mu.Unlock()
		}
		for _, f := range fetches {
			s.start(f)
		}
	}()

	now, tau := s.mono(), s.tau()
	for i, r := range reqs {
		e := s.entry(&s.shards[idx[i]], ckey{r.Key, r.Limit}, now)
		if e == nil {
			return nil, wayHome // the table is full: as AllowN, the home store decides
		}
		ents = append(ents, e)
	}
	// Each request after the earlier ones on its entry: blocked when the
	// units left cannot serve it.
	blocked := false
	for i, r := range reqs {
		e := ents[i]
		e.lastUse = now
		e.asked.add(now, tau, r.N)
		first := slices.Index(ents, e) == i
		if first {
			e.dropEnded(s, ckey{r.Key, r.Limit}, now)
		}
		left := e.held
		for j := range i {
			if ents[j] == e && !blocks[j] {
				left -= int64(reqs[j].N)
			}
		}
		b := left < int64(r.N)
		blocks = append(blocks, b)
		blocked = blocked || b
	}
	if blocked {
		if s.link.down() {
			// The home store decides, through its failure mode, while the
			// keys are probed as AllowN probes them.
			for i, r := range reqs {
				if !blocks[i] {
					continue
				}
				if f := s.fetchDue(ents[i], ckey{r.Key, r.Limit}, now, r.N); f != nil {
					fetches = append(fetches, f)
				}
			}
			return nil, wayHome
		}
		for i := range reqs {
			if blocks[i] && !ents[i].answered {
				return nil, wayFirstUse
			}
		}
	}

	out := make([]sluice.Decision, len(reqs))
	for i, r := range reqs {
		e, ck := ents[i], ckey{r.Key, r.Limit}
		switch {
		case !blocked:
			out[i], _, _ = s.spend(e, ck, now, r.N)
			if f := s.fetchDue(e, ck, now, 0); f != nil {
				fetches = append(fetches, f)
			}
		case blocks[i]:
			// As AllowN: the call for more first, then the denial that
			// waits for it (or the home store's, cached).
			if f := s.fetchDue(e, ck, now, r.N); f != nil {
				fetches = append(fetches, f)
			}
			if now < e.denyUntil {
				out[i] = e.cachedDenial(ck.lim, now)
			} else {
				out[i] = s.waitDenial(e, ck, now)
			}
		default:
			// Not blocking: a peek at what is held, nothing spent.
			out[i] = sluice.Decision{Limit: ck.lim, Remaining: int(e.held), ResetAfter: e.resetAfter(now)}
		}
	}
	if blocked {
		s.st.localDenied.Add(1)
	} else {
		s.st.local.Add(1)
	}
	return out, wayLocal
}
