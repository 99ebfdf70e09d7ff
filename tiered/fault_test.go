package tiered_test

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/wait"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/tiered"
)

// TestHungRedis: tiered alone over a redis-server that stops answering
// (SIGSTOP) while it holds leases. Callers are bounded by their own
// contexts; Close, which gives the unspent units back, is bounded by the
// return timeout; no goroutine is left.
func TestHungRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server; skipped with -short")
	}
	srv := redistest.Server(t)
	before := runtime.NumGoroutine()
	c := newRueidis(t, srv.Addr)
	rs := redisstore.NewRueidis(c)
	s := newTiered(t, rs, tiered.WithLeases(100, 0.5, time.Hour), tiered.WithReturnTimeout(200*time.Millisecond))
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1_000_000, Period: time.Hour}
	ctx := context.Background()
	for range 20 { // lease for 10 keys
		for k := range 10 {
			if _, err := s.AllowN(ctx, "hung/"+string(rune('a'+k)), lim, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	srv.Pause()
	defer srv.Resume()
	var admitted, failed, slow, worst atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 24 {
				cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				key := "hung/" + string(rune('a'+(g+i)%12)) // two keys have no lease
				var d sluice.Decision
				var err error
				var early bool // returned before its deadline
				deadline, _ := cctx.Deadline()
				// How late past the deadline, next to a goroutine woken
				// by it: a busy machine delays both.
				took := wait.PastDeadline(cctx, func() {
					d, err = s.AllowN(cctx, key, lim, 1)
					early = time.Now().Before(deadline)
				})
				cancel()
				switch {
				case err != nil:
					failed.Add(1)
					// rueidis makes one connection attempt for all the
					// calls that need one, under the first one's context,
					// and gives its error to each: a call may fail before
					// its own deadline with the timeout of another's.
					var ne net.Error
					if !errors.Is(err, context.DeadlineExceeded) && !(early && errors.As(err, &ne) && ne.Timeout()) {
						t.Errorf("AllowN on a hung server error = %v (before its deadline: %v), want the caller's deadline or, before it, a connection attempt's timeout", err, early)
					}
				case d.Allowed:
					admitted.Add(1)
				}
				// No layer holds a caller past its context, though rueidis
				// re-dials the hung server (about 1s) without it: allow
				// 450ms past the 50ms deadline.
				if took > 450*time.Millisecond {
					slow.Add(1)
				}
				for w := worst.Load(); int64(took) > w && !worst.CompareAndSwap(w, int64(took)); w = worst.Load() {
				}
			}
		}()
	}
	wg.Wait()
	if admitted.Load() == 0 || failed.Load() == 0 || slow.Load() != 0 {
		t.Errorf("admitted %d (from leases), failed %d (no lease, hung server), %d calls over 450ms past their deadline; want some of each and none",
			admitted.Load(), failed.Load(), slow.Load())
	}
	// Close is bounded by the return timeout: measured next to a
	// goroutine woken by a timer of the same length.
	timer, cancelTimer := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelTimer()
	var err error
	start := time.Now()
	past := wait.PastDeadline(timer, func() { err = s.Close() })
	took := time.Since(start)
	if past > 800*time.Millisecond {
		t.Errorf("Close on a hung server took %v, %v past the return timeout (200ms)", took, past)
	}
	st := s.Stats()
	if err == nil || st.ReturnErrors == 0 {
		t.Errorf("Close = %v, stats %+v: want the failed returns reported", err, st)
	}
	t.Logf("hung: %d admitted from leases, %d failed at the caller's deadline (slowest call %v); Close took %v: %v; %+v", admitted.Load(), failed.Load(), time.Duration(worst.Load()), took, err, st)
	srv.Resume()
	rs.Close()
	c.Close()
	deadline := time.Now().Add(3 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		ours := strings.Contains(stacks, "sluice/tiered.(*Store)")
		n := runtime.NumGoroutine()
		if !ours && n <= before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Close: %d goroutines, %d before (tiered code running: %v):\n%s", n, before, ours, stacks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
