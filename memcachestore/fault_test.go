package memcachestore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/testserver/memcachedtest"
	"github.com/sluicehq/sluice/memcachestore"
)

// The fault tests put the store under failover, as the service does,
// keep a load of decisions running, break memcached (killed, paused,
// restarted), and check what the failure policy holds to: no call
// returns an error, every degraded decision of a limit that fails closed
// denies, one that fails open admits at most Rate/Replicas per window
// locally, the degraded count is the number of degraded decisions, and
// the store decides again once memcached is back. They wait for events
// (a number of degraded decisions, the breaker closing), never for a
// time to pass.

// faultLimit is 400 per second in fixed windows: failing open, each of
// the 4 replicas admits at most 100 per window.
var faultLimit = sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 400, Period: time.Second}

const faultReplicas = 4

type faultRec struct {
	at       time.Time
	key      string
	mode     sluice.FailureMode
	allowed  bool
	degraded bool
	err      error
}

type faultRig struct {
	t   *testing.T
	m   *memcachedtest.Instance
	fs  *failover.Store
	mu  sync.Mutex
	rec []faultRec
}

func newFaultRig(t *testing.T, opts ...failover.Option) *faultRig {
	m := memcachedtest.Server(t)
	s := open(t, memcachestore.Options{}, m.Addr)
	opts = append([]failover.Option{failover.WithTimeout(50 * time.Millisecond), failover.WithReplicas(faultReplicas),
		failover.WithProbeInterval(10 * time.Millisecond)}, opts...)
	fs, err := failover.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	return &faultRig{t: t, m: m, fs: fs}
}

// decide makes one decision and records it.
func (r *faultRig) decide(key string, mode sluice.FailureMode) faultRec {
	d, err := r.fs.AllowN(context.Background(), key, faultLimit.WithFailureMode(mode), 1)
	rec := faultRec{at: time.Now(), key: key, mode: mode, allowed: d.Allowed, degraded: d.Degraded, err: err}
	r.mu.Lock()
	r.rec = append(r.rec, rec)
	r.mu.Unlock()
	return rec
}

// load runs goroutines deciding until stop is closed, on keys of both
// failure modes.
func (r *faultRig) load(stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range 4 {
		mode := sluice.FailClosed
		if w%2 == 1 {
			mode = sluice.FailOpen
		}
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r.decide(fmt.Sprintf("load-%v-%d", mode, i%8), mode)
				time.Sleep(200 * time.Microsecond)
			}
		})
	}
	return &wg
}

// untilDegraded decides until n degraded decisions of each mode were made
// by the test's own calls.
func (r *faultRig) untilDegraded(n int) {
	r.t.Helper()
	got := map[sluice.FailureMode]int{}
	for i := 0; got[sluice.FailClosed] < n || got[sluice.FailOpen] < n; i++ {
		for _, mode := range []sluice.FailureMode{sluice.FailClosed, sluice.FailOpen} {
			if rec := r.decide(fmt.Sprintf("probe-%v", mode), mode); rec.degraded {
				got[mode]++
			}
		}
	}
}

// untilShared decides until a decision is made by memcached again.
func (r *faultRig) untilShared() {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second) // only a broken store takes this long
	for time.Now().Before(deadline) {
		if rec := r.decide("probe-back", sluice.FailClosed); !rec.degraded && rec.err == nil {
			return
		}
		time.Sleep(time.Millisecond)
	}
	r.t.Fatalf("no decision by memcached within 30s of it answering again (breaker open: %v)", !r.fs.Ready())
}

// check holds the recorded decisions to the failure policy.
func (r *faultRig) check() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	degraded := 0
	openAdmitted := map[string]int{} // key and window
	for _, rec := range r.rec {
		if rec.err != nil {
			r.t.Errorf("a decision returned an error: %v (failover decides by the failure mode instead)", rec.err)
			continue
		}
		if !rec.degraded {
			continue
		}
		degraded++
		switch rec.mode {
		case sluice.FailClosed:
			if rec.allowed {
				r.t.Errorf("a degraded decision of a limit failing closed admitted (%s at %v)", rec.key, rec.at)
			}
		case sluice.FailOpen:
			if rec.allowed {
				openAdmitted[fmt.Sprintf("%s@%d", rec.key, rec.at.Unix())]++
			}
		}
	}
	if degraded == 0 {
		r.t.Error("no degraded decision: the fault was not seen")
	}
	// The local limiter is a fixed window of Rate/Replicas per second;
	// the recorded time follows the decision, so a window's admissions
	// may be recorded a moment into the next second: bound two windows.
	for k, n := range openAdmitted {
		if n > 2*faultLimit.Rate/faultReplicas {
			r.t.Errorf("%d degraded admissions failing open on %s, want at most %d per window", n, k, faultLimit.Rate/faultReplicas)
		}
	}
	if st := r.fs.Stats(); st.Degraded != int64(degraded) {
		r.t.Errorf("failover counted %d degraded decisions, the calls saw %d", st.Degraded, degraded)
	}
}

func TestFaults(t *testing.T) {
	for _, tt := range []struct {
		name    string
		inject  func(m *memcachedtest.Instance)
		restore func(m *memcachedtest.Instance)
	}{
		{"Killed", (*memcachedtest.Instance).Kill, (*memcachedtest.Instance).Start},
		{"Paused", (*memcachedtest.Instance).Pause, (*memcachedtest.Instance).Resume},
		{"Restarted", func(*memcachedtest.Instance) {}, (*memcachedtest.Instance).Restart},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newFaultRig(t)
			stop := make(chan struct{})
			wg := r.load(stop)
			var once sync.Once
			halt := func() { once.Do(func() { close(stop); wg.Wait() }) }
			t.Cleanup(halt)
			r.untilShared()
			tt.inject(r.m)
			if tt.name != "Restarted" { // a restart may be too quick to see
				r.untilDegraded(20)
			}
			tt.restore(r.m)
			r.untilShared()
			halt()
			if tt.name != "Restarted" {
				r.check()
				return
			}
			for _, rec := range r.rec {
				if rec.err != nil {
					t.Errorf("a decision returned an error: %v", rec.err)
				}
			}
		})
	}
}

// TestRestartNoError: after memcached restarts, the connections kept idle
// are closed by the server; the first command of a call on one is sent
// again on a new connection, so that no call fails for it, whatever it
// sends first (gets, get, incr, decr, delete).
func TestRestartNoError(t *testing.T) {
	m := memcachedtest.Server(t)
	s := open(t, memcachestore.Options{MaxIdleConns: 4}, m.Addr)
	lims := []sluice.Limit{
		{Algorithm: sluice.GCRA, Rate: 10, Period: time.Hour},
		{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour, Counting: sluice.CountAll},
	}
	for _, n := range []int{1, 0} {
		for _, lim := range lims {
			// Fill the idle list with connections, then restart.
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() { allow(t, s, "k", lim, 1) })
			}
			wg.Wait()
			m.Restart()
			d, err := s.AllowN(ctx, "k", lim, n)
			if err != nil {
				t.Fatalf("AllowN(%v, %d) after a restart: %v", lim, n, err)
			}
			if d.Remaining != 10-n {
				t.Errorf("AllowN(%v, %d) after a restart = %+v, want Remaining %d (memcached starts empty)", lim, n, d, 10-n)
			}
			if err := s.Ping(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	m.Restart()
	if err := s.Return(ctx, "k", lims[1], 1, time.Time{}); err != nil {
		t.Errorf("Return after a restart: %v", err)
	}
	m.Restart()
	if err := s.Reset(ctx, "k", lims[0]); err != nil {
		t.Errorf("Reset after a restart: %v", err)
	}
}

// TestPausedNoReplay: a charge whose reply never came is not sent again:
// the count is at most the charges made, however the paused server
// treats the command it had received.
func TestPausedNoReplay(t *testing.T) {
	m := memcachedtest.Server(t)
	// A clock that stands still: the three charges count in one window.
	now := time.Now()
	s := open(t, memcachestore.Options{Clock: func() time.Time { return now }}, m.Addr)
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour, Counting: sluice.CountAll}
	allow(t, s, "k", lim, 1)
	m.Pause()
	c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := s.AllowN(c, "k", lim, 1)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AllowN on a paused server = %v, want context.DeadlineExceeded", err)
	}
	m.Resume()
	d := allow(t, s, "k", lim, 1)
	if used := 10 - d.Remaining; used < 2 || used > 3 {
		t.Errorf("after 3 charges of 1, one of them timed out: %d counted, want 2 or 3, never more", used)
	}
}

// TestCancelled: a call on a paused server returns when its context is
// cancelled, with the context's error, long before Timeout.
func TestCancelled(t *testing.T) {
	m := memcachedtest.Server(t)
	s := open(t, memcachestore.Options{Timeout: time.Minute}, m.Addr)
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Hour}
	allow(t, s, "k", lim, 1)
	m.Pause()
	defer m.Resume()
	c, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.AllowN(c, "k", lim, 1)
		done <- err
	}()
	// Cancel once the call waits on the server: its connection is the
	// only one in use (nothing else runs).
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("AllowN cancelled on a paused server = %v, want context.Canceled", err)
	}
}
