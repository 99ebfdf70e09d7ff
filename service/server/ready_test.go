package server

import "testing"

func TestReady(t *testing.T) {
	cond := true
	s, _ := newTestServer(t, WithReadiness(func() (bool, string) {
		if cond {
			return true, ""
		}
		return false, "store down"
	}))
	if ok, why := s.Ready(); !ok || why != "" {
		t.Errorf("Ready() = %v %q, want true", ok, why)
	}
	cond = false
	if ok, why := s.Ready(); ok || why != "store down" {
		t.Errorf("Ready() with a failing condition = %v %q, want false, store down", ok, why)
	}
	s.Drain()
	if ok, why := s.Ready(); ok || why != "draining" {
		t.Errorf("Ready() draining = %v %q, want false, draining", ok, why)
	}
	if rec := do(t, s, "GET", "/readyz", ""); rec.Code != 503 {
		t.Errorf("/readyz = %d, want 503 as Ready says", rec.Code)
	}
}
