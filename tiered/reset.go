package tiered

import (
	"context"
	"errors"
	"slices"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/validate"
)

// Reset implements sluice.Resetter: it resets the key in the shared store
// (which validates it), then drops this process's local state of the key
// under lim's algorithm and period, whatever their Rate, Burst or
// Counting: its cached denials, its leases and the local share's count.
// The leases' unspent units are not given back: they were counted in the
// shared state that the reset deleted, and giving them back would credit
// the fresh key. A lease, refresh or denial decided while the reset was on
// its way may predate it, and is not kept. Other processes in front of the
// same shared store keep their own leases and cached denials until these
// end (a lease's lifetime, MaxCachedDenial).
//
// A shared store that cannot reset returns its sluice.ErrResetUnsupported,
// and nothing local is dropped. When the shared store fails, the local
// state is dropped all the same (the reset may have been applied), and its
// error is returned.
func (s *Store) Reset(ctx context.Context, key string, lim sluice.Limit) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	s.life.RLock() // Close waits, then returns only what the reset kept
	defer s.life.RUnlock()
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	sh := s.shardOf(key)
	sh.resetsBegun.Add(1) // before: a decision sent from now on may predate the reset
	defer sh.resetsDone.Add(1)
	s.shared_.Add(1)
	err := s.shared.Reset(ctx, key, lim)
	if validate.IsInput(err) || errors.Is(err, sluice.ErrResetUnsupported) {
		return err // nothing was reset, and nothing local can match
	}
	s.dropLocal(sh, key, lim)
	if s.local != nil {
		// The share keeps one state per key, algorithm and period, whatever
		// its scaled Rate: lim (valid, or the shared store said so) names it.
		_ = s.local.Reset(context.Background(), key, lim)
	}
	return err
}

// dropLocal forgets the entries of key under lim's algorithm and period,
// their leases and cached denials with them, and the pending returns of
// their units. A lease or refresh in flight on a forgotten entry finds it
// dead and keeps nothing. The scan is bounded by the shard's capacity
// (WithMaxKeys).
func (s *Store) dropLocal(sh *shard, key string, lim sluice.Limit) {
	match := func(ck ckey) bool {
		return ck.key == key && ck.lim.Algorithm == lim.Algorithm && ck.lim.Period == lim.Period
	}
	sh.mu.Lock()
	for ck, e := range sh.m {
		if match(ck) {
			e.g, e.next, e.denyN = grant{}, grant{}, 0
			forget(sh, ck, e)
		}
	}
	sh.mu.Unlock()
	s.pendMu.Lock()
	s.pending = slices.DeleteFunc(s.pending, func(r giveBack) bool { return match(r.ck) })
	s.pendMu.Unlock()
}

// resetMark is read before a decision is sent to the shared store; passed
// to resetSince when its answer is kept.
func (sh *shard) resetMark() uint64 { return sh.resetsDone.Load() }

// resetSince reports whether a reset of the shard's keys was on its way at
// any time since mark was read: every reset begun by now was not done by
// then. A denial decided meanwhile may predate the reset.
func (sh *shard) resetSince(mark uint64) bool { return sh.resetsBegun.Load() != mark }
