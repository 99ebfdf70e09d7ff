package sluicetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

type recorder struct{ errs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// exactly returns admissions at the given µs offsets, known exactly.
func exactly(at ...int64) []admission {
	var adm []admission
	for _, t := range at {
		adm = append(adm, admission{t, t})
	}
	return adm
}

// TestCheckInvariant: the concurrency checks catch what breaks a limit and
// accept what does not, including when times are only bracketed.
func TestCheckInvariant(t *testing.T) {
	sec := int64(time.Second / time.Microsecond)
	tests := []struct {
		name string
		lim  sluice.Limit
		adm  []admission
		bad  bool
	}{
		{"LogWithin", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 2, Period: time.Second}, exactly(0, 1, sec), false},
		{"LogOver", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 2, Period: time.Second}, exactly(0, 1, sec-1), true},
		// Brackets that might be a period apart prove nothing.
		{"LogBracketed", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 2, Period: time.Second}, []admission{{0, 0}, {1, 1}, {sec - 10, sec + 10}}, false},
		{"LogBracketedOver", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 2, Period: time.Second}, []admission{{0, 5}, {1, 6}, {sec - 20, sec - 10}}, true},
		{"BucketBurst", sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 2, Period: time.Second, Burst: 3}, exactly(0, 0, 0, sec/2), false},
		{"BucketOverBurst", sluice.Limit{Algorithm: sluice.GCRA, Rate: 2, Period: time.Second, Burst: 3}, exactly(0, 0, 0, 0), true},
		{"BucketOverRefill", sluice.Limit{Algorithm: sluice.GCRA, Rate: 2, Period: time.Second, Burst: 3}, exactly(0, 0, 0, sec/2-1), true},
		{"WindowWithin", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Second}, exactly(sec-1, sec-1, sec, sec), false},
		{"WindowOver", sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 2, Period: time.Second}, exactly(sec, sec+1, 2*sec-1), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r recorder
			checkInvariant(&r, tt.lim, tt.adm)
			if got := len(r.errs) > 0; got != tt.bad {
				t.Errorf("checkInvariant(%v, %v) reported %q, want a violation: %v", tt.lim, tt.adm, r.errs, tt.bad)
			}
		})
	}
}

// TestClock: the fake clock moves only when told, and is safe to share.
func TestClock(t *testing.T) {
	c := NewClock(epoch)
	if got := c.Now(); !got.Equal(epoch) {
		t.Fatalf("Now() = %v, want %v", got, epoch)
	}
	done := make(chan bool)
	for range 4 {
		go func() {
			for range 100 {
				c.Advance(time.Microsecond)
				c.Now()
			}
			done <- true
		}()
	}
	for range 4 {
		<-done
	}
	if got, want := c.Now(), epoch.Add(400*time.Microsecond); !got.Equal(want) {
		t.Errorf("Now() after 400 concurrent Advance(1µs) = %v, want %v", got, want)
	}
	c.Set(epoch.Add(-time.Hour))
	if got, want := c.Now(), epoch.Add(-time.Hour); !got.Equal(want) {
		t.Errorf("Now() after Set back = %v, want %v", got, want)
	}
}

// TestScale: on real time the tables' durations scale to 20 × tolerance,
// to whole microseconds; on a fake clock they are unchanged.
func TestScale(t *testing.T) {
	exact := &env{c: NewClock(epoch)}
	if got := exact.scale(1333*time.Millisecond + 333*time.Microsecond); got != 1333*time.Millisecond+333*time.Microsecond {
		t.Errorf("exact scale = %v", got)
	}
	real := &env{unit: 200 * time.Millisecond}
	tests := []struct{ give, want time.Duration }{
		{time.Second, 200 * time.Millisecond},
		{700 * time.Millisecond, 140 * time.Millisecond},
		{500*time.Millisecond + time.Microsecond, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := real.scale(tt.give); got != tt.want {
			t.Errorf("scale(%v) = %v, want %v", tt.give, got, tt.want)
		}
	}
}
