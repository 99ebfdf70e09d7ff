package tiered

import (
	"context"

	"github.com/sluicehq/sluice"
)

// localShare admits from the approximate local share, when it can. The
// local limiter checks the key and the share's limit; lim itself is
// checked first, since scaling it down could make an invalid limit valid.
func (s *Store) localShare(sh *shard, ck ckey, n int) (sluice.Decision, bool) {
	l, ok := shareLimit(ck.lim, s.share)
	if !ok || n > l.Capacity() {
		return sluice.Decision{}, false
	}
	d, err := s.local.AllowN(context.Background(), ck.key, l, n)
	if err != nil || !d.Allowed {
		return sluice.Decision{}, false
	}
	sh.mu.Lock()
	sh.local++
	sh.mu.Unlock()
	d.Limit = ck.lim
	return d, true
}

// shareLimit is the approximate local share f of lim: floor(Rate×f) per
// Period, Burst scaled the same, both at least 1. It reports false when lim
// is invalid.
func shareLimit(lim sluice.Limit, f float64) (sluice.Limit, bool) {
	if lim.Validate() != nil {
		return lim, false
	}
	l := lim
	l.Rate = max(int(float64(lim.Rate)*f), 1)
	if lim.Burst > 0 {
		l.Burst = max(int(float64(lim.Burst)*f), 1)
	}
	return l, true
}
