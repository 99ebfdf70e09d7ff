package gctune

import (
	"runtime"
	"runtime/debug"
	"testing"
)

const mib = 1 << 20

func TestPercent(t *testing.T) {
	tests := []struct {
		name              string
		floor, live, scan uint64
		base              int
		want              int
	}{
		{"live above floor", 1 * mib, 8 * mib, 9 * mib, 100, 100},
		{"live at floor", 8 * mib, 8 * mib, 9 * mib, 100, 100},
		{"target at floor", 64 * mib, 4 * mib, 6 * mib, 100, 1000},
		{"between base and max", 64 * mib, 16 * mib, 16 * mib, 100, 300},
		{"never below base", 64 * mib, 40 * mib, 42 * mib, 100, 100},
		{"user base above", 64 * mib, 4 * mib, 6 * mib, 2000, 2000},
		{"capped", 256 * mib, 1 * mib, 1 * mib, 100, maxPercent},
		{"no scan yet", 64 * mib, 0, 0, 100, 100},
		{"huge floor", 1 << 63, 1 * mib, 1 * mib, 100, maxPercent},
	}
	for _, tt := range tests {
		if got := percent(tt.floor, tt.live, tt.scan, tt.base); got != tt.want {
			t.Errorf("%s: percent(%d, %d, %d, %d) = %d, want %d", tt.name, tt.floor, tt.live, tt.scan, tt.base, got, tt.want)
		}
	}
}

// withBase runs the test with GOGC=base and restores the previous value.
func withBase(t *testing.T, base int) {
	t.Helper()
	old := debug.SetGCPercent(base)
	t.Cleanup(func() { debug.SetGCPercent(old) })
}

// cycle runs collections until the tuner has armed at least n more cleanups,
// that is, until it has seen n collections; at most 100 collections.
func cycle(t *testing.T, tu *tuner, n int) {
	t.Helper()
	tu.mu.Lock()
	want := tu.arms + n
	tu.mu.Unlock()
	for range 100 {
		runtime.GC()
		runtime.Gosched()
		tu.mu.Lock()
		arms := tu.arms
		tu.mu.Unlock()
		if arms >= want {
			return
		}
	}
	t.Fatalf("the tuner saw fewer than %d of 100 collections", n)
}

func TestSmallHeapRaisesPercentAndStopRestores(t *testing.T) {
	withBase(t, 100)
	tu := start(256 * mib)
	if tu == nil {
		t.Fatal("start(256 MiB) = nil")
	}
	cycle(t, tu, 2)
	if got := currentPercent(); got <= 100 {
		t.Errorf("GOGC with a 256 MiB floor and a small heap = %d, want > 100", got)
	}
	tu.stop()
	if got := currentPercent(); got != 100 {
		t.Errorf("GOGC after stop = %d, want the base 100", got)
	}
	// After stop no cleanup is armed again, and GOGC stays at the base.
	tu.mu.Lock()
	arms := tu.arms
	tu.mu.Unlock()
	for range 5 {
		runtime.GC()
		runtime.Gosched()
	}
	tu.mu.Lock()
	got := tu.arms
	tu.mu.Unlock()
	if got != arms {
		t.Errorf("cleanups armed after stop: %d, want 0", got-arms)
	}
	if got := currentPercent(); got != 100 {
		t.Errorf("GOGC 5 collections after stop = %d, want 100", got)
	}
	tu.stop() // idempotent
}

func TestLargeHeapKeepsBase(t *testing.T) {
	withBase(t, 100)
	tu := start(4 * mib)
	defer tu.stop()
	cycle(t, tu, 2)
	if got := currentPercent(); got <= 100 {
		t.Fatalf("GOGC with a 4 MiB floor and a small heap = %d, want > 100", got)
	}
	// The live heap grows past the floor: GOGC returns to the base.
	live := make([]byte, 8*mib)
	for i := range live {
		live[i] = byte(i)
	}
	cycle(t, tu, 2)
	if got := currentPercent(); got != 100 {
		t.Errorf("GOGC with a 4 MiB floor and 8 MiB live = %d, want the base 100", got)
	}
	runtime.KeepAlive(live)
}

func TestBaseIsTheUsersPercent(t *testing.T) {
	withBase(t, 50)
	stop := SetHeapFloor(256 * mib)
	stop()
	if got := currentPercent(); got != 50 {
		t.Errorf("GOGC after stop = %d, want the base 50", got)
	}
}

func TestNothingToDo(t *testing.T) {
	withBase(t, -1) // GOGC=off
	if tu := start(256 * mib); tu != nil {
		tu.stop()
		t.Error("start with GOGC=off is running, want nil")
	}
	SetHeapFloor(256 * mib)() // a no-op stop
	if got := currentPercent(); got != -1 {
		t.Errorf("GOGC after SetHeapFloor with GOGC=off = %d, want -1 (off)", got)
	}
	debug.SetGCPercent(100)
	if tu := start(0); tu != nil {
		tu.stop()
		t.Error("start(0) is running, want nil")
	}
}
