package bound

import (
	"testing"
	"testing/synctest"
	"time"
)

// A Wheel's channel closes at its deadline or up to Slack after it, never
// before; the deadlines of one slot share a channel; a passed deadline's
// closes at once.
func TestWheel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var w Wheel
		start := time.Now()
		a := w.After(start.Add(10*time.Millisecond + 300*time.Microsecond))
		b := w.After(start.Add(10*time.Millisecond + 900*time.Microsecond))
		c := w.After(start.Add(11*time.Millisecond + 100*time.Microsecond))
		if a != b {
			t.Error("two deadlines of one millisecond got two channels")
		}
		if a == c {
			t.Error("deadlines of two milliseconds share a channel")
		}
		<-a
		if got := time.Since(start); got < 10*time.Millisecond+900*time.Microsecond || got > 10*time.Millisecond+900*time.Microsecond+Slack {
			t.Errorf("closed after %v, want at 10.9ms, within %v", got, Slack)
		}
		<-c
		if got := time.Since(start); got < 11*time.Millisecond+100*time.Microsecond || got > 11*time.Millisecond+100*time.Microsecond+Slack {
			t.Errorf("closed after %v, want at 11.1ms, within %v", got, Slack)
		}
		t0 := time.Now()
		<-w.After(start)
		if time.Since(t0) != 0 {
			t.Errorf("a passed deadline's channel closed after %v, want at once", time.Since(t0))
		}
		synctest.Wait()
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.slots) != 0 {
			t.Errorf("%d slots kept after their timers ran, want 0", len(w.slots))
		}
	})
}
