package algo

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGCRAStep(t *testing.T) {
	for _, tt := range bucketTests() {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, NewParams(GCRA, tt.rate, tt.burst, tt.per), tt.steps)
		})
	}
}

func TestGCRAState(t *testing.T) {
	const B = 3600 * sec
	p := NewParams(GCRA, 3, 0, sec) // T = 333333 + 1/3 µs
	tests := []struct {
		name string
		give TAT
		at   int64
		n    int64
		want TAT
	}{
		{"fresh", TAT{}, B, 1, TAT{At: B + 333_333, Frac: 1}},
		{"two at once", TAT{}, B, 2, TAT{At: B + 666_666, Frac: 2}},
		{"fractions add up", TAT{At: B + 333_333, Frac: 1}, B, 2, TAT{At: B + sec, Frac: 0}},
		{"TAT in the past is a full bucket", TAT{At: B - 5, Frac: 2}, B, 1, TAT{At: B + 333_333, Frac: 1}},
		{"TAT now, with a fraction left", TAT{At: B, Frac: 2}, B, 1, TAT{At: B + 333_334, Frac: 0}},
		{"denied keeps the state", TAT{At: B + sec, Frac: 0}, B, 1, TAT{At: B + sec, Frac: 0}},
		{"peek keeps the state", TAT{At: B + 5, Frac: 1}, B, 0, TAT{At: B + 5, Frac: 1}},
		{"fresh key before the epoch", TAT{}, -B, 1, TAT{At: -B + 333_333, Frac: 1}},
		{"reaching the epoch exactly is not the zero value", TAT{}, -sec, 3, TAT{At: -1, Frac: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := GCRAStep(tt.give, tt.at, p, tt.n)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("GCRAStep(%+v, %d, 3/s, %d) state (-want +got):\n%s", tt.give, tt.at, tt.n, diff)
			}
		})
	}
}

// TestGCRABackwards: GCRA keeps no last time and needs no clamp: with a
// clock behind the TAT, RetryAfter and ResetAfter count exactly from the
// TAT, so that waiting RetryAfter on that clock admits.
func TestGCRABackwards(t *testing.T) {
	const B = 3600 * sec
	runSteps(t, NewParams(GCRA, 7, 2, sec), []step{
		{at: B, n: 2, want: allowed(0, 285_715)}, // TAT = B + 285714 + 2/7
		{at: B - 1, n: 1, want: denied(0, 142_859, 285_716)},
		{at: B - 10*sec, n: 1, want: denied(0, 10*sec+142_858, 10*sec+285_715)},
		{at: B - 10*sec, n: 2, want: denied(0, 10*sec+285_715, 10*sec+285_715)},
		{at: B - 10*sec, n: 0, want: allowed(0, 10*sec+285_715)},
		{at: B + 142_857, n: 1, want: denied(0, 1, 142_858)},
		{at: B + 142_858, n: 1, want: allowed(0, 285_714)},
	})
}

// TestGCRABurstLowered: a TAT written under a larger Burst lies more than
// a full bucket ahead; RetryAfter still counts exactly from the TAT.
func TestGCRABurstLowered(t *testing.T) {
	const B = 3600 * sec
	m := runSteps(t, NewParams(GCRA, 10, 20, sec), []step{
		{at: B, n: 20, want: allowed(0, 2*sec)},
	})
	p := NewParams(GCRA, 10, 5, sec) // T = 100ms, Cap*T = 500ms
	tests := []struct {
		at   int64
		n    int64
		want Result
	}{
		{B, 0, allowed(0, 2*sec)},
		{B, 1, denied(0, 1_600_000, 2*sec)},
		{B, 5, denied(0, 2*sec, 2*sec)},
		{B + 1_599_999, 1, denied(0, 1, 400_001)},
		{B + 1_600_000, 1, allowed(0, 500_000)},
	}
	for _, tt := range tests {
		_, got := GCRAStep(m.t, tt.at, p, tt.n)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("GCRAStep(%+v, %d, 10/s burst 5, %d) (-want +got):\n%s", m.t, tt.at, tt.n, diff)
		}
	}
}

// TestGCRARateChanged: a Frac written under a larger R is read within the
// same µs, not as many µs.
func TestGCRARateChanged(t *testing.T) {
	const B = 3600 * sec
	p := NewParams(GCRA, 1, 0, 4) // R = 1: Frac must be 0
	tests := []struct {
		name string
		give TAT
		at   int64
		n    int64
		want Result
	}{
		{"TAT in this µs", TAT{At: B, Frac: 10}, B, 1, allowed(0, 4)},
		{"TAT a µs ahead", TAT{At: B + 1, Frac: 10}, B, 1, denied(0, 1, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got := GCRAStep(tt.give, tt.at, p, tt.n)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("GCRAStep(%+v, %d, 1 per 4µs, %d) (-want +got):\n%s", tt.give, tt.at, tt.n, diff)
			}
		})
	}
}

// TestGCRAFreshBeforeEpoch: the zero TAT is an untouched key at any time,
// also before 1970 (a fake clock starting at time.Time{}).
func TestGCRAFreshBeforeEpoch(t *testing.T) {
	const year1 = -62135596800 * sec // time.Time{}.UnixMicro()
	runSteps(t, NewParams(GCRA, 10, 0, sec), []step{
		{at: year1, n: 0, want: allowed(10, 0)},
		{at: year1, n: 1, want: allowed(9, 100_000)},
		{at: year1 + 50_000, n: 9, want: allowed(0, 950_000)},
	})
}

// TestBucketsAcrossTheEpoch: a bucket emptied before 1970 whose TAT is
// exactly the epoch is not mistaken for an untouched key.
func TestBucketsAcrossTheEpoch(t *testing.T) {
	for _, k := range []Kind{TokenBucket, GCRA} {
		t.Run(kindString(k), func(t *testing.T) {
			runSteps(t, NewParams(k, 3, 0, sec), []step{
				{at: -sec, n: 3, want: allowed(0, sec)},
				{at: -1, n: 3, want: denied(2, 1, 1)},
				{at: -1, n: 2, want: allowed(0, 666_668)},
				{at: 0, n: 1, want: allowed(0, sec)},
				{at: 0, n: 1, want: denied(0, 333_334, sec)},
				{at: 333_334, n: 1, want: allowed(0, sec)},
			})
		})
	}
}
