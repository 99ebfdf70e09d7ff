package region

import (
	"math"
	"time"
)

// meter measures a rate: units added, decaying exponentially with time
// constant tau, so that after a steady rate r for a few tau, v ≈ r·tau.
// Until then the sum is corrected for the time it has counted over, so
// that a new meter is not read as a slow one.
type meter struct {
	v      float64
	last   time.Duration
	since  time.Duration
	primed bool
}

func (m *meter) decay(now, tau time.Duration) {
	if !m.primed {
		m.primed, m.since, m.last = true, now, now
	}
	if now > m.last {
		m.v *= math.Exp(-float64(now-m.last) / float64(tau))
		m.last = now
	}
}

// add counts n units at now.
func (m *meter) add(now, tau time.Duration, n int) {
	m.decay(now, tau)
	m.v += float64(n)
}

// rate is the units per second at now. Over an age a below a few tau, the
// sum holds about r·tau·(1 − e^(−a/tau)): divided by that, not by tau. The
// age counts at least 10 ms, so that the first units are not read as a
// burst.
func (m *meter) rate(now, tau time.Duration) float64 {
	m.decay(now, tau)
	age := max(now-m.since, 10*time.Millisecond)
	return m.v / (tau.Seconds() * -math.Expm1(-float64(age)/float64(tau)))
}
