package algo

// Bucket is the state of a token bucket: the time at which it is full
// again, kept as GCRA's theoretical arrival time (At + Frac/R µs). A bucket
// whose scaled deficit is d at time t is full again at t + d/R, so the two
// hold the same information while the limit stays; but the scale (one
// token is Params.P units, the refill Params.R per µs) follows Rate, and a
// deficit written under one Rate and read under another was off by the
// ratio of the scales (10/s to 7/s gave back 4.5 of 5 missing tokens; 7/s
// to 10/s turned 5 into 50). A time stays a time: after a Rate change the
// bucket is full again when it would have been, and its missing tokens
// count at the new Rate. The zero value is a full, untouched bucket.
type Bucket = TAT

// TokenBucketStep admits n when the bucket, refilled to now, holds at least
// n tokens; capacity is Params.Cap, refill Rate per Period. A denied request
// waits until the missing tokens have refilled. It returns the state to keep:
// s itself unless n > 0 was admitted.
//
// A token bucket of capacity Cap is GCRA with a burst of Cap: the deficit
// below a full bucket is (TAT - now) in scaled units, so the step is
// GCRAStep's. A clock that runs backwards finds the bucket fuller later,
// never sooner: the TAT is not moved back, and waits count from it.
func TokenBucketStep(s Bucket, now int64, p Params, n int64) (Bucket, Result) {
	return GCRAStep(s, now, p, n)
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
