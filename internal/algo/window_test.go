package algo

import "testing"

func TestWindowLeft(t *testing.T) {
	tests := []struct{ now, period, want int64 }{
		{0, 1000, 1000},
		{1, 1000, 999},
		{999, 1000, 1},
		{1000, 1000, 1000},
		{-1, 1000, 1}, // before the epoch, windows still floor
		{-1000, 1000, 1000},
	}
	for _, tt := range tests {
		if got := WindowLeft(tt.now, tt.period); got != tt.want {
			t.Errorf("WindowLeft(%d, %d) = %d, want %d", tt.now, tt.period, got, tt.want)
		}
	}
}

func TestRefillWithin(t *testing.T) {
	tests := []struct {
		rate, period, wait, want int64
		ok                       bool
	}{
		{10, 1_000_000, 0, 0, true},
		{10, 1_000_000, 1, 1, true},       // any part of a token rounds up
		{10, 1_000_000, 100_000, 1, true}, // exactly one emission interval
		{10, 1_000_000, 100_001, 2, true},
		{3, 1_000_000, 1_000_000, 3, true}, // gcd 1, exact
		{2, 1, 1 << 62, 0, false},          // overflow
		{0, 1, 1, 0, false},
	}
	for _, tt := range tests {
		got, ok := RefillWithin(tt.rate, tt.period, tt.wait)
		if got != tt.want || ok != tt.ok {
			t.Errorf("RefillWithin(%d, %d, %d) = %d, %v, want %d, %v", tt.rate, tt.period, tt.wait, got, ok, tt.want, tt.ok)
		}
	}
}
