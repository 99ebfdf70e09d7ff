package algo

// Log is the state of a sliding log: the times of the admitted units,
// oldest first. Units are numbered in the order they were admitted (1, 2,
// ...; a return renumbers the ones after it), and the units of one time
// share one entry, which holds the time and the number of its first unit:
// an entry holds the units from its first up to the next entry's first
// (the newest, up to Last). So a decision of any cost writes at most one
// entry, the units in the window are a difference of two numbers, and the
// k-th oldest is found by bisection: the work of a decision does not grow
// with its cost, and only by a logarithm with the log's length.
//
// The entries lie in a ring that grows by doubling up to Rate + 1 entries
// and never beyond, so that a key costs 16 bytes per distinct time of
// admission in its last Period, and a decision on an existing key
// allocates nothing. The zero value is an untouched key.
//
// Every entry holds at least one unit but the newest, which a return may
// empty: it stays, so that the newest time the log has seen, the time a
// clock that runs backwards is clamped to, never moves back. The entries
// that can never count again (at or before that time less the Period) are
// dropped as the log is read; that changes no decision, so that a store
// may keep them longer (redisstore trims a bounded number of them per
// admission).
type Log struct {
	buf  []logEntry
	head int   // index of the oldest entry
	n    int   // entries held
	last int64 // the number of the newest unit; 0 before any
}

// logEntry is the units of one time: at (µs) and the number of the first.
type logEntry struct{ at, first int64 }

// LogReturnDepth bounds the work of a return on a sliding log: it gives
// back units of the log's newest LogReturnDepth entries (times of
// admission) only, since every entry after the units given back is
// renumbered (in Redis, a ZSET member rewritten). Units admitted before
// those count until they expire: a return never gives back more than the
// units it names, and may give back less.
const LogReturnDepth = 64

// Len reports the entries held, expired ones included until the next step.
func (l *Log) Len() int { return l.n }

// Units reports the units held, expired ones included until the next step.
func (l *Log) Units() int64 {
	if l.n == 0 {
		return 0
	}
	return l.last - l.entry(0).first + 1
}

// entry returns the i-th oldest entry (0-based).
func (l *Log) entry(i int) *logEntry {
	i += l.head
	if i >= len(l.buf) {
		i -= len(l.buf)
	}
	return &l.buf[i]
}

// units returns the number of units of entry i.
func (l *Log) units(i int) int64 {
	if i == l.n-1 {
		return l.last - l.entry(i).first + 1
	}
	return l.entry(i+1).first - l.entry(i).first
}

// Newest returns the newest entry's time; l must not be empty.
func (l *Log) Newest() int64 { return l.entry(l.n - 1).at }

// Reset empties the log, keeping its buffer.
func (l *Log) Reset() { l.head, l.n, l.last = 0, 0, 0 }

// search returns the index of the first entry in [lo, l.n) for which f
// holds, l.n when none does; f must hold for a suffix.
func (l *Log) search(lo int, f func(e *logEntry) bool) int {
	hi := l.n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if f(l.entry(mid)) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// after returns the index of the oldest entry after cutoff, l.n when none
// is. A log trimmed at every decision has few expired entries, usually
// none: its oldest few are read before the log is bisected, so that a
// decision on a cold log of many entries reads one cache line, not one per
// probe.
func (l *Log) after(cutoff int64) int {
	const scan = 4
	for i := 0; i < l.n && i < scan; i++ {
		if l.entry(i).at > cutoff {
			return i
		}
	}
	return l.search(min(scan, l.n), func(e *logEntry) bool { return e.at > cutoff })
}

// expire drops the entries at or before the newest entry's time less the
// Period P: they are outside (now-P, now] at any now, since now is never
// before the newest entry. (An entry after that, outside the window of
// this now, counts again when the clock runs back.)
func (l *Log) expire(P int64) {
	i := l.after(l.Newest() - P)
	if i == 0 {
		return
	}
	l.head = (l.head + i) % len(l.buf)
	l.n -= i
}

// live returns the units of the entries after cutoff, and the number of
// the oldest of them (0 when there is none).
func (l *Log) live(cutoff int64) (count, first int64) {
	i := l.after(cutoff)
	if i == l.n {
		return 0, 0
	}
	first = l.entry(i).first
	return l.last - first + 1, first
}

// unitAt returns the time of the unit numbered u, which the log holds.
func (l *Log) unitAt(u int64) int64 {
	return l.entry(l.search(0, func(e *logEntry) bool { return e.first > u }) - 1).at
}

// newestUnit returns the time of the newest unit: the newest entry's, or
// the one before when a return emptied the newest. The log holds a unit.
func (l *Log) newestUnit() int64 {
	if l.units(l.n-1) > 0 {
		return l.Newest()
	}
	return l.entry(l.n - 2).at
}

// add appends n units stamped at, at or after the newest entry's time: to
// the newest entry when it is of that time or empty, else to a new entry,
// growing the ring up to limit entries.
func (l *Log) add(at, n int64, limit int) {
	switch {
	case l.n > 0 && l.Newest() == at:
	case l.n > 0 && l.units(l.n-1) == 0:
		l.entry(l.n - 1).at = at
	default:
		if l.n == len(l.buf) {
			size := min(max(len(l.buf)*2, 8), limit)
			buf := make([]logEntry, max(size, l.n+1))
			for i := range l.n {
				buf[i] = *l.entry(i)
			}
			l.buf, l.head = buf, 0
		}
		l.n++
		*l.entry(l.n - 1) = logEntry{at: at, first: l.last + 1}
	}
	l.last += n
}

// remove removes entry i, which is not the newest.
func (l *Log) remove(i int) {
	for j := i; j < l.n-1; j++ {
		*l.entry(j) = *l.entry(j + 1)
	}
	l.n--
}

// SlidingLogStep admits n when the units in (now-P, now] plus n are at most
// Rate, and then, when commit is true, records n units at now. When denied,
// RetryAfter is the moment the k-th oldest unit leaves the window, k being
// the number of units that must leave. Entries that can never count again
// are dropped even when denied or not committing; that changes no
// decision.
func SlidingLogStep(l *Log, now int64, p Params, n int64, commit bool) Result {
	if l.n > 0 {
		now = max(now, l.Newest())
		l.expire(p.Period)
	}
	count, first := l.live(now - p.Period)
	if n > 0 && count+n > p.Rate {
		k := count + n - p.Rate
		return Result{
			Remaining:  max(p.Rate-count, 0),
			RetryAfter: l.unitAt(first+k-1) + p.Period - now,
			ResetAfter: l.newestUnit() + p.Period - now,
		}
	}
	if commit && n > 0 {
		l.add(now, n, int(min(p.Rate+1, 1<<30)))
	}
	r := Result{Allowed: true, Remaining: max(p.Rate-count-n, 0)}
	switch {
	case n > 0:
		r.ResetAfter = p.Period
	case count > 0:
		r.ResetAfter = l.newestUnit() + p.Period - now
	}
	return r
}
