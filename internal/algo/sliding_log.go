package algo

// Log is the state of a sliding log: the timestamps of admitted events,
// oldest first, in a ring that grows by doubling up to Rate entries and
// never beyond, so a key costs at most 8 bytes per event of its limit and a
// decision on an existing key allocates nothing. The zero value is an
// untouched key.
type Log struct {
	buf  []int64
	head int // index of the oldest entry
	n    int // entries held
}

// Len reports the entries held, expired ones included until the next step.
func (l *Log) Len() int { return l.n }

// At returns the i-th oldest entry (0-based).
func (l *Log) At(i int) int64 { return l.buf[(l.head+i)%len(l.buf)] }

// Newest returns the newest entry; l must not be empty.
func (l *Log) Newest() int64 { return l.At(l.n - 1) }

// Reset empties the log, keeping its buffer.
func (l *Log) Reset() { l.head, l.n = 0, 0 }

// expire drops the entries at or before cutoff: they are outside (now-P, now].
func (l *Log) expire(cutoff int64) {
	for l.n > 0 && l.buf[l.head] <= cutoff {
		l.head++
		if l.head == len(l.buf) {
			l.head = 0
		}
		l.n--
	}
	if l.n == 0 {
		l.head = 0
	}
}

// add appends n entries stamped at, growing the ring up to limit entries.
func (l *Log) add(at int64, n, limit int) {
	if need := l.n + n; need > len(l.buf) {
		size := max(len(l.buf)*2, 8, need)
		size = min(size, limit)
		buf := make([]int64, size)
		for i := 0; i < l.n; i++ {
			buf[i] = l.At(i)
		}
		l.buf, l.head = buf, 0
	}
	for range n {
		i := l.head + l.n
		if i >= len(l.buf) {
			i -= len(l.buf)
		}
		l.buf[i] = at
		l.n++
	}
}

// SlidingLogStep admits n when the entries in (now-P, now] plus n are at most
// Rate, and then, when commit is true, records n entries at now. When denied,
// RetryAfter is the moment the k-th oldest entry leaves the window, k being
// the number of entries that must leave. Expired entries are dropped even
// when denied or not committing; that changes no decision.
func SlidingLogStep(l *Log, now int64, p Params, n int64, commit bool) Result {
	if l.n > 0 {
		if nw := l.Newest(); now < nw {
			now = nw
		}
	}
	l.expire(now - p.Period)
	count := int64(l.n)
	if n > 0 && count+n > p.Rate {
		k := count + n - p.Rate
		return Result{
			Remaining:  max(p.Rate-count, 0),
			RetryAfter: l.At(int(k-1)) + p.Period - now,
			ResetAfter: l.Newest() + p.Period - now,
		}
	}
	if commit && n > 0 {
		l.add(now, int(n), int(p.Rate))
	}
	r := Result{Allowed: true, Remaining: max(p.Rate-count-n, 0)}
	if count+n > 0 {
		newest := now
		if n == 0 {
			newest = l.Newest()
		}
		r.ResetAfter = newest + p.Period - now
	}
	return r
}
