package memstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// AllowMulti implements sluice.MultiStore: the requests are decided under
// the locks of all their shards at one instant, and either all are counted
// or none is. Requests naming the same state (key, algorithm and period)
// are decided as if made one after the other.
func (s *Store) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	for i, rq := range reqs {
		if err := s.check(ctx, rq.Key, rq.Limit, rq.N); err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	type item struct {
		sh   *shard
		sk   stateKey
		p    algo.Params
		e    *entry // existing entry, or nil
		tmp  entry  // state as the earlier requests of this call left it
		pre  entry  // state before this request
		prev int    // index of an earlier request on the same state, or -1
	}
	items := make([]item, len(reqs))
	locked := make([]*shard, 0, len(reqs))
	for i, rq := range reqs {
		p := params(rq.Limit)
		it := &items[i]
		it.p, it.sk, it.sh, it.prev = p, stateKey{rq.Key, p.Kind, p.Period}, s.shardOf(rq.Key), -1
		if !slices.Contains(locked, it.sh) {
			locked = append(locked, it.sh)
		}
		for j := range i {
			if items[j].sk == it.sk {
				it.prev = j
			}
		}
	}
	// Lock in address order so that concurrent calls cannot deadlock.
	slices.SortFunc(locked, func(a, b *shard) int {
		return int(shardIndex(s, a) - shardIndex(s, b))
	})
	for _, sh := range locked {
		sh.mu.Lock()
	}
	defer func() {
		for _, sh := range locked {
			sh.mu.Unlock()
		}
	}()
	now := s.now().UnixMicro()

	// Decide every request without changing anything. Requests on the same
	// state see the earlier ones' counts: bucket and window states through a
	// copy, a log through the cost still pending on it.
	out := make([]sluice.Decision, len(reqs))
	pendingLog := make([]int64, len(reqs))
	allowed := true
	for i := range items {
		it := &items[i]
		n := int64(reqs[i].N)
		if it.prev >= 0 {
			it.tmp = items[it.prev].tmp
			it.e = items[it.prev].e
			pendingLog[i] = pendingLog[it.prev] + int64(reqs[it.prev].N)
		} else if e := it.sh.m[it.sk]; e != nil {
			it.e = e
			if e.expires > now {
				it.tmp = *e
			} else {
				it.tmp.log = e.log
				if e.log != nil {
					e.log.Reset()
				}
			}
		}
		it.pre = it.tmp
		var r algo.Result
		if it.p.Kind == algo.SlidingLog {
			r = it.tmp.step(now, it.p, n+pendingLog[i], false)
			r.Remaining = max(r.Remaining+pendingLog[i], 0)
		} else {
			r = it.tmp.step(now, it.p, n, true)
		}
		out[i] = decision(reqs[i].Limit, r)
		allowed = allowed && r.Allowed
	}
	if !allowed {
		for i := range out {
			if out[i].Allowed {
				// Admissible alone, but not counted: report a peek.
				out[i].Allowed = false
				r := items[i].pre.step(now, items[i].p, 0, false)
				out[i].Remaining = int(r.Remaining)
			}
		}
		return out, nil
	}
	// Commit: every request is admitted.
	for i := range items {
		it := &items[i]
		n := int64(reqs[i].N)
		if n == 0 {
			continue
		}
		e := it.e
		if e == nil {
			e = it.sh.m[it.sk]
			if e == nil {
				e = it.sh.insert(it.sk, now, s)
			}
			it.e = e
			for j := i + 1; j < len(items); j++ {
				if items[j].prev >= 0 && items[j].sk == it.sk {
					items[j].e = e
				}
			}
		}
		if it.p.Kind == algo.SlidingLog {
			e.step(now, it.p, n, true)
		} else {
			log := e.log
			*e = it.tmp
			e.log = log
		}
	}
	return out, nil
}

func shardIndex(s *Store, sh *shard) int {
	for i := range s.shards {
		if &s.shards[i] == sh {
			return i
		}
	}
	return -1
}
