package window

import (
	"fmt"
	"testing"
	"time"
)

// recorder is a testing.TB that keeps what Run reports.
type recorder struct {
	testing.TB
	errors, logs []string
	fatal        string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Error(args ...any)            { r.errors = append(r.errors, fmt.Sprint(args...)) }
func (r *recorder) Logf(f string, args ...any)   { r.logs = append(r.logs, fmt.Sprintf(f, args...)) }
func (r *recorder) Fatalf(f string, args ...any) { r.fatal = fmt.Sprintf(f, args...) }

// TestRun: a sequence's findings count when it stayed within one window;
// a sequence that a boundary interrupted is dropped and run again, at the
// start of a window, on the next attempt; a clean sequence reports nothing.
func TestRun(t *testing.T) {
	const period = 500 * time.Millisecond
	r := &recorder{TB: t}
	var attempts []int
	Run(r, period, 100*time.Millisecond, func(f *Findings, attempt int) {
		attempts = append(attempts, attempt)
		f.Errorf("finding of attempt %d", attempt)
		if attempt == 0 {
			time.Sleep(Left(time.Now(), period) + 10*time.Millisecond) // across a boundary
		}
	})
	// The second attempt starts a window: only a machine stalled for
	// most of it would need a third.
	last := attempts[len(attempts)-1]
	if len(attempts) < 2 || attempts[0] != 0 || len(r.errors) != 1 || r.errors[0] != fmt.Sprintf("finding of attempt %d", last) || r.fatal != "" {
		t.Errorf("attempts %v, errors %q, fatal %q; want the first attempt dropped and only the last one's finding", attempts, r.errors, r.fatal)
	}

	r = &recorder{TB: t}
	Run(r, period, 100*time.Millisecond, func(f *Findings, attempt int) {})
	if len(r.errors) != 0 || r.fatal != "" {
		t.Errorf("a clean sequence reported %q %q", r.errors, r.fatal)
	}
}

func TestStartLeft(t *testing.T) {
	at := time.Date(2026, 12, 2, 23, 59, 30, 0, time.UTC)
	if got, want := Start(at, 24*time.Hour), time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("Start(%v, day) = %v, want %v", at, got, want)
	}
	if got := Left(at, time.Minute); got != 30*time.Second {
		t.Errorf("Left(%v, minute) = %v, want 30s", at, got)
	}
}
