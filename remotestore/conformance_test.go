package remotestore_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestConformance runs the conformance suite against a Store reaching an
// in-process store API over loopback TCP, over a memory store; the cases
// on a fake clock set the served store's clock, so that every Decision,
// reservation time and permit expiry crosses the wire and is checked to
// the microsecond.
func TestConformance(t *testing.T) {
	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		return dial(t, serve(t, newMem(t)))
	}, sluicetest.WithClock(func(t *testing.T, c *sluicetest.Clock) sluice.Store {
		return dial(t, serve(t, newMem(t, memstore.WithClock(c.Now))))
	}))
}
