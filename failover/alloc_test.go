package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
)

// With the breaker open a decision allocates nothing, whatever the policy.
func TestOpenBreakerDoesNotAllocate(t *testing.T) {
	f := newFaulty(t)
	f.mode.Store(failing)
	s := mustNew(t, f, failover.WithFailureThreshold(1), failover.WithProbeInterval(time.Hour), failover.WithReplicas(2))
	defer s.Close()
	ctx := context.Background()
	s.AllowN(ctx, "k", perSec, 1)
	for _, m := range []sluice.FailureMode{sluice.FailClosed, sluice.FailOpen, sluice.FailOpenUnbounded} {
		lim := perSec.WithFailureMode(m)
		s.AllowN(ctx, "k", lim, 1)
		if n := testing.AllocsPerRun(1000, func() { s.AllowN(ctx, "k", lim, 1) }); n != 0 {
			t.Errorf("%v with the breaker open allocates %v times per decision, want 0", m, n)
		}
	}
}

// A caller whose deadline comes before the store's timeout (Envoy's 20ms
// against the default 50ms) costs no timer: a healthy decision allocates
// nothing, where one without a deadline allocates the timeout's context.
func TestCallerDeadlineFirstDoesNotAllocate(t *testing.T) {
	f := newFaulty(t)
	s := mustNew(t, f, failover.WithTimeout(50*time.Millisecond))
	defer s.Close()
	caller, cancel := context.WithTimeout(context.Background(), time.Hour/2)
	defer cancel()
	long := mustNew(t, f, failover.WithTimeout(2*time.Hour))
	defer long.Close()
	s.AllowN(caller, "k", perSec, 1)
	if n := testing.AllocsPerRun(1000, func() { long.AllowN(caller, "k", perSec, 1) }); n != 0 {
		t.Errorf("a decision whose caller's deadline (30m) comes before the timeout (2h) allocates %v times, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { s.AllowN(caller, "k", perSec, 1) }); n == 0 {
		t.Errorf("a decision whose timeout (50ms) comes first allocates nothing: no deadline of its own?")
	}
}
