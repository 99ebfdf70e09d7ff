package failover

import (
	"sync/atomic"
	"time"
)

// rtt measures the shared store's round trip from its answers: SRTT and
// RTTVAR as TCP keeps them (RFC 6298). Updates from concurrent calls may
// interleave; each keeps the values consistent enough for a deadline.
type rtt struct {
	srtt, rttvar, samples atomic.Int64 // ns; count
}

// observe records one answer's round trip.
func (r *rtt) observe(d time.Duration) {
	if r.samples.Add(1) == 1 {
		r.srtt.Store(int64(d))
		r.rttvar.Store(int64(d / 2))
		return
	}
	s := r.srtt.Load()
	diff := s - int64(d)
	if diff < 0 {
		diff = -diff
	}
	r.rttvar.Store((3*r.rttvar.Load() + diff) / 4)
	r.srtt.Store((7*s + int64(d)) / 8)
}

// get returns SRTT, RTTVAR and the number of answers measured.
func (r *rtt) get() (time.Duration, time.Duration, int64) {
	return time.Duration(r.srtt.Load()), time.Duration(r.rttvar.Load()), r.samples.Load()
}

// timeout is SRTT + max(4 RTTVAR, SRTT/2) within [floor, cap], or cap
// before the first answer.
func (r *rtt) timeout(floor, cap time.Duration) time.Duration {
	s, v, n := r.get()
	if n == 0 {
		return cap
	}
	return min(max(s+max(4*v, s/2), floor), cap)
}
