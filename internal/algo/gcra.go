package algo

// TAT is the state of GCRA: the theoretical arrival time, At + Frac/R µs,
// with 0 <= Frac < Params.R so that an emission interval of Period/Rate is
// exact. The zero value is an untouched key, at any time; a TAT of exactly
// the epoch (reached only by a clock before 1970) is kept apart from it as
// {At: -1, Frac: R}.
type TAT struct {
	At   int64
	Frac int64
}

// GCRAStep admits n when TAT + n*T - now <= Cap*T, with T = Period/Rate,
// computed in scaled units (multiplied by R) so that T is an integer P.
// A denied request waits until that difference has fallen to Cap*T. It
// returns the state to keep: s itself unless n > 0 was admitted.
//
// GCRA keeps no time of last use: when now is earlier than TAT - Cap*T
// (a clock that ran backwards), the key is treated as exactly full, which
// never admits more than a clamp to the last admission would.
func GCRAStep(s TAT, now int64, p Params, n int64) (TAT, Result) {
	d2, r := bucketDecide(gcraDeficit(s, now, p), p, n)
	if !r.Allowed || n == 0 {
		return s, r
	}
	return tatAt(now, d2, p), r
}

// tatAt is the TAT a scaled deficit d > 0 at now stands for.
func tatAt(now, d int64, p Params) TAT {
	t := TAT{At: now + d/p.R, Frac: d % p.R}
	if t == (TAT{}) {
		t = TAT{At: -1, Frac: p.R} // the epoch itself, not the zero value
	}
	return t
}

// gcraDeficit is the scaled deficit R*(TAT-now) at now, between 0 and a
// full bucket's Cap*P, without forming (TAT-now)*R when TAT is far ahead.
func gcraDeficit(s TAT, now int64, p Params) int64 {
	// The zero TAT is an untouched key at any now, also before the epoch.
	if s == (TAT{}) || s.At < now || (s.At == now && s.Frac == 0) {
		return 0
	}
	full := p.Cap * p.P
	if s.At-now > full/p.R+1 {
		return full
	}
	return min((s.At-now)*p.R+s.Frac, full)
}
