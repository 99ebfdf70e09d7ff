package algo

import "testing"

func TestSlidingWindowStep(t *testing.T) {
	const B = 3600 * sec
	tests := []struct {
		name      string
		rate, per int64
		steps     []step
	}{
		{
			name: "10 per 1s",
			rate: 10, per: sec,
			steps: []step{
				{at: B, n: 0, want: allowed(10, 0)},
				{at: B, n: 5, want: allowed(5, 2*sec)},
				{at: B + 500_000, n: 5, want: allowed(0, 1_500_000)},
				// Not in this window: in the next one floor(10*(P-e)/P)+1 <= 10
				// first holds at e = 1µs.
				{at: B + 600_000, n: 1, want: denied(0, 400_001, 1_400_000)},
				{at: B + sec, n: 1, want: denied(0, 1, sec)},
				// Window B+1s: prev 10 weighs floor(10*0.75) = 7.
				{at: B + 1_250_000, n: 0, want: allowed(3, 750_000)},
				// floor(10*(P-e)/P) <= 6 from e = 300_001.
				{at: B + 1_250_000, n: 4, want: denied(3, 50_001, 750_000)},
				{at: B + 1_300_000, n: 4, want: denied(3, 1, 700_000)},
				{at: B + 1_300_001, n: 4, want: allowed(0, 1_699_999)},
				// prev 10, cur 4: floor(10*(P-e)/P) <= 5 from e = 400_001.
				{at: B + 1_300_001, n: 1, want: denied(0, 100_000, 1_699_999)},
				// n = Cap: only in the next window, when floor(4*(P-e)/P) = 0.
				{at: B + 1_300_001, n: 10, want: denied(0, 1_450_000, 1_699_999)},
				{at: B + 2_750_000, n: 10, want: denied(9, 1, 250_000)}, // floor(4*0.25) = 1
				// Backwards: seen as B+1s (e = 0), where 10+4 count.
				{at: B + 900_000, n: 1, want: denied(0, 400_001, 2*sec)},
				{at: B + 900_000, n: 0, want: allowed(0, 2*sec)},
				// Two windows later nothing counts.
				{at: B + 3_100_000, n: 0, want: allowed(10, 0)},
				{at: B + 3_100_000, n: 10, want: allowed(0, 1_900_000)},
			},
		},
		{
			name: "the previous window alone, whose weight never fits",
			rate: 2, per: 1,
			steps: []step{
				{at: B, n: 2, want: allowed(0, 2)},
				// At B+1 prev 2 weighs 2 for the whole 1µs window.
				{at: B + 1, n: 1, want: denied(0, 1, 1)},
				{at: B + 2, n: 2, want: allowed(0, 2)},
			},
		},
		{
			name: "previous window from the state's current count",
			rate: 4, per: 100,
			steps: []step{
				{at: B + 10, n: 4, want: allowed(0, 190)},
				// Window B+100: prev 4, e = 30: floor(4*70/100) = 2.
				{at: B + 130, n: 0, want: allowed(2, 70)},
				{at: B + 130, n: 3, want: denied(2, 21, 70)}, // floor(4*(100-e)/100) <= 1 from e = 51
				{at: B + 150, n: 3, want: denied(2, 1, 50)},
				{at: B + 151, n: 3, want: allowed(0, 149)},
			},
		},
		{
			name: "before the epoch",
			rate: 2, per: 100,
			steps: []step{
				{at: -130, n: 2, want: allowed(0, 130)},  // window [-200, -100)
				{at: -70, n: 0, want: allowed(1, 70)},    // e = 30: floor(2*70/100) = 1
				{at: -70, n: 2, want: denied(1, 21, 70)}, // floor(2*(100-e)/100) = 0 from e = 51
				{at: -49, n: 2, want: allowed(0, 149)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, NewParams(SlidingWindow, tt.rate, 0, tt.per), tt.steps)
		})
	}
}
