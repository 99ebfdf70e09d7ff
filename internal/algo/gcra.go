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
// GCRA keeps no time of last use, so it needs no clamp: a TAT more than a
// full bucket ahead of now (a Burst lowered since it was written, or a
// clock that ran backwards) admits nothing, and RetryAfter and ResetAfter
// count exactly from the TAT, without forming (TAT-now)*R.
func GCRAStep(s TAT, now int64, p Params, n int64) (TAT, Result) {
	d, far := gcraDeficit(s, now, p)
	if far {
		t := s.norm(p)
		ahead := t.At - now
		r := Result{Allowed: n == 0, ResetAfter: ahead + ceilDiv(t.Frac, p.R)}
		if n > 0 {
			// ceil(((TAT-now)*R + Frac + n*P - Cap*P) / R)
			r.RetryAfter = ahead + ceilDivSigned(t.Frac+n*p.P-p.Cap*p.P, p.R)
		}
		return s, r
	}
	d2, r := bucketDecide(d, p, n)
	if !r.Allowed || n == 0 {
		return s, r
	}
	return tatAt(now, d2, p), r
}

// tatAt is the TAT a scaled deficit d > 0 at now stands for.
func tatAt(now, d int64, p Params) TAT {
	q := d / p.R
	t := TAT{At: now + q, Frac: d - q*p.R}
	if t == (TAT{}) {
		t = TAT{At: -1, Frac: p.R} // the epoch itself, not the zero value
	}
	return t
}

// gcraDeficit is the scaled deficit R*(TAT-now) at now, at least 0. It is
// exact up to Cap*P + 2R; beyond, far reports a TAT more than a full bucket
// ahead, whose deficit is not formed.
func gcraDeficit(s TAT, now int64, p Params) (d int64, far bool) {
	s, ok := s.ahead(now, p)
	if !ok {
		return 0, false
	}
	if s.At-now > p.Ahead {
		return 0, true
	}
	return (s.At-now)*p.R + s.Frac, false
}

// ahead reads s under p (norm) and reports whether it lies after now: not
// for the zero TAT, an untouched key at any now (also before the epoch),
// nor for a bucket that is full at now.
func (s TAT) ahead(now int64, p Params) (TAT, bool) {
	if s == (TAT{}) {
		return s, false
	}
	s = s.norm(p)
	if s.At < now || (s.At == now && s.Frac == 0) {
		return s, false
	}
	return s, true
}

// norm reads a TAT other than the zero value under p: the epoch's stand-in
// {-1, R} is the epoch, and a Frac of R or more, written under another
// Rate, is cut to R-1, which stays within the same µs (the true TAT lies in
// [At, At+1) whatever the Rate it was written with).
func (s TAT) norm(p Params) TAT {
	switch {
	case s.At == -1 && s.Frac == p.R:
		return TAT{}
	case s.Frac >= p.R:
		s.Frac = p.R - 1
	}
	return s
}

// ceilDivSigned returns ceil(a/b) for any a, b > 0.
func ceilDivSigned(a, b int64) int64 {
	if a >= 0 {
		return ceilDiv(a, b)
	}
	return -(-a / b)
}
