package region

import (
	"sync"
	"sync/atomic"
	"time"
)

// link is what a Store knows of its way to the home store: the round trip
// it measured (SRTT and RTTVAR, as TCP keeps them: RFC 6298), whether the
// last call failed (down), and an anchor that maps local time onto the
// home store's clock.
type link struct {
	minTimeout, maxTimeout time.Duration

	mu      sync.Mutex
	samples int
	srtt    time.Duration
	rttvar  time.Duration
	// The anchor: a grant made at store time at (µs) by a call sent at
	// local time sent and answered at recv. The store's clock at local time
	// t (after recv) is within [at + t - recv, at + t - sent], whatever
	// the skew between the clocks.
	anchored   bool
	at         int64
	sent, recv time.Duration
	isDown     atomic.Bool
	downs, ups atomic.Int64
}

// observe records a call answered: its round trip and, when at is not
// zero, a fresh anchor. It reports whether the link was down.
func (l *link) observe(sent, recv time.Duration, at int64) bool {
	r := max(recv-sent, 0)
	l.mu.Lock()
	if l.samples == 0 {
		l.srtt, l.rttvar = r, r/2
	} else {
		d := l.srtt - r
		if d < 0 {
			d = -d
		}
		l.rttvar = (3*l.rttvar + d) / 4
		l.srtt = (7*l.srtt + r) / 8
	}
	l.samples++
	if at != 0 && (!l.anchored || recv-sent <= 2*(l.recv-l.sent) || recv-l.recv > time.Second) {
		// A tighter anchor, or a fresh one (drift): keep it.
		l.anchored, l.at, l.sent, l.recv = true, at, sent, recv
	}
	l.mu.Unlock()
	was := l.isDown.Swap(false)
	if was {
		l.ups.Add(1)
	}
	return was
}

// fail records a failed call; it reports whether the link went down.
func (l *link) fail() bool {
	if l.isDown.Swap(true) {
		return false
	}
	l.downs.Add(1)
	return true
}

func (l *link) down() bool { return l.isDown.Load() }

// timeout is the deadline of a call: SRTT + 4 RTTVAR within [min, max],
// or max before the first answer.
func (l *link) timeout() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.samples == 0 {
		return l.maxTimeout
	}
	return min(max(l.srtt+4*l.rttvar, l.minTimeout), l.maxTimeout)
}

// rtt returns SRTT and RTTVAR (0 before the first answer).
func (l *link) rtt() (time.Duration, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.srtt, l.rttvar
}

// storeTime returns the interval [lo, hi] (µs) holding the home store's
// clock at local time t, and false before the first anchor.
func (l *link) storeTime(t time.Duration) (lo, hi int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.anchored {
		return 0, 0, false
	}
	return l.at + (t - l.recv).Microseconds(), l.at + (t - l.sent).Microseconds(), true
}
