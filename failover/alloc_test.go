package failover_test

import (
	"context"
	"sync"
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

// enforcing is a shared store that keeps a deadline given with package
// bound itself (as redisstore does when batching), recording the context
// of each decision.
type enforcing struct {
	*faulty
	mu  sync.Mutex
	ctx context.Context
}

func (e *enforcing) EnforcesDeadline() bool { return true }

func (e *enforcing) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	e.mu.Lock()
	e.ctx = ctx
	e.mu.Unlock()
	return e.faulty.AllowN(ctx, key, lim, n)
}

// A shared store that enforces deadlines itself is given failover's
// timeout as a deadline of a context that shares the caller's Done, with
// no timer and no allocation of failover's own; a caller's earlier
// deadline is passed as it is.
func TestEnforcedDeadlineDoesNotAllocate(t *testing.T) {
	e := &enforcing{faulty: newFaulty(t)}
	// Long deadlines: a decision under one that has passed when the call
	// starts (a starved test) never reaches the store.
	const timeout = time.Minute
	s := mustNew(t, e, failover.WithTimeout(timeout))
	defer s.Close()
	caller, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := time.Now()
	if _, err := s.AllowN(caller, "k", perSec, 1); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	e.mu.Lock()
	got := e.ctx
	e.mu.Unlock()
	d, ok := got.Deadline()
	if !ok || d.Before(before.Add(timeout)) || d.After(after.Add(timeout)) {
		t.Errorf("the shared store's deadline %v (%v), want %v after the call", d, ok, timeout)
	}
	if got.Done() != caller.Done() {
		t.Error("the shared store's context has a Done of its own: a cancellable context per call")
	}
	short, cancel2 := context.WithTimeout(caller, timeout/2)
	defer cancel2()
	s.AllowN(short, "k", perSec, 1)
	e.mu.Lock()
	got = e.ctx
	e.mu.Unlock()
	if got != short {
		t.Error("a caller's deadline before the timeout: the shared store got another context")
	}
	plain := mustNew(t, newFaulty(t), failover.WithTimeout(50*time.Millisecond))
	defer plain.Close()
	base := testing.AllocsPerRun(1000, func() { plain.AllowN(caller, "k", perSec, 1) })
	enforced := testing.AllocsPerRun(1000, func() { s.AllowN(caller, "k", perSec, 1) })
	if enforced > base-3 {
		t.Errorf("a decision allocates %v times through a store enforcing deadlines, %v through one that does not; want 3 or more fewer (the timeout's context)", enforced, base)
	}
	t.Logf("allocations per decision: %v with a timeout context, %v with a bound deadline", base, enforced)
}
