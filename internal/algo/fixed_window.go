package algo

// Window is the state of a fixed window: the window's start and the events
// counted in it. The zero value is an untouched key.
type Window struct {
	Start int64
	Count int64
}

// at is the state at now, for a period of P: now itself (never before the
// state's start: time does not go backwards for a key), the start ws of
// now's window, and its count.
func (s Window) at(now, P int64) (_, ws, count int64) {
	if s.Count > 0 && now < s.Start {
		now = s.Start
	}
	ws = floorWindow(now, P)
	if s.Count > 0 && s.Start == ws {
		count = s.Count
	}
	return now, ws, count
}

// FixedWindowStep admits n when the epoch-aligned window [floor(now/P)*P, +P)
// holds at most Rate-n events. A denied request waits for the window's end.
// It returns the state to keep: s itself unless n > 0 was admitted.
func FixedWindowStep(s Window, now int64, p Params, n int64) (Window, Result) {
	now, ws, count := s.at(now, p.Period)
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
