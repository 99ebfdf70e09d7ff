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
			t.Error("two deadlines of one millisecond got two slots")
		}
		if a == c {
			t.Error("deadlines of two milliseconds share a slot")
		}
		<-a.Done()
		if got := time.Since(start); got < 10*time.Millisecond+900*time.Microsecond || got > 10*time.Millisecond+900*time.Microsecond+Slack {
			t.Errorf("closed after %v, want at 10.9ms, within %v", got, Slack)
		}
		<-c.Done()
		if got := time.Since(start); got < 11*time.Millisecond+100*time.Microsecond || got > 11*time.Millisecond+100*time.Microsecond+Slack {
			t.Errorf("closed after %v, want at 11.1ms, within %v", got, Slack)
		}
		w.Release(a)
		w.Release(b)
		w.Release(c)
		t0 := time.Now()
		p := w.After(start)
		<-p.Done()
		if time.Since(t0) != 0 {
			t.Errorf("a passed deadline's channel closed after %v, want at once", time.Since(t0))
		}
		w.Release(p)
		synctest.Wait()
		if n := slots(&w); n != 0 {
			t.Errorf("%d slots kept after their timers ran, want 0", n)
		}
	})
}

// A slot released by every caller before its end stops its timer and is
// forgotten at once: its channel never closes (no timer fires for calls
// that ended in time). Released by some, it still closes on time for the
// others; a caller after the last release gets a slot of its own.
func TestWheelRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var w Wheel
		start := time.Now()
		d := start.Add(5 * time.Millisecond)
		a, b := w.After(d), w.After(d)
		w.Release(a)
		if n := slots(&w); n != 1 {
			t.Fatalf("one of two callers released: %d slots, want 1", n)
		}
		<-b.Done()
		if got := time.Since(start); got != 5*time.Millisecond {
			t.Errorf("the remaining caller's channel closed after %v, want 5ms", got)
		}
		w.Release(b)

		e := start.Add(20 * time.Millisecond)
		x, y := w.After(e), w.After(e)
		w.Release(x)
		w.Release(y)
		if n := slots(&w); n != 0 {
			t.Errorf("every caller released: %d slots kept, want 0", n)
		}
		time.Sleep(time.Until(e) + 2*Slack)
		select {
		case <-x.Done():
			t.Error("a slot released by every caller closed at its end: its timer ran")
		default:
		}
		z := w.After(e.Add(-Slack / 2)) // the same slot's deadlines, now passed
		if z == x {
			t.Error("a caller after the last release got the released slot")
		}
		select {
		case <-z.Done():
		default:
			synctest.Wait()
			select {
			case <-z.Done():
			default:
				t.Error("a passed deadline's new slot did not close")
			}
		}
		w.Release(z)
		synctest.Wait()
		if n := slots(&w); n != 0 {
			t.Errorf("%d slots kept at the end, want 0", n)
		}
	})
}

func slots(w *Wheel) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.slots)
}
