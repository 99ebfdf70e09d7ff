package sluice

import (
	"testing"

	"github.com/sluicehq/sluice/internal/algo"
)

// TestMaxSlidingLogRate: the documented bound is the one the algorithms
// enforce.
func TestMaxSlidingLogRate(t *testing.T) {
	if MaxSlidingLogRate != algo.MaxLogRate {
		t.Errorf("MaxSlidingLogRate = %d, want algo.MaxLogRate %d", MaxSlidingLogRate, algo.MaxLogRate)
	}
}
