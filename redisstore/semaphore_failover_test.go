package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/wait"
	"github.com/sluicehq/sluice/redisstore"
)

// maxInto raises m to n when n is larger.
func maxInto(m *atomic.Int64, n int64) {
	for o := m.Load(); n > o && !m.CompareAndSwap(o, n); o = m.Load() {
	}
}

// TestSemaphoreFailoverFaults runs acquire/hold/release load through
// failover over redisstore, one key failing closed and one failing open
// (2 replicas: a local share of Max/2), while the server is killed and
// restarted, paused (SIGSTOP) and resumed, or restarted. It checks that
// FailClosed never admits without Redis, FailOpen admits at most its local
// share, a paused server (which keeps its data) is never held beyond Max,
// Redis is used again after the repair, and, once the load stops and one
// lease has passed, that no permit is counted twice: each key holds
// nothing, and Max acquires through failover succeed with Held 1 to Max,
// the ZSET holding exactly them.
func TestSemaphoreFailoverFaults(t *testing.T) {
	srv := redistest.Server(t)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rs := redisstore.NewRueidis(rc)
	lim := sluice.ConcurrencyLimit{Max: 4, TTL: 700 * time.Millisecond}
	const replicas, perPolicy = 2, 6
	localShare := int64(max(lim.Max/replicas, 1))
	policies := []sluice.FailureMode{sluice.FailClosed, sluice.FailOpen}
	fos := map[sluice.FailureMode]*failover.Store{}
	for _, m := range policies {
		// A generous timeout: a busy machine's call is slow, not failed;
		// the paused server's calls fail by it.
		fs, err := failover.New(rs, failover.WithTimeout(500*time.Millisecond), failover.WithProbeInterval(50*time.Millisecond),
			failover.WithFailureThreshold(3), failover.WithDefaultMode(m), failover.WithReplicas(replicas))
		if err != nil {
			t.Fatal(err)
		}
		defer fs.Close()
		fos[m] = fs
	}
	prefix := fmt.Sprintf("semfo%d:", rand.Uint32())

	for _, fault := range []struct {
		name           string
		inject, repair func()
		keepsData      bool
	}{
		{"kill+restart", srv.Kill, srv.Restart, false},
		{"sigstop", srv.Pause, srv.Resume, true},
		{"restart", srv.Restart, func() {}, false},
	} {
		t.Run(fault.name, func(t *testing.T) {
			type counts struct {
				shared, local, mostShared, mostLocal             atomic.Int64
				acquired, degradedAcq, denied, degradedDen, errs atomic.Int64
				sharedAfter                                      atomic.Int64 // shared acquires after the repair
			}
			cs := map[sluice.FailureMode]*counts{}
			stop := make(chan struct{})
			var repaired atomic.Bool
			var wg sync.WaitGroup
			for _, m := range policies {
				c := &counts{}
				cs[m] = c
				fs, key := fos[m], prefix+fault.name+"/"+m.String()
				for range perPolicy {
					wg.Go(func() {
						release := func(h string) { releaseUntilAnswered(fs, key, h) }
						for {
							select {
							case <-stop:
								return
							default:
							}
							h := sluice.NewHolder()
							d, err := fs.Acquire(context.Background(), key, lim, h)
							switch {
							case err != nil:
								c.errs.Add(1)
								t.Errorf("%s: Acquire: %v (failover decides, it does not fail)", m, err)
								return
							case d.Acquired && d.Degraded:
								c.degradedAcq.Add(1)
								maxInto(&c.mostLocal, c.local.Add(1))
								time.Sleep(rand.N(5 * time.Millisecond))
								c.local.Add(-1)
								release(h)
							case d.Acquired:
								c.acquired.Add(1)
								if repaired.Load() {
									c.sharedAfter.Add(1)
								}
								maxInto(&c.mostShared, c.shared.Add(1))
								time.Sleep(rand.N(5 * time.Millisecond))
								c.shared.Add(-1)
								release(h)
							case d.Degraded:
								c.degradedDen.Add(1)
								time.Sleep(rand.N(2 * time.Millisecond))
							default:
								c.denied.Add(1)
								time.Sleep(rand.N(2 * time.Millisecond))
							}
						}
					})
				}
			}
			// Each phase lasts until every policy's load has seen it,
			// however long a busy machine takes.
			const enough = perPolicy
			every := func(f func(c *counts) bool) func() bool {
				return func() bool {
					for _, c := range cs {
						if !f(c) {
							return false
						}
					}
					return true
				}
			}
			wait.Until(t, "acquires from Redis before the fault", every(func(c *counts) bool { return c.acquired.Load() >= enough }))
			fault.inject()
			wait.Until(t, "degraded decisions during the fault", every(func(c *counts) bool { return c.degradedAcq.Load()+c.degradedDen.Load() >= enough }))
			fault.repair()
			repaired.Store(true)
			wait.Until(t, "acquires from Redis after the repair", every(func(c *counts) bool { return c.sharedAfter.Load() >= enough }))
			close(stop)
			wg.Wait()

			for _, m := range policies {
				c := cs[m]
				t.Logf("%s: %d acquired from Redis (%d after the repair), %d denied; degraded: %d acquired, %d denied; at most %d held at once from Redis, %d locally",
					m, c.acquired.Load(), c.sharedAfter.Load(), c.denied.Load(), c.degradedAcq.Load(), c.degradedDen.Load(), c.mostShared.Load(), c.mostLocal.Load())
				if c.degradedAcq.Load()+c.degradedDen.Load() == 0 {
					t.Errorf("%s: no degraded decision: the fault was not seen", m)
				}
				if c.sharedAfter.Load() == 0 {
					t.Errorf("%s: Redis not used again after the repair", m)
				}
				if m == sluice.FailClosed && c.degradedAcq.Load() != 0 {
					t.Errorf("FailClosed admitted %d without Redis, want 0", c.degradedAcq.Load())
				}
				if c.mostLocal.Load() > localShare {
					t.Errorf("%s: %d held locally at once, want <= the local share %d", m, c.mostLocal.Load(), localShare)
				}
				if fault.keepsData && c.mostShared.Load() > int64(lim.Max) {
					t.Errorf("%s: %d held at once from Redis, want <= Max %d (the server kept its data)", m, c.mostShared.Load(), lim.Max)
				}
			}

			// A lost reply's permit frees within one lease; then every
			// slot is free, and counted once. The check acquires hold
			// for a minute, so that a busy machine's slow calls cannot
			// see an earlier check's permit end, and go to Redis
			// directly: it holds the count.
			time.Sleep(lim.TTL)
			ctx := context.Background()
			check := sluice.ConcurrencyLimit{Max: lim.Max, TTL: time.Minute}
			for _, m := range policies {
				key := prefix + fault.name + "/" + m.String()
				name := rs.SemKey(key)
				if n := srv.MustDo("ZCARD", name); n != "0" {
					t.Fatalf("%s: ZCARD %s one lease after every release, want 0", m, n)
				}
				var hs []string
				for i := range lim.Max + 2 {
					h := "check-" + strconv.Itoa(i)
					d, err := rs.Acquire(ctx, key, check, h)
					if err != nil {
						t.Fatal(err)
					}
					wantAcq, wantHeld := i < lim.Max, min(i+1, lim.Max)
					if d.Acquired != wantAcq || d.Held != wantHeld {
						t.Fatalf("%s: check acquire %d = %+v, want acquired %v, held %d", m, i, d, wantAcq, wantHeld)
					}
					if d.Acquired {
						hs = append(hs, h)
					}
				}
				if n := srv.MustDo("ZCARD", name); n != strconv.Itoa(lim.Max) {
					t.Fatalf("%s: ZCARD %s with %d held, want %d", m, n, lim.Max, lim.Max)
				}
				for _, h := range hs {
					if err := rs.Release(ctx, key, h); err != nil {
						t.Fatal(err)
					}
				}
				if n := srv.MustDo("EXISTS", name); n != "0" {
					t.Fatalf("%s: EXISTS %s after releasing all = %s, want 0", m, name, n)
				}
			}
		})
	}
}
