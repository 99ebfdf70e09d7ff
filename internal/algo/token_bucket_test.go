package algo

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// bucketTests are step tables that TokenBucket and GCRA must both pass:
// with time moving forward they make the same decisions.
func bucketTests() []struct {
	name             string
	rate, burst, per int64
	steps            []step
} {
	const B = 3600 * sec
	return []struct {
		name             string
		rate, burst, per int64
		steps            []step
	}{
		{
			name: "10 per 1s",
			rate: 10, per: sec,
			steps: []step{
				{at: B, n: 0, want: allowed(10, 0)},
				{at: B, n: 1, want: allowed(9, 100_000)}, // 9, never 8
				{at: B, n: 9, want: allowed(0, sec)},
				{at: B + 50_000, n: 1, want: denied(0, 50_000, 950_000)},
				{at: B + 99_999, n: 1, want: denied(0, 1, 900_001)},
				{at: B + 100_000, n: 1, want: allowed(0, sec)},
				{at: B + 100_000, n: 0, want: allowed(0, sec)},
				{at: B + 399_999, n: 3, want: denied(2, 1, 700_001)},
				{at: B + 400_000, n: 3, want: allowed(0, sec)},
				{at: B + 5*sec, n: 0, want: allowed(10, 0)},
				{at: B + 5*sec, n: 10, want: allowed(0, sec)}, // n = Cap
				{at: B + 5*sec, n: 10, want: denied(0, sec, sec)},
			},
		},
		{
			name: "3 per 1s: T = 333333.33µs",
			rate: 3, per: sec,
			steps: []step{
				{at: B, n: 1, want: allowed(2, 333_334)},
				{at: B, n: 2, want: allowed(0, sec)},
				{at: B, n: 1, want: denied(0, 333_334, sec)},
				{at: B + 333_333, n: 1, want: denied(0, 1, 666_667)},
				{at: B + 333_334, n: 1, want: allowed(0, sec)}, // ceil(2999998/3)
				{at: B + 1_333_333, n: 0, want: allowed(2, 1)},
				{at: B + 1_333_334, n: 0, want: allowed(3, 0)},
				{at: B + 1_333_334, n: 3, want: allowed(0, sec)},
			},
		},
		{
			name: "3 per 1s: one Period refills exactly 3, not 2.999",
			rate: 3, per: sec,
			steps: []step{
				{at: B, n: 3, want: allowed(0, sec)},
				{at: B + sec - 1, n: 3, want: denied(2, 1, 1)},
				{at: B + sec, n: 3, want: allowed(0, sec)},
				{at: B + 2*sec - 1, n: 0, want: allowed(2, 1)},
				{at: B + 2*sec, n: 0, want: allowed(3, 0)},
				{at: B + 2*sec, n: 1, want: allowed(2, 333_334)},
				{at: B + 2*sec + 333_333, n: 3, want: denied(2, 1, 1)},
				{at: B + 2*sec + 333_334, n: 3, want: allowed(0, sec)},
			},
		},
		{
			name: "7 per 1s, burst 2",
			rate: 7, burst: 2, per: sec,
			steps: []step{
				{at: B, n: 0, want: allowed(2, 0)},
				{at: B, n: 2, want: allowed(0, 285_715)}, // ceil(2e6/7)
				{at: B, n: 1, want: denied(0, 142_858, 285_715)},
				{at: B + 142_857, n: 1, want: denied(0, 1, 142_858)},
				{at: B + 142_858, n: 1, want: allowed(0, 285_714)},
				{at: B + 142_858, n: 2, want: denied(0, 285_714, 285_714)},
				{at: B + 10*sec, n: 0, want: allowed(2, 0)},
				{at: B + 10*sec, n: 1, want: allowed(1, 142_858)},
			},
		},
		{
			name: "1 per 1h, burst 5",
			rate: 1, burst: 5, per: 3600 * sec,
			steps: []step{
				{at: B, n: 5, want: allowed(0, 5*3600*sec)},
				{at: B + 1, n: 1, want: denied(0, 3600*sec-1, 5*3600*sec-1)},
				{at: B + 3600*sec, n: 1, want: allowed(0, 5*3600*sec)},
				{at: B + 3*3600*sec, n: 3, want: denied(2, 3600*sec, 3*3600*sec)},
				{at: B + 3*3600*sec, n: 2, want: allowed(0, 5*3600*sec)},
			},
		},
		{
			name: "burst below rate: 1000 per 1s, burst 1",
			rate: 1000, burst: 1, per: sec,
			steps: []step{
				{at: B, n: 1, want: allowed(0, 1000)},
				{at: B + 999, n: 1, want: denied(0, 1, 1)},
				{at: B + 1000, n: 1, want: allowed(0, 1000)},
			},
		},
		{
			name: "more than one event per µs: 3 per 2µs",
			rate: 3, per: 2,
			steps: []step{
				{at: B, n: 3, want: allowed(0, 2)},
				{at: B + 1, n: 2, want: denied(1, 1, 1)}, // 1.5 refilled
				{at: B + 1, n: 1, want: allowed(0, 2)},   // ceil(2.5 tokens × 2/3µs)
			},
		},
	}
}

func TestTokenBucketStep(t *testing.T) {
	for _, tt := range bucketTests() {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, NewParams(TokenBucket, tt.rate, tt.burst, tt.per), tt.steps)
		})
	}
}

func TestTokenBucketState(t *testing.T) {
	p := NewParams(TokenBucket, 3, 0, sec) // R = 3, P = 1e6: one token is 333333.33µs
	tests := []struct {
		name string
		give Bucket
		at   int64
		n    int64
		want Bucket
	}{
		{"fresh: full again one token later", Bucket{}, 100, 1, Bucket{At: 100 + 333_333, Frac: 1}},
		{"refilled to full", Bucket{At: 50}, 100 + sec, 1, Bucket{At: 100 + sec + 333_333, Frac: 1}},
		// 2 tokens missing at 100 (full again at 100+666666.67), 300µs of
		// refill by 200, one more token: full again 999900µs after 200.
		{"partial refill", Bucket{At: 100 + 666_666, Frac: 2}, 200, 1, Bucket{At: 200 + 999_900}},
		// A clock behind the TAT refills nothing and moves nothing back:
		// one more token lands one token after the TAT.
		{"backwards: counts from the TAT", Bucket{At: 500 + 333_333, Frac: 1}, 100, 1, Bucket{At: 500 + 666_666, Frac: 2}},
		{"denied keeps the state", Bucket{At: 500 + sec}, 600, 1, Bucket{At: 500 + sec}},
		{"peek keeps the state", Bucket{At: 500 + 333_333, Frac: 1}, 600, 0, Bucket{At: 500 + 333_333, Frac: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := TokenBucketStep(tt.give, tt.at, p, tt.n)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("TokenBucketStep(%+v, %d, 3/s, %d) state (-want +got):\n%s", tt.give, tt.at, tt.n, diff)
			}
		})
	}
}

// TestTokenBucketBackwards: a clock running backwards finds the bucket no
// fuller than at the latest admission, and waits count from the clock's
// own time: the bucket admits again at the same instant whatever the clock
// read in between.
func TestTokenBucketBackwards(t *testing.T) {
	const B = 3600 * sec
	runSteps(t, NewParams(TokenBucket, 10, 0, sec), []step{
		{at: B, n: 10, want: allowed(0, sec)},
		{at: B + 400_000, n: 4, want: allowed(0, sec)},               // full again at B+1.4s
		{at: B + 300_000, n: 1, want: denied(0, 200_000, 1_100_000)}, // one token at B+0.5s
		{at: B - 10*sec, n: 1, want: denied(0, 10*sec+500_000, 11*sec+400_000)},
		{at: B + 500_000, n: 1, want: allowed(0, sec)},
	})
}

// TestTokenBucketRateChange: the bucket is kept as the time it is full
// again, so a Rate change keeps that time and counts the missing tokens at
// the new Rate (a deficit kept in the old Rate's scale was read 10 times too
// large, or too small, by the new one).
func TestTokenBucketRateChange(t *testing.T) {
	const B = 3600 * sec
	ten, seven := NewParams(TokenBucket, 10, 0, sec), NewParams(TokenBucket, 7, 0, sec)
	s, _ := TokenBucketStep(Bucket{}, B, seven, 5) // 5 of 7 missing: full again at B+5/7s
	// (The TAT's fraction of a µs, in sevenths, is cut at 10/s, within the
	// same µs.)
	if _, r := TokenBucketStep(s, B, ten, 0); r.Remaining != 2 || r.ResetAfter != 714_285 {
		t.Errorf("7/s with 5 missing, read at 10/s: %+v, want Remaining 2 (10 - ceil(5/7s × 10/s)) and ResetAfter 714285", r)
	}
	s, _ = TokenBucketStep(Bucket{}, B, ten, 5) // 5 of 10 missing: full again at B+0.5s
	if _, r := TokenBucketStep(s, B, seven, 0); r.Remaining != 3 || r.ResetAfter != 500_000 {
		t.Errorf("10/s with 5 missing, read at 7/s: %+v, want Remaining 3 (7 - 3.5 rounded up) and ResetAfter 500000", r)
	}
}
