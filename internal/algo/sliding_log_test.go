package algo

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSlidingLogStep(t *testing.T) {
	const B = 3600 * sec
	tests := []struct {
		name      string
		rate, per int64
		steps     []step
	}{
		{
			name: "3 per 1s",
			rate: 3, per: sec,
			steps: []step{
				{at: B, n: 0, want: allowed(3, 0)},
				{at: B, n: 1, want: allowed(2, sec)},
				{at: B + 100_000, n: 1, want: allowed(1, sec)},
				{at: B + 200_000, n: 0, want: allowed(1, 900_000)},
				// 2 + 2 > 3: the oldest entry (B) must leave, at B+1s.
				{at: B + 300_000, n: 2, want: denied(1, 700_000, 800_000)},
				{at: B + 300_000, n: 1, want: allowed(0, sec)},
				// n = Cap: all three must leave; the third leaves at B+1.3s.
				{at: B + 400_000, n: 3, want: denied(0, 900_000, 900_000)},
				{at: B + 999_999, n: 1, want: denied(0, 1, 300_001)},
				// B is now outside (B+1s-P, B+1s].
				{at: B + sec, n: 1, want: allowed(0, sec)},
				// Backwards: seen as B+1s, where B+0.1s leaves first.
				{at: B + 500_000, n: 1, want: denied(0, 100_000, sec)},
				{at: B + 500_000, n: 0, want: allowed(0, sec)},
			},
		},
		{
			name: "the k-th oldest entry among equal stamps",
			rate: 3, per: sec,
			steps: []step{
				{at: B + 3*sec, n: 2, want: allowed(1, sec)},
				{at: B + 3_200_000, n: 1, want: allowed(0, sec)},
				{at: B + 3_500_000, n: 1, want: denied(0, 500_000, 700_000)},
				{at: B + 3_500_000, n: 2, want: denied(0, 500_000, 700_000)},
				{at: B + 3_500_000, n: 3, want: denied(0, 700_000, 700_000)},
				{at: B + 3_999_999, n: 2, want: denied(0, 1, 200_001)},
				{at: B + 4*sec, n: 2, want: allowed(0, sec)},
				{at: B + 4_200_000, n: 1, want: allowed(0, sec)},
				{at: B + 4_200_000, n: 3, want: denied(0, sec, sec)}, // the newest must leave too
			},
		},
		{
			name: "window not aligned to the epoch",
			rate: 2, per: 7 * sec,
			steps: []step{
				{at: 10 * sec, n: 1, want: allowed(1, 7*sec)},
				{at: 12 * sec, n: 1, want: allowed(0, 7*sec)},
				{at: 16 * sec, n: 1, want: denied(0, sec, 3*sec)},
				{at: 17 * sec, n: 1, want: allowed(0, 7*sec)},
				{at: 17 * sec, n: 2, want: denied(0, 7*sec, 7*sec)},
			},
		},
		{
			name: "1µs period",
			rate: 2, per: 1,
			steps: []step{
				{at: B, n: 2, want: allowed(0, 1)},
				{at: B, n: 1, want: denied(0, 1, 1)},
				{at: B + 1, n: 2, want: allowed(0, 1)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, NewParams(SlidingLog, tt.rate, 0, tt.per), tt.steps)
		})
	}
}

func TestSlidingLogNoCommit(t *testing.T) {
	p := NewParams(SlidingLog, 3, 0, sec)
	var l Log
	SlidingLogStep(&l, 10, p, 2, true)
	got := SlidingLogStep(&l, 20, p, 1, false)
	if diff := cmp.Diff(allowed(0, sec), got); diff != "" {
		t.Errorf("SlidingLogStep(commit=false) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{10, 10}, l.entries()); diff != "" {
		t.Errorf("entries after a step without commit (-want +got):\n%s", diff)
	}
}

// TestSlidingLogRing holds the ring's bounds: it never grows beyond Rate
// entries, and wraps around without losing order.
func TestSlidingLogRing(t *testing.T) {
	p := NewParams(SlidingLog, 20, 0, 100)
	var l Log
	var want []int64
	for now := int64(1000); now < 1000+50*100; now += 7 {
		r := SlidingLogStep(&l, now, p, 3, true)
		for len(want) > 0 && want[0] <= now-100 {
			want = want[1:]
		}
		if r.Allowed {
			want = append(want, now, now, now)
		}
		if got := l.entries(); !cmp.Equal(got, want) {
			t.Fatalf("at %d: entries %v, want %v", now, got, want)
		}
		if len(l.buf) > 20 {
			t.Fatalf("at %d: ring holds %d slots, more than Rate 20", now, len(l.buf))
		}
	}
	if l.head == 0 {
		t.Errorf("the ring never wrapped (head 0): the test does not exercise wrapping")
	}
}
