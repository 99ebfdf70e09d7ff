package algo

// The Return functions give back n units admitted at time at (a lease taken
// and not spent): afterwards the state is as if those units had never been
// admitted, as far as they still count at all. They never give back more
// than the state holds, so a wrong or repeated return cannot raise a limit
// beyond an untouched key. An n <= 0 gives nothing back (and never takes).

// FixedWindowReturn uncounts n units admitted at at, if at lies in the
// window the state holds.
func FixedWindowReturn(s Window, at int64, p Params, n int64) Window {
	if n > 0 && s.Count > 0 && floorWindow(at, p.Period) == s.Start {
		s.Count = max(s.Count-n, 0)
	}
	return s
}

// SlidingWindowReturn uncounts n units admitted at at from the window,
// current or previous, that counted them.
func SlidingWindowReturn(s Counter, at int64, p Params, n int64) Counter {
	if n <= 0 {
		return s
	}
	switch floorWindow(at, p.Period) {
	case s.Start:
		s.Cur = max(s.Cur-n, 0)
	case s.Start - p.Period:
		s.Prev = max(s.Prev-n, 0)
	}
	return s
}

// bucketCredit is what n bucket units admitted at at are still worth at
// now, in scaled units: n*P less the refill since at. The lease's effect on
// the bucket shrinks by at most R per µs (by exactly that much while the
// bucket would have been full without it), so this never gives back more
// than the lease still takes from the bucket: a return never over-credits,
// whatever was admitted in between.
func bucketCredit(at, now int64, p Params, n int64) int64 {
	full := n * p.P
	el := now - at
	if el <= 0 {
		return full
	}
	if el >= ceilDiv(full, p.R) {
		return 0
	}
	return full - el*p.R
}

// TokenBucketReturn puts back what n tokens taken at at are still worth at
// now (never above a full bucket): GCRAReturn, since the bucket is kept as
// a TAT.
func TokenBucketReturn(s Bucket, at, now int64, p Params, n int64) Bucket {
	return GCRAReturn(s, at, now, p, n)
}

// GCRAReturn moves the theoretical arrival time back by what n emission
// intervals taken at at are still worth at now; now bounds it below, since
// a TAT in the past means "full".
func GCRAReturn(s TAT, at, now int64, p Params, n int64) TAT {
	if n <= 0 || s == (TAT{}) {
		return s
	}
	// A state holds at most Debt scaled units (or a full bucket of another
	// limit): a larger n gives back no more, and n*P stays exact.
	c := bucketCredit(at, now, p, min(n, p.Debt/p.P+2))
	if c == 0 {
		return s
	}
	s = s.norm(p)
	// TAT - c/R, as At + Frac/R, without forming At*R.
	q, r := c/p.R, c%p.R
	t := TAT{At: s.At - q, Frac: s.Frac - r}
	if t.Frac < 0 {
		t.At--
		t.Frac += p.R
	}
	if t.At < now || (t.At == now && t.Frac == 0) {
		return TAT{}
	}
	if t == (TAT{}) {
		t = TAT{At: -1, Frac: p.R} // the epoch itself, not the zero value
	}
	return t
}

// SlidingLogReturnNewest gives back up to n of the newest units that still
// count at now: a refund whose admission time is unknown gives back what
// was admitted last. It reaches the units of the newest LogReturnDepth
// entries only.
func SlidingLogReturnNewest(l *Log, now int64, p Params, n int64) {
	if n <= 0 || l.n == 0 {
		return
	}
	cut := max(now, l.Newest()) - p.Period
	oldest := l.search(max(l.n-LogReturnDepth, 0), func(e *logEntry) bool { return e.at > cut })
	if oldest == l.n {
		return
	}
	k := min(n, l.last-l.entry(oldest).first+1)
	if k <= 0 {
		return
	}
	l.last -= k
	// The entries left without a unit go, but the newest, which keeps the
	// time: its first unit is the next one.
	i := l.search(oldest, func(e *logEntry) bool { return e.first > l.last })
	if i == l.n {
		return
	}
	*l.entry(i) = *l.entry(l.n - 1)
	l.n = i + 1
	l.entry(i).first = l.last + 1
}

// SlidingLogReturn gives back up to n units stamped exactly at, when they
// still count at now and are of the newest LogReturnDepth entries: the
// entries after them are renumbered, and an entry left without a unit goes
// (but the newest, which keeps the time).
func SlidingLogReturn(l *Log, at, now int64, p Params, n int64) {
	if n <= 0 || l.n == 0 || at <= max(now, l.Newest())-p.Period {
		return
	}
	i := l.search(max(l.n-LogReturnDepth, 0), func(e *logEntry) bool { return e.at >= at })
	if i == l.n || l.entry(i).at != at {
		return
	}
	k := min(n, l.units(i))
	if k == 0 {
		return
	}
	l.last -= k
	if i == l.n-1 {
		return
	}
	for j := i + 1; j < l.n; j++ {
		l.entry(j).first -= k
	}
	if l.entry(i).first == l.entry(i+1).first {
		l.remove(i)
	}
}
