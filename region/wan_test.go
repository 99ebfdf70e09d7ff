package region_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// wan is a home store (a memstore) behind a simulated link, for tests in
// a synctest bubble: each call waits half a round trip (with jitter) on
// the way there and on the way back; a cut link fails calls at once, a
// black-holed one holds them until it heals, then delivers them. It
// counts the Grant calls and every unit it granted, by store window.
type wan struct {
	*memstore.Store
	rtt, jitter time.Duration

	mu      sync.Mutex
	rng     *rand.Rand
	state   string // "", "cut" or "hole"
	healed  chan struct{}
	calls   int
	granted map[int64]int // units granted per window start (µs) of the pool
	period  time.Duration
}

func newWAN(home *memstore.Store, rtt, jitter time.Duration, seed uint64) *wan {
	return &wan{Store: home, rtt: rtt, jitter: jitter, rng: rand.New(rand.NewPCG(seed, 1)), healed: make(chan struct{}), granted: map[int64]int{}}
}

// leg waits one way of the link; it fails when the link is cut.
func (w *wan) leg(ctx context.Context) error {
	w.mu.Lock()
	d := w.rtt / 2
	if w.jitter > 0 {
		d += time.Duration(w.rng.Int64N(int64(w.jitter)))
	}
	state, healed := w.state, w.healed
	w.mu.Unlock()
	switch state {
	case "cut":
		return errCut
	case "hole":
		<-healed // delivered at the heal, whatever the caller's context
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// legDeliver waits one way; a request already sent is delivered even
// when the caller gave up (as TCP does).
func (w *wan) legDeliver() {
	w.leg(context.Background())
}

type cutError struct{}

func (cutError) Error() string { return "wan: link cut" }

var errCut = cutError{}

func (w *wan) set(state string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == "hole" && state != "hole" {
		close(w.healed)
		w.healed = make(chan struct{})
	}
	w.state = state
}

func (w *wan) Grant(ctx context.Context, key string, lim sluice.Limit, r sluice.GrantRequest) (sluice.Grant, error) {
	type result struct {
		g   sluice.Grant
		err error
	}
	ch := make(chan result, 1)
	go func() {
		w.mu.Lock()
		cut := w.state == "cut"
		w.mu.Unlock()
		if cut {
			ch <- result{err: errCut}
			return
		}
		w.legDeliver()
		g, err := w.Store.Grant(context.Background(), key, lim, r)
		w.mu.Lock()
		w.calls++
		if err == nil && g.Units > 0 {
			w.granted[g.Window.UnixMicro()] += g.Units
		}
		w.mu.Unlock()
		if err := w.leg(context.Background()); err != nil {
			ch <- result{err: err}
			return
		}
		ch <- result{g, err}
	}()
	select {
	case r := <-ch:
		return r.g, r.err
	case <-ctx.Done():
		return sluice.Grant{}, ctx.Err()
	}
}

func (w *wan) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	if err := w.leg(ctx); err != nil {
		return sluice.Decision{}, err
	}
	d, err := w.Store.AllowN(ctx, key, lim, n)
	if err := w.leg(ctx); err != nil {
		return sluice.Decision{}, err
	}
	return d, err
}

func (w *wan) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	if err := w.leg(ctx); err != nil {
		return err
	}
	err := w.Store.Return(ctx, key, lim, n, at)
	w.leg(ctx)
	return err
}

// stats returns the Grant calls made and the units granted per window.
func (w *wan) stats() (int, map[int64]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := map[int64]int{}
	for k, v := range w.granted {
		g[k] = v
	}
	return w.calls, g
}
