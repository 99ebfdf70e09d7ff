package algo

// Bucket is the state of a token bucket, kept as the deficit below a full
// bucket in scaled units (one token is Params.P units; the bucket refills
// Params.R units per µs) and the time of the last admission. The zero value
// is a full, untouched bucket.
type Bucket struct {
	Deficit int64
	Last    int64
}

// TokenBucketStep admits n when the bucket, refilled to now, holds at least
// n tokens; capacity is Params.Cap, refill Rate per Period. A denied request
// waits until the missing tokens have refilled. It returns the state to keep:
// s itself unless n > 0 was admitted.
func TokenBucketStep(s Bucket, now int64, p Params, n int64) (Bucket, Result) {
	d := s.Deficit
	if d > 0 {
		if now < s.Last {
			now = s.Last
		}
		// Refill, without forming (now-Last)*R when the bucket is full again.
		if el := now - s.Last; el >= ceilDiv(d, p.R) {
			d = 0
		} else {
			d -= el * p.R
		}
	}
	d2, r := bucketDecide(d, p, n)
	if !r.Allowed || n == 0 {
		return s, r
	}
	return Bucket{Deficit: d2, Last: now}, r
}

// bucketDecide is the decision shared by TokenBucket and GCRA, from the
// scaled deficit d at now (d >= 0; above Cap*P only when the limit was
// lowered since the state was written). A peek (n = 0) is always allowed.
func bucketDecide(d int64, p Params, n int64) (int64, Result) {
	full := p.Cap * p.P
	d2 := d + n*p.P
	if n > 0 && d2 > full {
		return d, Result{Remaining: max(full-d, 0) / p.P, RetryAfter: ceilDiv(d2-full, p.R), ResetAfter: ceilDiv(d, p.R)}
	}
	return d2, Result{Allowed: true, Remaining: max(full-d2, 0) / p.P, ResetAfter: ceilDiv(d2, p.R)}
}
