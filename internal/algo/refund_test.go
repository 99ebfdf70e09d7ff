package algo

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFixedWindowReturn(t *testing.T) {
	p := NewParams(FixedWindow, 10, 0, sec)
	tests := []struct {
		name string
		give Window
		at   int64
		n    int64
		want Window
	}{
		{"in the window", Window{Start: 5 * sec, Count: 7}, 5_500_000, 3, Window{Start: 5 * sec, Count: 4}},
		{"more than counted", Window{Start: 5 * sec, Count: 2}, 5 * sec, 3, Window{Start: 5 * sec, Count: 0}},
		{"from an earlier window", Window{Start: 5 * sec, Count: 7}, 4_999_999, 3, Window{Start: 5 * sec, Count: 7}},
		{"from a later window", Window{Start: 5 * sec, Count: 7}, 6 * sec, 3, Window{Start: 5 * sec, Count: 7}},
		{"untouched", Window{}, 0, 3, Window{}},
		{"zero", Window{Start: 5 * sec, Count: 7}, 5 * sec, 0, Window{Start: 5 * sec, Count: 7}},
		{"negative takes nothing", Window{Start: 5 * sec, Count: 7}, 5 * sec, -3, Window{Start: 5 * sec, Count: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FixedWindowReturn(tt.give, tt.at, p, tt.n)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("FixedWindowReturn(%+v, %d, %d) (-want +got):\n%s", tt.give, tt.at, tt.n, diff)
			}
		})
	}
}

func TestSlidingWindowReturn(t *testing.T) {
	p := NewParams(SlidingWindow, 10, 0, sec)
	tests := []struct {
		name string
		give Counter
		at   int64
		n    int64
		want Counter
	}{
		{"current window", Counter{Start: 5 * sec, Prev: 4, Cur: 3}, 5_500_000, 2, Counter{Start: 5 * sec, Prev: 4, Cur: 1}},
		{"previous window", Counter{Start: 5 * sec, Prev: 4, Cur: 3}, 4_500_000, 2, Counter{Start: 5 * sec, Prev: 2, Cur: 3}},
		{"more than counted", Counter{Start: 5 * sec, Prev: 4, Cur: 3}, 4 * sec, 9, Counter{Start: 5 * sec, Prev: 0, Cur: 3}},
		{"too old to count", Counter{Start: 5 * sec, Prev: 4, Cur: 3}, 3_999_999, 2, Counter{Start: 5 * sec, Prev: 4, Cur: 3}},
		{"from a later window", Counter{Start: 5 * sec, Prev: 4, Cur: 3}, 6 * sec, 2, Counter{Start: 5 * sec, Prev: 4, Cur: 3}},
		{"negative takes nothing", Counter{Start: 5 * sec, Prev: 4, Cur: 3}, 5 * sec, -2, Counter{Start: 5 * sec, Prev: 4, Cur: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SlidingWindowReturn(tt.give, tt.at, p, tt.n)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("SlidingWindowReturn(%+v, %d, %d) (-want +got):\n%s", tt.give, tt.at, tt.n, diff)
			}
		})
	}
}

// TestTokenBucketReturn: the token bucket is kept as a TAT, so its return
// is GCRA's.
func TestTokenBucketReturn(t *testing.T) {
	p := NewParams(TokenBucket, 3, 0, sec)
	for _, tt := range []struct {
		give    Bucket
		at, now int64
		n       int64
	}{
		{Bucket{At: 100 + sec}, 100, 100, 2},
		{Bucket{At: 100 + sec}, 100, 100 + 333_334, 2},
		{Bucket{At: 100 + 666_666, Frac: 2}, 100, 100, 3},
		{Bucket{At: 100 + sec}, 100, 100, 0},
		{Bucket{}, 100, 100, 1},
	} {
		got, want := TokenBucketReturn(tt.give, tt.at, tt.now, p, tt.n), GCRAReturn(tt.give, tt.at, tt.now, p, tt.n)
		if got != want {
			t.Errorf("TokenBucketReturn(%+v, %d, %d, %d) = %+v, want GCRAReturn's %+v", tt.give, tt.at, tt.now, tt.n, got, want)
		}
	}
	if got := TokenBucketReturn(Bucket{At: 100 + sec}, 100, 100, p, 3); got != (Bucket{}) {
		t.Errorf("returning every token of a bucket emptied at 100 = %+v, want a full bucket", got)
	}
}

func TestGCRAReturn(t *testing.T) {
	const B = 3600 * sec
	p := NewParams(GCRA, 3, 0, sec)
	tests := []struct {
		name string
		give TAT
		now  int64
		n    int64
		want TAT
	}{
		{"the only unit", TAT{At: B + 333_333, Frac: 1}, B, 1, TAT{}},
		{"one of two, later", TAT{At: B + 666_666, Frac: 2}, B + 100_000, 1, TAT{At: B + 333_333, Frac: 1}},
		{"more than held", TAT{At: B + 666_666, Frac: 2}, B, 5, TAT{}},
		{"TAT already past", TAT{At: B - 1, Frac: 2}, B, 1, TAT{}},
		{"TAT exactly now", TAT{At: B, Frac: 0}, B, 1, TAT{}},
		{"zero", TAT{At: B + 666_666, Frac: 2}, B, 0, TAT{At: B + 666_666, Frac: 2}},
		{"negative takes nothing", TAT{At: B + 666_666, Frac: 2}, B, -1, TAT{At: B + 666_666, Frac: 2}},
		// A TAT beyond a full bucket (a clock behind, a Burst lowered) moves
		// back by exactly n emission intervals.
		{"beyond full", TAT{At: B + 5*sec, Frac: 0}, B, 1, TAT{At: B + 4_666_666, Frac: 2}},
		{"beyond full, to now", TAT{At: B + sec, Frac: 0}, B + 1, 3, TAT{}},
		{"epoch stand-in", TAT{At: -1, Frac: 3}, -sec, 1, TAT{At: -333_334, Frac: 2}},
		{"to the epoch exactly", TAT{At: 333_333, Frac: 1}, -5, 1, TAT{At: -1, Frac: 3}},
	}
	// One interval taken at B is worth 1e6 - 100_000*3 scaled units at
	// B+100_000: the TAT moves back 233_333 µs and 1/3.
	if got, want := GCRAReturn(TAT{At: B + 666_666, Frac: 2}, B, B+100_000, p, 1), (TAT{At: B + 433_333, Frac: 1}); got != want {
		t.Errorf("GCRAReturn decayed = %+v, want %+v", got, want)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := GCRAReturn(tt.give, tt.now, tt.now, p, tt.n)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("GCRAReturn(%+v, %d, %d) (-want +got):\n%s", tt.give, tt.now, tt.n, diff)
			}
		})
	}
}

// logOf returns a log holding units stamped at the given times (in
// order), its ring rotated by shift so that the entries wrap around the end
// of the buffer.
func logOf(units []int64, size, shift int) *Log {
	l := &Log{buf: make([]logEntry, size), head: shift % size}
	for _, v := range units {
		if l.n == 0 || l.Newest() != v {
			l.n++
			*l.entry(l.n - 1) = logEntry{at: v, first: l.last + 1}
		}
		l.last++
	}
	return l
}

func TestSlidingLogReturn(t *testing.T) {
	tests := []struct {
		name  string
		give  []int64
		shift int
		at    int64
		n     int64
		want  []int64
	}{
		{"some of a run", []int64{1, 2, 2, 2, 5}, 0, 2, 2, []int64{1, 2, 5}},
		{"a whole run", []int64{1, 2, 2, 2, 5}, 0, 2, 10, []int64{1, 5}},
		{"the newest", []int64{1, 2, 5}, 0, 5, 1, []int64{1, 2}},
		{"the oldest", []int64{1, 2, 5}, 0, 1, 1, []int64{2, 5}},
		{"no such stamp", []int64{1, 2, 5}, 0, 3, 1, []int64{1, 2, 5}},
		{"older than all", []int64{1, 2, 5}, 0, 0, 1, []int64{1, 2, 5}},
		{"everything", []int64{4, 4}, 0, 4, 2, []int64{}},
		{"zero", []int64{1, 2, 2, 5}, 0, 2, 0, []int64{1, 2, 2, 5}},
		{"negative", []int64{1, 2, 2, 5}, 0, 2, -1, []int64{1, 2, 2, 5}},
		{"wrapped ring", []int64{1, 2, 3, 3, 3, 6, 7}, 6, 3, 2, []int64{1, 2, 3, 6, 7}},
		{"wrapped ring, run across the end", []int64{1, 2, 3, 3, 3, 6, 7}, 5, 3, 3, []int64{1, 2, 6, 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := logOf(tt.give, 8, tt.shift)
			SlidingLogReturn(l, tt.at, 7, NewParams(SlidingLog, 10, 0, 100), tt.n)
			if diff := cmp.Diff(tt.want, l.entries()); diff != "" {
				t.Errorf("SlidingLogReturn(%v, %d, %d) (-want +got):\n%s", tt.give, tt.at, tt.n, diff)
			}
		})
	}
}

// TestGCRAReturnFarBehind: a now far before TAT (a clock that ran back by
// months) moves TAT back by n intervals without forming (TAT-now)*R.
func TestGCRAReturnFarBehind(t *testing.T) {
	const B = 3600 * sec
	p := NewParams(GCRA, 999_983, 0, sec) // prime: R = 999983, P = 1e6
	now := int64(B - 10_000_000*sec)
	got := GCRAReturn(TAT{At: B}, now, now, p, 1)
	want := TAT{At: B - 2, Frac: 999_966} // B - 1e6/999983 µs
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GCRAReturn far behind (-want +got):\n%s", diff)
	}
}

// TestBucketReturnNeverOverCredits is the lease scenario that over-admitted
// when a return gave back n whole units: 1/s, burst 10; a lease of 6 at 0;
// another caller takes 4 at 3 s; the 6 come back at 3 s. Without the lease
// the bucket would hold 6 then, so at most 6 may remain.
func TestBucketReturnNeverOverCredits(t *testing.T) {
	for _, k := range []Kind{TokenBucket, GCRA} {
		p := NewParams(k, 1, 10, sec)
		at, now := int64(100*sec), int64(103*sec)
		var got Result
		switch k {
		case TokenBucket:
			b, _ := TokenBucketStep(Bucket{}, at, p, 6)
			b, _ = TokenBucketStep(b, now, p, 4)
			b = TokenBucketReturn(b, at, now, p, 6)
			_, got = TokenBucketStep(b, now, p, 0)
		case GCRA:
			s, _ := GCRAStep(TAT{}, at, p, 6)
			s, _ = GCRAStep(s, now, p, 4)
			s = GCRAReturn(s, at, now, p, 6)
			_, got = GCRAStep(s, now, p, 0)
		}
		if got.Remaining != 6 {
			t.Errorf("kind %d: Remaining after the return = %d, want 6 (as if the lease never happened)", k, got.Remaining)
		}
	}
}
