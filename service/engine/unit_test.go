package engine

import (
	"testing"
	"time"
)

// units are ordered longest first, so that a window is reported in the
// largest unit that divides it.
func TestUnitsLongestFirst(t *testing.T) {
	for i := 1; i < len(units); i++ {
		if units[i-1].Period <= units[i].Period {
			t.Errorf("units[%d] = %v is not longer than units[%d] = %v", i-1, units[i-1].Period, i, units[i].Period)
		}
	}
}

// windowLeft counts in whole microseconds, as the stores place their
// windows.
func TestWindowLeft(t *testing.T) {
	epoch := time.Unix(1_700_000_040, 0) // a whole number of minutes
	tests := []struct {
		now  time.Time
		p    time.Duration
		want time.Duration
	}{
		{epoch, time.Minute, time.Minute},
		{epoch.Add(1500 * time.Millisecond), time.Second, 500 * time.Millisecond},
		{epoch.Add(59 * time.Second), time.Minute, time.Second},
		{epoch.Add(time.Microsecond + 999), time.Millisecond, 999 * time.Microsecond},
		{epoch.Add(999), time.Second, time.Second},                     // below a microsecond: the window's start
		{epoch.Add(300 * time.Millisecond), 0, 700 * time.Millisecond}, // no period: a second's
	}
	for _, tt := range tests {
		if got := windowLeft(tt.p, tt.now); got != tt.want {
			t.Errorf("windowLeft(%v, epoch+%v) = %v, want %v", tt.p, tt.now.Sub(epoch), got, tt.want)
		}
	}
}
