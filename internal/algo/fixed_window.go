package algo

// Window is the state of a fixed window: the window's start and the events
// counted in it. The zero value is an untouched key.
type Window struct {
	Start int64
	Count int64
}

// FixedWindowStep admits n when the epoch-aligned window [floor(now/P)*P, +P)
// holds at most Rate-n events. A denied request waits for the window's end.
// It returns the state to keep: s itself unless n > 0 was admitted.
func FixedWindowStep(s Window, now int64, p Params, n int64) (Window, Result) {
	if s.Count > 0 && now < s.Start {
		now = s.Start // time never goes backwards for a key
	}
	ws := floorWindow(now, p.Period)
	count := int64(0)
	if s.Count > 0 && s.Start == ws {
		count = s.Count
	}
	end := ws + p.Period - now
	if n > 0 && count+n > p.Rate {
		return s, Result{Remaining: max(p.Rate-count, 0), RetryAfter: end, ResetAfter: end}
	}
	if n == 0 {
		r := Result{Allowed: true, Remaining: max(p.Rate-count, 0)}
		if count > 0 {
			r.ResetAfter = end
		}
		return s, r
	}
	count += n
	return Window{Start: ws, Count: count}, Result{Allowed: true, Remaining: p.Rate - count, ResetAfter: end}
}
