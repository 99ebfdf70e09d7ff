package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

// TestBucketReturnNeverOverCredits drives the lease scenario that
// over-admitted when a return gave back whole units, on Redis with an
// injected time: 1/s, burst 10; a lease of 6 at 0; another caller takes 4 at
// 3 s; the 6 come back at 3 s. Without the lease the bucket would hold 6,
// so the peek after the return must say 6, exactly as internal/algo does.
func TestBucketReturnNeverOverCredits(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
		now := time.Unix(1_700_000_000, 0)
		s := NewRueidis(newRueidis(t, srv.Addr), WithTestClock(func() time.Time { return now }))
		lim := sluice.Limit{Algorithm: a, Rate: 1, Period: time.Second, Burst: 10}
		key := "overcredit/" + a.String()
		_, at, err := s.Reserve(ctx, key, lim, 6)
		if err != nil {
			t.Fatalf("%v: Lease: %v", a, err)
		}
		now = now.Add(3 * time.Second)
		if d, err := s.AllowN(ctx, key, lim, 4); err != nil || !d.Allowed {
			t.Fatalf("%v: AllowN(4) at 3s = %+v, %v", a, d, err)
		}
		if err := s.Return(ctx, key, lim, 6, at); err != nil {
			t.Fatalf("%v: Return: %v", a, err)
		}
		d, err := s.AllowN(ctx, key, lim, 0)
		if err != nil || d.Remaining != 6 {
			t.Errorf("%v: peek after the return = %+v, %v; want Remaining 6", a, d, err)
		}
		s.Close()
	}
}
