package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/bound"
	"github.com/sluicehq/sluice/internal/testserver/wait"
)

// stuckScripter is a client that never answers until release is closed,
// whatever its context says (rueidis re-dials a hung server for about a
// second so), counting the scripts it was sent.
type stuckScripter struct {
	release chan struct{}
	sent    atomic.Int64
}

func (s *stuckScripter) evalSha(ctx context.Context, sha string, keys, args []string) ([]int64, bool, error) {
	s.sent.Add(1)
	<-s.release
	return nil, false, errors.New("released")
}

func (s *stuckScripter) eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	return nil, errors.New("eval: unexpected")
}
func (s *stuckScripter) isCluster() bool { return false }
func (s *stuckScripter) isRing() bool    { return false }
func (s *stuckScripter) close()          {}

// A deadline given with package bound (failover's, without a timer per
// call) ends every batched caller at that deadline (never before it),
// though its context's Done never closes and the client does not answer:
// those in the batches in flight, and those still pending, which are then
// never sent. (Not in a synctest bubble: the calls come from a pool that
// other tests fill, with channels made outside any bubble.)
func TestBoundDeadline(t *testing.T) {
	sc := &stuckScripter{release: make(chan struct{})}
	s := newStore(sc, nil)
	if !s.EnforcesDeadline() {
		t.Fatal("a batching store does not enforce bound deadlines")
	}
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Second}
	deadline := time.Now().Add(100 * time.Millisecond)
	const callers = 3 * maxRunning
	errs := make([]error, callers)
	returned := make([]time.Time, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			_, err := s.AllowN(bound.With(context.Background(), deadline), fmt.Sprint("k", i), lim, 1)
			errs[i], returned[i] = err, time.Now()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait.Guard):
		close(sc.release)
		t.Fatalf("callers still waiting %v after their deadline, the client not answering", wait.Guard)
	}
	for i := range callers {
		if !errors.Is(errs[i], context.DeadlineExceeded) || returned[i].Before(deadline) {
			t.Errorf("caller %d: %v, %v after the deadline; want DeadlineExceeded, not before it", i, errs[i], returned[i].Sub(deadline))
		}
	}
	sent := sc.sent.Load()
	close(sc.release)
	b := s.batch
	wait.Until(t, "the runners to end", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.running == 0
	})
	if later := sc.sent.Load(); later != sent || sent > maxRunning {
		t.Errorf("%d scripts sent before the deadline and %d after; want at most %d (the runners), none after", sent, later-sent, maxRunning)
	}
}

// A context's own deadline, earlier than the bound one, is the one
// Deadline reports; Of reports the bound one only.
func TestBoundContext(t *testing.T) {
	now := time.Now()
	parent, cancel := context.WithDeadline(context.Background(), now.Add(time.Second))
	defer cancel()
	ctx := bound.With(parent, now.Add(2*time.Second))
	if d, ok := ctx.Deadline(); !ok || !d.Equal(now.Add(time.Second)) {
		t.Errorf("Deadline = %v, %v; want the parent's, earlier", d, ok)
	}
	if d, ok := bound.Of(ctx); !ok || !d.Equal(now.Add(2*time.Second)) {
		t.Errorf("Of = %v, %v; want the bound deadline", d, ok)
	}
	if _, ok := bound.Of(parent); ok {
		t.Error("Of(a context without a bound deadline) reports one")
	}
	if ctx.Done() != parent.Done() {
		t.Error("a bound context's Done is not its parent's")
	}
}
