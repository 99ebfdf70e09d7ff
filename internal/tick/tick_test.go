package tick

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestEvery: f runs once per interval, and not after stop; done closes.
func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stop, done := make(chan struct{}), make(chan struct{})
		calls := 0
		go Every(stop, done, time.Second, func() { calls++ })
		time.Sleep(3500 * time.Millisecond)
		synctest.Wait()
		if calls != 3 {
			t.Fatalf("after 3.5 intervals f ran %d times, want 3", calls)
		}
		close(stop)
		<-done
		time.Sleep(5 * time.Second)
		if calls != 3 {
			t.Fatalf("after stop f ran %d times, want 3", calls)
		}
	})
}
