package algo

import (
	"math/big"
	"slices"
)

// The reference models below restate DESIGN.md's semantics in the plainest
// way, with no state compaction and exact (math/big) arithmetic, so that
// the step functions can be checked against them. Time moves forward only.

// refResult is a reference decision. Its RetryAfter is found by search
// (see refRetry), not by formula.
type refResult struct {
	ok               bool
	remaining, reset int64
}

type ref interface {
	// decide reports what a request for n at now would get; it changes
	// nothing.
	decide(now, n int64) refResult
	// commit records n admitted at now.
	commit(now, n int64)
}

func newRef(p Params) ref {
	switch p.Kind {
	case FixedWindow:
		return &fixedRef{rate: p.Rate, per: p.Period, counts: map[int64]int64{}}
	case SlidingLog:
		return &logRef{rate: p.Rate, per: p.Period}
	case SlidingWindow:
		return &slidingRef{rate: p.Rate, per: p.Period, counts: map[int64]int64{}}
	case TokenBucket:
		return &bucketRef{rate: p.Rate, per: p.Period, cap: p.Cap}
	case GCRA:
		return &tatRef{cap: p.Cap, t: big.NewRat(p.Period, p.Rate)}
	}
	panic("unknown kind")
}

// refRetry is the smallest wait in [1, hi] after which r admits n at now,
// or -1: µs by µs when scan is set and hi is small, else by bisection
// (every model admits more, never less, as time passes without traffic).
func refRetry(r ref, now, n, hi int64, scan bool) int64 {
	if scan && hi <= 20_000 {
		for dt := int64(1); dt <= hi; dt++ {
			if r.decide(now+dt, n).ok {
				return dt
			}
		}
		return -1
	}
	if !r.decide(now+hi, n).ok {
		return -1
	}
	lo := int64(1)
	for lo < hi {
		mid := lo + (hi-lo)/2
		if r.decide(now+mid, n).ok {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// floorDiv is floor(a/b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// fixedRef counts admissions per epoch-aligned window.
type fixedRef struct {
	rate, per int64
	counts    map[int64]int64
}

func (r *fixedRef) decide(now, n int64) refResult {
	w := floorDiv(now, r.per) * r.per
	c := r.counts[w]
	ok := n == 0 || c+n <= r.rate
	after := c
	if ok {
		after += n
	}
	res := refResult{ok: ok, remaining: max(r.rate-after, 0)}
	if after > 0 {
		res.reset = w + r.per - now
	}
	return res
}

func (r *fixedRef) commit(now, n int64) { r.counts[floorDiv(now, r.per)*r.per] += n }

// logRef keeps every admission's stamp forever, one per unit.
type logRef struct {
	rate, per int64
	stamps    []int64
}

func (r *logRef) decide(now, n int64) refResult {
	live, newest := int64(0), int64(0)
	for _, s := range r.stamps {
		if s > now-r.per && s <= now {
			live++
			newest = s
		}
	}
	ok := n == 0 || live+n <= r.rate
	after := live
	if ok && n > 0 {
		after += n
		newest = now
	}
	res := refResult{ok: ok, remaining: max(r.rate-after, 0)}
	if after > 0 {
		res.reset = newest + r.per - now
	}
	return res
}

func (r *logRef) commit(now, n int64) {
	// Time only moves forward: stamps outside (now-per, now] never count again.
	r.stamps = slices.DeleteFunc(r.stamps, func(s int64) bool { return s <= now-r.per })
	for range n {
		r.stamps = append(r.stamps, now)
	}
}

// slidingRef counts admissions per window and weighs the previous one.
type slidingRef struct {
	rate, per int64
	counts    map[int64]int64
}

func (r *slidingRef) decide(now, n int64) refResult {
	w := floorDiv(now, r.per) * r.per
	e := now - w
	prev, cur := r.counts[w-r.per], r.counts[w]
	// floor(prev*(P-e)/P), in big.Int so that it cannot overflow.
	x := new(big.Int).Mul(big.NewInt(prev), big.NewInt(r.per-e))
	x.Quo(x, big.NewInt(r.per))
	weighted := x.Int64() + cur
	ok := n == 0 || weighted+n <= r.rate
	curAfter, used := cur, weighted
	if ok {
		curAfter += n
		used += n
	}
	res := refResult{ok: ok, remaining: max(r.rate-used, 0)}
	switch {
	case curAfter > 0:
		res.reset = w + 2*r.per - now
	case prev > 0:
		res.reset = w + r.per - now
	}
	return res
}

func (r *slidingRef) commit(now, n int64) { r.counts[floorDiv(now, r.per)*r.per] += n }

// bucketRef holds a rational number of tokens.
type bucketRef struct {
	rate, per, cap int64
	tokens         *big.Rat // nil: untouched, full
	last           int64
}

func (r *bucketRef) level(now int64) *big.Rat {
	c := new(big.Rat).SetInt64(r.cap)
	if r.tokens == nil {
		return c
	}
	t := new(big.Rat).SetFrac64(now-r.last, 1)
	t.Mul(t, big.NewRat(r.rate, r.per))
	t.Add(t, r.tokens)
	if t.Cmp(c) > 0 {
		return c
	}
	return t
}

func (r *bucketRef) decide(now, n int64) refResult {
	t := r.level(now)
	ok := n == 0 || t.Cmp(new(big.Rat).SetInt64(n)) >= 0
	if ok {
		t.Sub(t, new(big.Rat).SetInt64(n))
	}
	// Time to refill to cap: (cap - t) * per / rate, rounded up.
	missing := new(big.Rat).Sub(new(big.Rat).SetInt64(r.cap), t)
	missing.Mul(missing, big.NewRat(r.per, r.rate))
	return refResult{ok: ok, remaining: floorRat(t), reset: ceilRat(missing)}
}

func (r *bucketRef) commit(now, n int64) {
	t := r.level(now)
	r.tokens = t.Sub(t, new(big.Rat).SetInt64(n))
	r.last = now
}

// tatRef is GCRA with a rational theoretical arrival time.
type tatRef struct {
	cap int64
	t   *big.Rat // emission interval Period/Rate
	tat *big.Rat // nil: untouched
}

func (r *tatRef) base(now int64) *big.Rat {
	b := new(big.Rat).SetInt64(now)
	if r.tat != nil && r.tat.Cmp(b) > 0 {
		b.Set(r.tat)
	}
	return b
}

func (r *tatRef) decide(now, n int64) refResult {
	nowR := new(big.Rat).SetInt64(now)
	after := r.base(now)
	next := new(big.Rat).Mul(new(big.Rat).SetInt64(n), r.t)
	next.Add(next, after)
	limit := new(big.Rat).Mul(new(big.Rat).SetInt64(r.cap), r.t)
	limit.Add(limit, nowR)
	ok := n == 0 || next.Cmp(limit) <= 0
	if ok {
		after = next
	}
	// remaining = floor((now + cap*T - after) / T)
	room := new(big.Rat).Sub(limit, after)
	room.Quo(room, r.t)
	return refResult{ok: ok, remaining: floorRat(room), reset: ceilRat(new(big.Rat).Sub(after, nowR))}
}

func (r *tatRef) commit(now, n int64) {
	b := r.base(now)
	r.tat = b.Add(b, new(big.Rat).Mul(new(big.Rat).SetInt64(n), r.t))
}

func floorRat(x *big.Rat) int64 {
	// Euclidean division: the floor, since Denom > 0.
	q, _ := new(big.Int).DivMod(x.Num(), x.Denom(), new(big.Int))
	return q.Int64()
}

func ceilRat(x *big.Rat) int64 {
	neg := new(big.Rat).Neg(x)
	return -floorRat(neg)
}

// admission is one admitted request, for the invariant checks.
type admission struct{ at, n int64 }

// maxInWindow is the most units admitted in any interval (t-per, t].
func maxInWindow(adm []admission, per int64) int64 {
	best := int64(0)
	for j := range adm {
		sum := int64(0)
		for i := j; i >= 0 && adm[i].at > adm[j].at-per; i-- {
			sum += adm[i].n
		}
		best = max(best, sum)
	}
	return best
}

// bucketExcess returns an interval [a, b] whose admissions exceed
// cap + rate*(b-a)/per, if any: the token bucket's invariant.
func bucketExcess(adm []admission, rate, per, cap int64) (int, int, bool) {
	for i := range adm {
		sum := new(big.Int)
		for j := i; j < len(adm); j++ {
			sum.Add(sum, big.NewInt(adm[j].n))
			// sum*per <= cap*per + rate*(b-a)
			lhs := new(big.Int).Mul(sum, big.NewInt(per))
			rhs := new(big.Int).Mul(big.NewInt(rate), big.NewInt(adm[j].at-adm[i].at))
			rhs.Add(rhs, new(big.Int).Mul(big.NewInt(cap), big.NewInt(per)))
			if lhs.Cmp(rhs) > 0 {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}
