package main

import "testing"

// TestDeviation checks what the tool reports: the log never admits more
// than the limit in any period, the window agrees with it on steady
// traffic far below the limit, and strays on bursts near it.
func TestDeviation(t *testing.T) {
	got := map[string]result{}
	for _, tr := range traces() {
		got[tr.name] = run(tr)
	}
	for name, r := range got {
		if r.worstLog > 1 {
			t.Errorf("%s: the sliding log admitted %.2fx the limit in one period", name, r.worstLog)
		}
		if r.requests == 0 || r.logAdmitted == 0 {
			t.Errorf("%s: %d requests, %d admitted: an empty trace", name, r.requests, r.logAdmitted)
		}
	}
	if s := got["steady"]; s.windowOnly != 0 || s.logOnly != 0 || s.logAdmitted != s.requests {
		t.Errorf("steady: %+v, want every request admitted by both", s)
	}
	if b := got["bursty"]; b.worst <= 1 || b.windowAdmitted <= b.logAdmitted {
		t.Errorf("bursty: %+v, want the window above the limit in some minute", b)
	}
}
