package engine

import (
	"testing"
	"time"
)

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
