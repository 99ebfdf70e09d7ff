package sluice

import (
	"testing"

	"github.com/sluicehq/sluice/internal/algo"
)

// The grant bounds of the API are the math's.
func TestGrantBoundsMatch(t *testing.T) {
	if MaxGrantHolders != algo.MaxHolders || MaxGrantHolderLen != algo.MaxHolderLen {
		t.Fatalf("sluice grants: MaxGrantHolders %d, MaxGrantHolderLen %d; internal/algo: %d, %d", MaxGrantHolders, MaxGrantHolderLen, algo.MaxHolders, algo.MaxHolderLen)
	}
}
