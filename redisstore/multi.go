package redisstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/validate"
)

// AllowMulti implements sluice.MultiStore in one script: either every
// request is admitted and counted, or none is. Requests naming the same
// state are decided as if made one after the other. On Redis Cluster the
// keys must share a hash slot: requests on one key always do (its limits of
// every algorithm and period share the key's hash tag); keys of different
// subjects usually do not, and then AllowMulti returns an error wrapping
// ErrCrossSlot that names them, before anything is sent.
//
// A request whose limit counts every hit (sluice.CountAll) is charged
// whatever the call decides, and its denial denies the call; all or
// nothing applies to the others. Requests on one state must share their
// Counting (else a *sluice.LimitError with Field "Counting").
func (s *Store) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	for i, rq := range reqs {
		if err := s.check(ctx, rq.Key, rq.Limit, rq.N); err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
	}
	if err := validate.Multi(reqs); err != nil {
		return nil, err
	}
	if s.msLayout {
		units := 0
		for _, rq := range reqs {
			if rq.Limit.Algorithm == sluice.SlidingLog {
				units += rq.N // each at most MaxMillisecondUnits (check)
			}
		}
		if units > MaxMillisecondUnits {
			return nil, msUnitsError(units)
		}
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	mb := multiBufs.Get().(*multiBuf)
	done := false // mb is the script run's (run puts it back)
	defer func() {
		if !done {
			mb.put()
		}
	}()
	keys := mb.keys[:0]
	for _, rq := range reqs {
		keys = append(keys, s.redisKey(rq.Key, rq.Limit))
	}
	mb.keys = keys
	// Costs on one state whose sum exceeds its capacity can never be
	// admitted together: ErrExceedsCapacity, as for one request. (At most
	// sluice.MaxMultiRequests requests: the scan over earlier ones is short.)
	for i, rq := range reqs {
		sum := rq.N
		for j := range i {
			if keys[j] == keys[i] {
				if reqs[j].Limit.Counting != rq.Limit.Counting {
					return nil, &sluice.LimitError{Field: "Counting", Reason: fmt.Sprintf("requests %d and %d on key %q (%v) count hits differently; requests on one state must share their Counting", j, i, rq.Key, rq.Limit.Algorithm)}
				}
				sum += reqs[j].N
			}
		}
		if c := rq.Limit.Capacity(); sum > c && rq.Limit.Counting != sluice.CountAll {
			return nil, &sluice.LimitError{Field: "N", Err: sluice.ErrExceedsCapacity, Reason: fmt.Sprintf("request %d: n = %d on key %q after %d earlier in the call, but %v admits at most %d at once",
				i, rq.N, rq.Key, sum-rq.N, rq.Limit, c)}
		}
	}
	args := s.clockArgs(mb.args[:0])
	for _, rq := range reqs {
		a := s.newArgs(rq.Limit, rq.N)
		args = a.appendAll(args)
	}
	mb.args = args
	if s.c.isRing() {
		// A Ring shards by hash tag: the keys must share it.
		t0 := hashTag(keys[0])
		for i := 1; i < len(keys); i++ {
			if ti := hashTag(keys[i]); ti != t0 {
				return nil, fmt.Errorf("%w: key %q (Redis key %q) and key %q (Redis key %q) have different hash tags on a Ring",
					ErrCrossSlot, reqs[0].Key, keys[0], reqs[i].Key, keys[i])
			}
		}
	}
	if s.c.isCluster() {
		s0 := slot(keys[0])
		for i := 1; i < len(keys); i++ {
			if si := slot(keys[i]); si != s0 {
				return nil, fmt.Errorf("%w: key %q (Redis key %q, slot %d) and key %q (Redis key %q, slot %d)",
					ErrCrossSlot, reqs[0].Key, keys[0], s0, reqs[i].Key, keys[i], si)
			}
		}
	}
	done = true
	res, err := s.runThen(ctx, multiScript, keys, args, mb)
	if err != nil {
		return nil, err
	}
	if len(res) != 2+4*len(reqs) {
		return nil, fmt.Errorf("redisstore: eval multi: reply has %d values, want %d", len(res), 2+4*len(reqs))
	}
	out := make([]sluice.Decision, len(reqs))
	for i := range reqs {
		out[i] = decision(reqs[i].Limit, res[2+4*i:])
	}
	return out, nil
}

// multiBuf holds the keys and arguments of an AllowMulti call, reused
// (multiBufs) once its script run is over: the client copies them into
// its command, and a run that outlives its caller's context still holds
// them until it ends.
type multiBuf struct{ keys, args []string }

var multiBufs = sync.Pool{New: func() any { return new(multiBuf) }}

// put returns b to multiBufs, unless a large call grew it (at most
// sluice.MaxMultiRequests keys: it stays small).
func (b *multiBuf) put() {
	clear(b.keys)
	clear(b.args)
	b.keys, b.args = b.keys[:0], b.args[:0]
	multiBufs.Put(b)
}
