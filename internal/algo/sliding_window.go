package algo

// Counter is the state of a sliding-window counter: the start of the current
// fixed window and the counts of the previous and current windows. The zero
// value is an untouched key.
type Counter struct {
	Start int64
	Prev  int64
	Cur   int64
}

// at is the state at now, for a period of P: now itself (never before the
// state's start: time does not go backwards for a key), the start ws of
// now's window, and the counts of the window before it and of it.
func (s Counter) at(now, P int64) (_, ws, prev, cur int64) {
	if (s.Prev > 0 || s.Cur > 0) && now < s.Start {
		now = s.Start
	}
	ws = floorWindow(now, P)
	switch s.Start {
	case ws:
		prev, cur = s.Prev, s.Cur
	case ws - P:
		prev = s.Cur
	}
	return now, ws, prev, cur
}

// SlidingWindowStep admits n when floor(prev*(P-elapsed)/P) + cur + n <= Rate,
// where elapsed is the time since the current window began. When denied,
// RetryAfter is the closed-form earliest time at which the weighted count
// admits n. It returns the state to keep: s itself unless n > 0 was admitted.
func SlidingWindowStep(s Counter, now int64, p Params, n int64) (Counter, Result) {
	P := p.Period
	now, ws, prev, cur := s.at(now, P)
	e := now - ws
	count := prev*(P-e)/P + cur
	if n > 0 && count+n > p.Rate {
		r := Result{Remaining: max(p.Rate-count, 0), RetryAfter: slidingRetry(ws, now, prev, cur, p, n)}
		r.ResetAfter = slidingReset(ws, now, prev, cur, P)
		return s, r
	}
	if n == 0 {
		return s, Result{Allowed: true, Remaining: max(p.Rate-count, 0), ResetAfter: slidingReset(ws, now, prev, cur, P)}
	}
	cur += n
	return Counter{Start: ws, Prev: prev, Cur: cur}, Result{Allowed: true, Remaining: p.Rate - count - n, ResetAfter: slidingReset(ws, now, prev, cur, P)}
}

// slidingRetry is the closed form of the earliest admitting time.
// floor(x*(P-e)/P) <= a holds exactly when e >= P - floor(((a+1)*P-1)/x).
func slidingRetry(ws, now, prev, cur int64, p Params, n int64) int64 {
	P := p.Period
	if a := p.Rate - n - cur; a >= 0 && prev > 0 {
		e := max(P-((a+1)*P-1)/prev, 0)
		if e < P {
			return ws + e - now
		}
	}
	// Not within the current window: in the next one the current count is
	// the previous window's, and nothing is counted yet.
	e := int64(0)
	if cur > 0 {
		e = min(max(P-((p.Rate-n+1)*P-1)/cur, 0), P)
	}
	return ws + P + e - now
}

// slidingReset is the time until neither window's count weighs anything.
func slidingReset(ws, now, prev, cur, P int64) int64 {
	switch {
	case cur > 0:
		return ws + 2*P - now
	case prev > 0:
		return ws + P - now
	}
	return 0
}
