package algo

// The Charge functions are the steps of a limit that counts every hit
// (sluice.CountAll): the hits are recorded whatever the decision, also when
// it denies and when n is larger than the capacity, and the limit then
// denies until time has repaid the debt.
//
//   - Allowed is what the step without counting denials decides, but for a
//     cost of 0, which is denied while the key is in debt (its count above
//     the Rate, or a bucket's TAT beyond its Burst);
//   - n may exceed Params.Cap (up to sluice.MaxCharge): it is charged and
//     denied, since no wait could admit it;
//   - Remaining is what is left after the charge, at least 0;
//   - a denial's RetryAfter is the wait, after the charge, until the key
//     admits a cost of 1 (a cost of 0: until it is out of debt);
//   - a key's debt is bounded by Params.Debt (a window's count, a bucket's
//     scaled deficit): a charge beyond it is clamped, so that no sequence
//     of charges overflows a counter or loses precision in Lua's doubles.

// MaxCountDebt is the largest count a fixed window keeps.
const MaxCountDebt = 1 << 52

// MaxBucketDebt is the largest scaled deficit (R units per µs) a token
// bucket or GCRA keeps: its TAT lies at most MaxBucketDebt/R µs ahead.
const MaxBucketDebt = 1 << 52

// debtOf is the bound on a charged state of kind k with period (µs): a
// fixed window's count, a sliding window's counts (each, such that a
// count times the period stays below 2^53: at least Rate for a limit that
// passes CheckBounds), or a bucket's scaled deficit.
func debtOf(k Kind, period int64) int64 {
	switch k {
	case FixedWindow:
		return MaxCountDebt
	case SlidingWindow:
		return (MaxExact-1)/period - 1
	case TokenBucket, GCRA:
		return MaxBucketDebt
	}
	return 0
}

// FixedWindowCharge counts n in the window holding now, up to Params.Debt,
// whatever it decides.
func FixedWindowCharge(s Window, now int64, p Params, n int64) (Window, Result) {
	now, ws, count := s.at(now, p.Period)
	end := ws + p.Period - now
	c2 := min(count+n, p.Debt)
	r := Result{Allowed: count+n <= p.Rate, Remaining: max(p.Rate-c2, 0)}
	if c2 > 0 {
		r.ResetAfter = end
	}
	if !r.Allowed {
		r.RetryAfter = end
	}
	if n == 0 {
		return s, r
	}
	return Window{Start: ws, Count: c2}, r
}

// SlidingWindowCharge counts n in the current window, up to Params.Debt,
// whatever it decides.
func SlidingWindowCharge(s Counter, now int64, p Params, n int64) (Counter, Result) {
	P := p.Period
	now, ws, prev, cur := s.at(now, P)
	w := prev * (P - (now - ws)) / P
	cur2 := min(cur+n, p.Debt)
	r := Result{Allowed: w+cur+n <= p.Rate, Remaining: max(p.Rate-w-cur2, 0), ResetAfter: slidingReset(ws, now, prev, cur2, P)}
	if !r.Allowed {
		r.RetryAfter = slidingRetry(ws, now, prev, cur2, p, min(n, 1))
	}
	if n == 0 {
		return s, r
	}
	return Counter{Start: ws, Prev: prev, Cur: cur2}, r
}

// GCRACharge moves the TAT on by n emission intervals, up to Params.Debt
// scaled units ahead of now, whatever it decides. TokenBucketCharge is the
// same step.
func GCRACharge(s TAT, now int64, p Params, n int64) (TAT, Result) {
	d := chargeDeficit(s, now, p)
	full := p.Cap * p.P
	allowed := n <= p.Cap && d+n*p.P <= full // n*P overflows only beyond Cap
	d2 := p.Debt
	if n <= (p.Debt-d)/p.P {
		d2 = d + n*p.P
	}
	r := Result{Allowed: allowed, Remaining: max(full-d2, 0) / p.P, ResetAfter: ceilDiv(d2, p.R)}
	if !allowed {
		r.RetryAfter = ceilDiv(d2+min(n, 1)*p.P-full, p.R)
	}
	if n == 0 {
		return s, r
	}
	return tatAt(now, d2, p), r
}

// TokenBucketCharge is GCRACharge: the bucket is kept as a TAT.
func TokenBucketCharge(s Bucket, now int64, p Params, n int64) (Bucket, Result) {
	return GCRACharge(s, now, p, n)
}

// chargeDeficit is the scaled deficit R*(TAT-now) at now, at least 0 and at
// most Params.Debt (a TAT further ahead, written under another limit,
// counts as the bound).
func chargeDeficit(s TAT, now int64, p Params) int64 {
	s, ok := s.ahead(now, p)
	if !ok {
		return 0
	}
	if s.At-now > p.Debt/p.R {
		return p.Debt
	}
	return min((s.At-now)*p.R+s.Frac, p.Debt)
}
