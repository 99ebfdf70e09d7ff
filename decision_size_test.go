package sluice

import (
	"testing"
	"unsafe"
)

// A Decision is returned by value on every path, and a Limit is part of
// every map key of the local tiers: FailureMode sits in Algorithm's
// padding and Degraded in Allowed's, so that neither costs a copy.
func TestDecisionSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("64-bit layout")
	}
	if got := unsafe.Sizeof(Limit{}); got != 32 {
		t.Errorf("Sizeof(Limit{}) = %d, want 32", got)
	}
	if got := unsafe.Sizeof(Decision{}); got != 64 {
		t.Errorf("Sizeof(Decision{}) = %d, want 64", got)
	}
}
