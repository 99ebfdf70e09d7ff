// Package wait polls a test's condition until it holds: a phase of a
// fault test ends when what it needs has happened (so many decisions
// seen, a breaker closed), not after a fixed time that a busy machine may
// not give it.
//
// The package is a normal package so that tests of any package in the
// module can import it; nothing outside tests should.
package wait

import (
	"context"
	"testing"
	"time"
)

// Guard bounds Until: far beyond what any wait of the tests takes on a
// starved machine (milliseconds to seconds), so that it only turns a
// store that never gets there into a failure instead of a hang.
const Guard = 2 * time.Minute

// Until polls cond every 2 ms until it holds, and fails the test (naming
// what) when it has not after Guard.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", Guard, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// PastDeadline runs call, which is bounded by ctx's deadline, and returns
// how long after that deadline it returned (0 when it returned before),
// measured against a goroutine that ctx's end wakes at the same moment: a
// busy machine delays both alike, a layer that holds the call past its
// deadline delays the call alone. For a call bounded by a timeout of its
// own, pass a context with the same timeout, made just before the call.
func PastDeadline(ctx context.Context, call func()) time.Duration {
	woke := make(chan time.Time, 1)
	go func() {
		<-ctx.Done()
		woke <- time.Now()
	}()
	call()
	returned := time.Now()
	if ctx.Err() == nil {
		return 0
	}
	return max(returned.Sub(<-woke), 0)
}
