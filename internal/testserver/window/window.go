// Package window runs a test's sequence of requests within one window of a
// wall-clock limit. A running sluice serve (and envoyproxy/ratelimit)
// counts in windows aligned on the real clock's epoch (a minute, an hour,
// a day) that a test of the built binary cannot fake, and a sequence that
// straddles a boundary sees its counts restart.
//
// Run waits until enough of the window is left, runs the sequence, and
// counts what it found only when the clock says that the whole sequence
// ran within one window; on a machine too slow for that, it runs the
// sequence again (on fresh keys: the sequence gets the attempt's number)
// in the next window, which has just begun. The findings of a sequence
// that stayed within its window are final, whatever they are: a sequence
// is repeated because the clock proved its premise false, never because it
// failed.
//
// The package is a normal package so that tests of any package in the
// module can import it; nothing outside tests should.
package window

import (
	"fmt"
	"testing"
	"time"
)

// TB is what a sequence's checks need of a test: *testing.T has it, and
// so has *Findings.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

var _ TB = (*Findings)(nil)

// Findings collects what a sequence found wrong, and its logs.
type Findings struct {
	msgs, logs []string
}

// Logf records a log line, shown by Run.
func (f *Findings) Logf(format string, args ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

// Errorf records a finding.
func (f *Findings) Errorf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

// Helper does nothing: Findings are reported by Run.
func (f *Findings) Helper() {}

// Failed reports whether a finding was recorded.
func (f *Findings) Failed() bool { return len(f.msgs) > 0 }

// Attempts bounds how often Run starts a sequence: the third runs at the
// start of a window after two that a boundary interrupted.
const Attempts = 3

// Run runs seq within one epoch-aligned window of period (at most a day):
// it waits, when less than need is left of the current window, until the
// next begins, then runs seq, and reports seq's findings with t.Error
// when the sequence began and ended in one window. When a boundary passed
// during seq, its findings are logged and dropped and seq runs again with
// the next attempt number (0, 1, ...); after Attempts interrupted runs the
// test fails, naming the machine's slowness.
func Run(t testing.TB, period, need time.Duration, seq func(f *Findings, attempt int)) {
	t.Helper()
	if need >= period {
		t.Fatalf("window.Run: need %v must be shorter than the period %v", need, period)
	}
	for attempt := range Attempts {
		if left := Left(time.Now(), period); left < need {
			time.Sleep(left + time.Millisecond)
		}
		began := time.Now()
		f := &Findings{}
		seq(f, attempt)
		ended := time.Now()
		for _, l := range f.logs {
			t.Logf("%s", l)
		}
		if Start(began, period) == Start(ended, period) {
			for _, m := range f.msgs {
				t.Error(m)
			}
			return
		}
		t.Logf("window: the sequence ran from %s to %s, across a %v boundary (a slow machine): its %d findings dropped, run again on fresh keys",
			began.Format("15:04:05.000"), ended.Format("15:04:05.000"), period, len(f.msgs))
		for _, m := range f.msgs {
			t.Logf("  dropped: %s", m)
		}
	}
	t.Fatalf("window: %d sequences each ran across a %v boundary; the machine is too slow for a sequence within %v", Attempts, period, need)
}

// Start returns the start of the epoch-aligned window of period that
// holds at.
func Start(at time.Time, period time.Duration) time.Time {
	us := at.UnixMicro()
	p := period.Microseconds()
	return time.UnixMicro(us - us%p)
}

// Left returns how much of the window of period that holds at is left.
func Left(at time.Time, period time.Duration) time.Duration {
	return Start(at, period).Add(period).Sub(at)
}
