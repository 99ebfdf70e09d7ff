package tiered

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// direct asks the shared store and caches a denial (never a degraded one:
// it says nothing of the store's count). e is ck's entry as the fast path
// found it, or nil.
func (s *Store) direct(ctx context.Context, sh *shard, ck ckey, e *entry, n int) (sluice.Decision, error) {
	sent := s.mono()
	refunds, resets := sh.refunds.Load(), sh.resetMark()
	d, err := s.shared.AllowN(ctx, ck.key, ck.lim, n)
	s.shared_.Add(1)
	if err != nil || d.Degraded || d.Allowed && e == nil {
		return d, err
	}
	sh.mu.Lock()
	if !d.Allowed {
		e = s.live(sh, ck, e)
	} else if e.dead {
		e = nil
	}
	if e != nil {
		e.record(n, sent, d, sh.refunds.Load() != refunds || sh.resetSince(resets))
		e.lastUse = sent
	}
	sh.mu.Unlock()
	return d, nil
}

// MaxCachedDenial bounds how long a denial is cached. A refund (Return) on
// another process can free a key long before the store's RetryAfter (for a
// daily window, the rest of the day), and no process hears of another's
// refund: each asks the store again at least this often.
const MaxCachedDenial = time.Second

// record caches a denial of n, or clears the cache on an admission. A
// denial decided while a refund or a reset of the shard was on its way
// (refunded) is not cached: it may predate it.
func (e *entry) record(n int, sent time.Duration, d sluice.Decision, refunded bool) {
	if d.Allowed || refunded {
		e.denyN = 0
		return
	}
	e.denyN, e.denySent, e.deny = n, sent, d
	e.denyUntil = sent + d.RetryAfter
	e.denyStop = sent + min(d.RetryAfter, MaxCachedDenial)
}

// cachedDenial denies a request of the cached size until the cached
// RetryAfter has passed.
func (e *entry) cachedDenial(now time.Duration, n int) (sluice.Decision, bool) {
	if e.denyN != n || now >= e.denyStop {
		return sluice.Decision{}, false
	}
	d := e.deny
	d.RetryAfter = e.denyUntil - now
	d.ResetAfter = max(d.ResetAfter-(now-e.denySent), 0)
	if a := d.Limit.Algorithm; a == sluice.TokenBucket || a == sluice.GCRA {
		// The bucket refills at Rate per Period and holds n tokens at
		// denyUntil: n - ceil(wait × Rate/Period) of them now (never more
		// than it holds, at worst one fewer).
		lim := d.Limit
		if missing, ok := algo.RefillWithin(int64(lim.Rate), lim.Period.Microseconds(), d.RetryAfter.Microseconds()); ok {
			d.Remaining = min(max(d.Remaining, n-int(missing)), n-1)
		}
	}
	return d, true
}
