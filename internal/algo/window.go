package algo

// WindowLeft returns the time (µs) from now to the end of the
// epoch-aligned window of length period holding now: period − (now mod
// period), in (0, period]. The fixed and sliding windows start their
// windows at multiples of period since the Unix epoch.
func WindowLeft(now, period int64) int64 {
	return period - (now - floorWindow(now, period))
}

// RefillWithin returns how many whole tokens a bucket of rate per period
// (µs) refills within wait µs, rounded up: ceil(wait × rate / period). It
// reports false when the product would overflow (a wait far beyond any
// limit's), so the caller can fall back to what it knew before.
func RefillWithin(rate, period, wait int64) (int64, bool) {
	if rate <= 0 || period <= 0 || wait < 0 {
		return 0, false
	}
	g := gcd(rate, period)
	r, p := rate/g, period/g
	if wait > (1<<62)/r {
		return 0, false
	}
	return ceilDiv(wait*r, p), true
}
