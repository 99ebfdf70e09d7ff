package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/failover"
)

// With the breaker open a decision allocates nothing, whatever the policy.
func TestOpenBreakerDoesNotAllocate(t *testing.T) {
	f := newFaulty(t)
	f.mode.Store(failing)
	s := failover.New(f, failover.WithFailureThreshold(1), failover.WithProbeInterval(time.Hour), failover.WithReplicas(2))
	defer s.Close()
	ctx := context.Background()
	s.AllowN(ctx, "k", perSec, 1)
	for _, p := range []failover.Policy{failover.FailClosed, failover.FailOpen, failover.FailOpenUnbounded} {
		pctx := failover.WithPolicy(ctx, p)
		s.AllowN(pctx, "k", perSec, 1)
		if n := testing.AllocsPerRun(1000, func() { s.AllowN(pctx, "k", perSec, 1) }); n != 0 {
			t.Errorf("%v with the breaker open allocates %v times per decision, want 0", p, n)
		}
	}
}
