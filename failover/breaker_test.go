package failover

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// newTestBreaker returns a breaker on a clock the test moves (ns), whose
// probe answers when *answers is true, and counts its changes.
func newTestBreaker(t *testing.T, threshold int, ratio float64, minCalls int) (b *breaker, clock *atomic.Int64, answers *atomic.Bool, opened, closed *atomic.Int64) {
	clock, answers = new(atomic.Int64), new(atomic.Bool)
	opened, closed = new(atomic.Int64), new(atomic.Int64)
	b = &breaker{
		threshold: int64(threshold), ratio: ratio, window: time.Second, minCalls: int64(minCalls),
		interval: 100 * time.Millisecond, timeout: func() time.Duration { return 50 * time.Millisecond },
		since: func() time.Duration { return time.Duration(clock.Load()) },
		probe: func(context.Context) error {
			if answers.Load() {
				return nil
			}
			return errors.New("down")
		},
		onOpen:  func(error) { opened.Add(1) },
		onClose: func(time.Duration) { closed.Add(1) },
	}
	b.start()
	t.Cleanup(b.stop)
	return b, clock, answers, opened, closed
}

func TestBreakerConsecutiveFailures(t *testing.T) {
	b, _, _, opened, _ := newTestBreaker(t, 3, 0, 1)
	b.failure(errors.New("x"))
	b.failure(errors.New("x"))
	b.success() // resets the run
	b.failure(errors.New("x"))
	b.failure(errors.New("x"))
	if b.open() {
		t.Fatal("open after 2 consecutive failures, threshold 3")
	}
	b.failure(errors.New("x"))
	if !b.open() || opened.Load() != 1 || b.opens.Load() != 1 {
		t.Errorf("after 3 consecutive failures: open %v, %d opens; want open once", b.open(), opened.Load())
	}
	b.failure(errors.New("x")) // already open: no second open
	if opened.Load() != 1 {
		t.Errorf("%d opens, want 1", opened.Load())
	}
}

func TestBreakerErrorRate(t *testing.T) {
	b, clock, _, _, _ := newTestBreaker(t, 1000, 0.5, 10)
	for i := range 9 {
		if i%2 == 0 {
			b.success()
		} else {
			b.failure(errors.New("x"))
		}
	}
	if b.open() {
		t.Fatal("open before minCalls")
	}
	clock.Store(int64(2 * time.Second)) // a new window: the counts start over
	for range 5 {
		b.success()
	}
	for range 4 {
		b.failure(errors.New("x"))
	}
	if b.open() {
		t.Fatal("open at 4 failures of 9 calls")
	}
	b.failure(errors.New("x")) // 5 of 10
	if !b.open() {
		t.Error("closed at 5 failures of 10 calls, ratio 0.5")
	}
}

func TestBreakerProberCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, clock, answers, _, closed := newTestBreaker(t, 1, 0, 1)
		b.failure(errors.New("x"))
		time.Sleep(time.Second)
		synctest.Wait()
		if !b.open() || closed.Load() != 0 {
			t.Fatal("closed while the probe fails")
		}
		clock.Store(int64(time.Second))
		answers.Store(true)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if b.open() || closed.Load() != 1 || b.closes.Load() != 1 || b.consec.Load() != 0 {
			t.Errorf("after an answered probe: open %v, %d closes, consec %d; want closed once, counts reset", b.open(), closed.Load(), b.consec.Load())
		}
	})
}

func TestBreakerStopEndsProber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, _, _, _ := newTestBreaker(t, 1, 0, 1)
		b.trip(errors.New("x"))
		b.stop()
		synctest.Wait()
		b.reset()
		b.trip(errors.New("x")) // stopped: opens no more
		if b.open() {
			t.Error("a stopped breaker opened")
		}
	})
}
