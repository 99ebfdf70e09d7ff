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

// SlidingLogReturnNewest removes up to n of the newest entries: a refund
// whose admission time is unknown gives back what was admitted last.
func SlidingLogReturnNewest(l *Log, n int64) {
	if n <= 0 {
		return
	}
	l.n -= int(min(n, int64(l.n)))
	if l.n == 0 {
		l.head = 0
	}
}

// SlidingLogReturn removes up to n entries stamped exactly at. Entries are
// kept in time order, so those stamped at are contiguous.
func SlidingLogReturn(l *Log, at int64, n int64) {
	if n <= 0 {
		return
	}
	// Find the newest entry stamped at, then remove a run ending there.
	end := -1
	for i := l.n - 1; i >= 0; i-- {
		v := l.At(i)
		if v == at {
			end = i
			break
		}
		if v < at {
			return
		}
	}
	if end < 0 {
		return
	}
	start := end
	for start > 0 && int64(end-start+1) < n && l.At(start-1) == at {
		start--
	}
	k := end - start + 1
	// Shift the entries after the run back by k.
	for i := end + 1; i < l.n; i++ {
		l.buf[(l.head+i-k)%len(l.buf)] = l.At(i)
	}
	l.n -= k
	if l.n == 0 {
		l.head = 0
	}
}
