package redisstore_test

import (
	"testing"
	"time"
)

// waitGuard bounds waitUntil: far beyond what any wait of these tests
// takes on a starved machine (milliseconds to a second), so that it only
// turns a store that never gets there into a failure instead of a hang.
const waitGuard = 2 * time.Minute

// waitUntil polls cond until it holds: a phase of a fault test ends when
// what it needs has happened (so many decisions seen), not after a fixed
// time that a busy machine may not give it.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", waitGuard, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
