package sluice

import "fmt"

// MaxMultiRequests is the most requests one AllowMulti call may decide. A
// call is one atomic step (on Redis, one script, which blocks the server
// while it runs), so its work must stay small whatever the caller asks:
// at this bound and with the sliding-log bound below, the largest call runs
// in about half a millisecond of Redis time (docs/bounds.md).
const MaxMultiRequests = 16

// ValidateMulti checks the size of an AllowMulti call as every MultiStore
// must before deciding: at most MaxMultiRequests requests, whose SlidingLog
// requests ask for at most MaxSlidingLogRate units in all (each unit is an
// entry written). An oversized call is an error wrapping ErrExceedsCapacity:
// it could never be decided at once. It does not validate each request
// (ValidateRequest does).
func ValidateMulti(reqs []Request) error {
	if len(reqs) > MaxMultiRequests {
		return fmt.Errorf("%w: AllowMulti of %d requests, more than %d at once", ErrExceedsCapacity, len(reqs), MaxMultiRequests)
	}
	units := 0
	for _, rq := range reqs {
		if rq.Limit.Algorithm == SlidingLog && rq.N > 0 {
			units += min(rq.N, MaxSlidingLogRate+1) // no overflow, whatever N
		}
	}
	if units > MaxSlidingLogRate {
		return fmt.Errorf("%w: AllowMulti asks %d sliding-log units in all, more than %d at once", ErrExceedsCapacity, units, MaxSlidingLogRate)
	}
	return nil
}
