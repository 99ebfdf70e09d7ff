package algo

import "testing"

func TestFixedWindowStep(t *testing.T) {
	const B = 3600 * sec // an instant aligned to every period below but 7s
	tests := []struct {
		name      string
		rate, per int64
		steps     []step
	}{
		{
			name: "3 per 1s",
			rate: 3, per: sec,
			steps: []step{
				{at: B + 5_250_000, n: 0, want: allowed(3, 0)}, // peek on a fresh key
				{at: B + 5_250_000, n: 1, want: allowed(2, 750_000)},
				{at: B + 5_500_000, n: 2, want: allowed(0, 500_000)},
				{at: B + 5_750_000, n: 1, want: denied(0, 250_000, 250_000)},
				{at: B + 5_750_000, n: 0, want: allowed(0, 250_000)},
				{at: B + 5_999_999, n: 1, want: denied(0, 1, 1)},
				{at: B + 6_000_000, n: 1, want: allowed(2, sec)}, // the next window
				{at: B + 6_000_000, n: 3, want: denied(2, sec, sec)},
				{at: B + 6_000_000, n: 2, want: allowed(0, sec)},
				{at: B + 8_100_000, n: 0, want: allowed(3, 0)},       // windows skipped
				{at: B + 8_100_000, n: 3, want: allowed(0, 900_000)}, // n = Cap
				{at: B + 8_200_000, n: 1, want: denied(0, 800_000, 800_000)},
			},
		},
		{
			name: "epoch-aligned 7s windows",
			rate: 1, per: 7 * sec,
			steps: []step{
				{at: 10 * sec, n: 1, want: allowed(0, 4*sec)}, // window [7s, 14s)
				{at: 14*sec - 1, n: 1, want: denied(0, 1, 1)},
				{at: 14 * sec, n: 1, want: allowed(0, 7*sec)},
				{at: 20*sec + 999_999, n: 1, want: denied(0, 1, 1)},
				{at: 21 * sec, n: 1, want: allowed(0, 7*sec)},
			},
		},
		{
			name: "time going backwards is clamped to the window",
			rate: 2, per: sec,
			steps: []step{
				{at: B + 8_000_000, n: 2, want: allowed(0, sec)},
				{at: B + 7_900_000, n: 1, want: denied(0, sec, sec)}, // seen as B+8s
				{at: B + 7_900_000, n: 0, want: allowed(0, sec)},
				{at: B + 8_500_000, n: 1, want: denied(0, 500_000, 500_000)},
				{at: B + 9_000_000, n: 1, want: allowed(1, sec)},
			},
		},
		{
			name: "denied large request leaves room for a small one",
			rate: 10, per: 60 * sec,
			steps: []step{
				{at: B, n: 8, want: allowed(2, 60*sec)},
				{at: B + 1, n: 3, want: denied(2, 60*sec-1, 60*sec-1)},
				{at: B + 2, n: 2, want: allowed(0, 60*sec-2)},
				{at: B + 3, n: 0, want: allowed(0, 60*sec-3)},
			},
		},
		{
			name: "1µs windows",
			rate: 1, per: 1,
			steps: []step{
				{at: B, n: 1, want: allowed(0, 1)},
				{at: B, n: 1, want: denied(0, 1, 1)},
				{at: B + 1, n: 1, want: allowed(0, 1)},
			},
		},
		{
			name: "before the epoch the window is still floor(now/P)*P",
			rate: 1, per: 7 * sec,
			steps: []step{
				{at: -3 * sec, n: 1, want: allowed(0, 3*sec)}, // window [-7s, 0)
				{at: -1, n: 1, want: denied(0, 1, 1)},
				{at: 0, n: 1, want: allowed(0, 7*sec)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, NewParams(FixedWindow, tt.rate, 0, tt.per), tt.steps)
		})
	}
}
