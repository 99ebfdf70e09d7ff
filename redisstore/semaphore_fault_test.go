package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/wait"
	"github.com/sluicehq/sluice/redisstore"
)

// TestSemaphoreFaults runs acquire/hold/release load on one key through
// rueidis and go-redis while the server is killed and restarted, paused
// (SIGSTOP) and resumed, or restarted, and checks after each recovery that
// no permit is counted twice: once the load stops and one lease has passed
// (a permit whose acquire reply was lost stays taken for one lease at
// most), the key holds nothing, and Max acquires then succeed with Held 1
// to Max, the ZSET holding exactly them.
func TestSemaphoreFaults(t *testing.T) {
	srv := redistest.Server(t)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	gc := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer gc.Close()
	stores := []*redisstore.Store{redisstore.NewRueidis(rc), redisstore.NewGoRedis(gc)}
	lim := sluice.ConcurrencyLimit{Max: 4, TTL: 700 * time.Millisecond}
	const workers = 12
	key := fmt.Sprintf("semfault%d", rand.Uint32())
	name := "sluice:{" + key + "}c"

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
			var believed, mostBelieved atomic.Int64 // goroutines that hold, by their replies
			var acquired, denied, failed atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w := range workers {
				s := stores[w%2]
				wg.Go(func() {
					release := func(h string) { releaseUntilAnswered(s, key, h) }
					for {
						select {
						case <-stop:
							return
						default:
						}
						h := sluice.NewHolder()
						// A generous deadline: a busy machine's call is
						// slow, not failed; the paused server's calls
						// fail by it.
						ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
						d, err := s.Acquire(ctx, key, lim, h)
						cancel()
						switch {
						case err != nil:
							// Not retried: it may have taken a permit,
							// which its release frees.
							failed.Add(1)
							release(h)
							time.Sleep(5 * time.Millisecond)
						case d.Acquired:
							acquired.Add(1)
							n := believed.Add(1)
							for m := mostBelieved.Load(); n > m && !mostBelieved.CompareAndSwap(m, n); m = mostBelieved.Load() {
							}
							time.Sleep(rand.N(5 * time.Millisecond))
							believed.Add(-1)
							release(h)
						default:
							denied.Add(1)
							time.Sleep(rand.N(2 * time.Millisecond))
						}
					}
				})
			}
			// Each phase lasts until the load has seen it, however
			// long a busy machine takes.
			wait.Until(t, "acquires before the fault", func() bool { return acquired.Load() >= workers })
			failedBefore := failed.Load()
			fault.inject()
			// A worker whose call failed releases until answered: until
			// the repair.
			wait.Until(t, "a failed call during the fault", func() bool { return failed.Load() > failedBefore })
			fault.repair()
			acquiredBefore := acquired.Load()
			wait.Until(t, "acquires after the repair", func() bool { return acquired.Load() >= acquiredBefore+workers })
			close(stop)
			wg.Wait()
			right := srv.MustDo("ZCARD", name)
			t.Logf("%d acquired, %d denied, %d failed calls; at most %d held at once by the callers' count; %s left in the ZSET at once after the load",
				acquired.Load(), denied.Load(), failed.Load(), mostBelieved.Load(), right)
			if acquired.Load() == 0 || failed.Load() == 0 {
				t.Fatalf("acquired %d, failed %d: want load on both sides of the fault", acquired.Load(), failed.Load())
			}
			if fault.keepsData && mostBelieved.Load() > int64(lim.Max) {
				t.Errorf("%d held at once by the callers' count, want <= Max %d (the server kept its data)", mostBelieved.Load(), lim.Max)
			}
			if n, _ := strconv.Atoi(right); n > lim.Max {
				t.Errorf("ZCARD %d after the load, want <= Max %d", n, lim.Max)
			}
			// A lost reply's permit frees within one lease.
			time.Sleep(lim.TTL)
			if n := srv.MustDo("ZCARD", name); n != "0" {
				t.Fatalf("ZCARD %s one lease after every release, want 0", n)
			}
			// The check acquires hold for a minute, so that a busy
			// machine's slow calls (a client redialling the restarted
			// server) cannot see an earlier check's permit end.
			ctx := context.Background()
			check := sluice.ConcurrencyLimit{Max: lim.Max, Lease: time.Minute}
			var hs []string
			for i := range lim.Max + 2 {
				h := "check-" + strconv.Itoa(i)
				d, err := stores[i%2].Acquire(ctx, key, check, h)
				if err != nil {
					t.Fatal(err)
				}
				wantAcq, wantHeld := i < lim.Max, min(i+1, lim.Max)
				if d.Acquired != wantAcq || d.Held != wantHeld {
					t.Fatalf("check acquire %d = %+v, want acquired %v, held %d", i, d, wantAcq, wantHeld)
				}
				if d.Acquired {
					hs = append(hs, h)
				}
			}
			if n := srv.MustDo("ZCARD", name); n != strconv.Itoa(lim.Max) {
				t.Fatalf("ZCARD %s with %d held, want %d", n, lim.Max, lim.Max)
			}
			for _, h := range hs {
				if err := stores[0].Release(ctx, key, h); err != nil {
					t.Fatal(err)
				}
			}
			if n := srv.MustDo("EXISTS", name); n != "0" {
				t.Fatalf("EXISTS %s after releasing all = %s, want 0", name, n)
			}
		})
	}
}

// TestSemaphoreRestartForgets: a server restarted without persistence
// forgets its permits, and their holders learn it from Extend.
func TestSemaphoreRestartForgets(t *testing.T) {
	srv := redistest.Server(t)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	s := redisstore.NewRueidis(rc)
	ctx := context.Background()
	lim := sluice.ConcurrencyLimit{Max: 1, TTL: time.Minute}
	if d, err := s.Acquire(ctx, "k", lim, "a"); err != nil || !d.Acquired {
		t.Fatal(d, err)
	}
	srv.Restart()
	var d sluice.PermitDecision
	for range 50 { // the client reconnects
		if d, err = s.Extend(ctx, "k", lim, "a"); errors.Is(err, sluice.ErrPermitLost) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !errors.Is(err, sluice.ErrPermitLost) || d.Acquired || d.Held != 0 {
		t.Fatalf("Extend after a restart = %+v, %v; want ErrPermitLost, held 0", d, err)
	}
}

// releaseUntilAnswered gives holder's permit of key back, retrying until
// the store answers: a Release is safe to repeat.
func releaseUntilAnswered(s sluice.Semaphore, key, holder string) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := s.Release(ctx, key, holder)
		cancel()
		if err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
