package remotestore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/remotestore"
)

// TestRedis: each capability through a store API over a real
// redis-server, as a region reaches a home sluice: AllowN, AllowMulti
// (all or nothing), Reserve and Return, Reset, Acquire, Extend and
// Release, on the Redis scripts and back. Periods of 100 hours and TTLs of
// an hour keep every answer independent of the time the calls take; the
// conformance suite's exact tables run over the memory store
// (TestConformance), Redis keeping its own time.
func TestRedis(t *testing.T) {
	srv := redistest.Server(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	rs := dial(t, serve(t, redisstore.NewRueidis(c)))
	caps, err := rs.Capabilities(ctx)
	if err != nil || caps != (remotestore.Capabilities{Multi: true, Reserve: true, Reset: true, Semaphore: true, Grant: true}) {
		t.Fatalf("Capabilities = %+v, %v; want all", caps, err)
	}
	slow := sluice.Limit{Algorithm: sluice.GCRA, Rate: 3, Period: 100 * time.Hour}
	log := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 2, Period: 100 * time.Hour}

	// AllowMulti: all or nothing.
	for i := range 3 {
		ds, err := rs.AllowMulti(ctx, []sluice.Request{{Key: "a", Limit: slow, N: 1}, {Key: "b", Limit: log, N: 1}})
		want := i < 2 // b admits 2
		if err != nil || len(ds) != 2 || ds[0].Allowed != want || ds[1].Allowed != want {
			t.Fatalf("AllowMulti %d = %+v, %v; want admitted %v", i, ds, err, want)
		}
	}
	if d, err := rs.AllowN(ctx, "a", slow, 0); err != nil || d.Remaining != 1 {
		t.Fatalf("peek of a after 2 admitted, 1 refused = %+v, %v; want 1 remaining (the refused one counted nowhere)", d, err)
	}

	// Reserve and Return.
	d, at, err := rs.Reserve(ctx, "r", slow, 2)
	if err != nil || !d.Allowed || d.Remaining != 1 || at.IsZero() {
		t.Fatalf("Reserve 2 = %+v at %v, %v", d, at, err)
	}
	if err := rs.Return(ctx, "r", slow, 2, at); err != nil {
		t.Fatalf("Return: %v", err)
	}
	if d, err := rs.AllowN(ctx, "r", slow, 3); err != nil || !d.Allowed {
		t.Fatalf("AllowN 3 after the return = %+v, %v; want admitted", d, err)
	}

	// Reset.
	if err := rs.Reset(ctx, "r", slow); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if d, err := rs.AllowN(ctx, "r", slow, 0); err != nil || d.Remaining != 3 {
		t.Fatalf("peek after Reset = %+v, %v; want 3 remaining", d, err)
	}

	// Permits.
	one := sluice.ConcurrencyLimit{Max: 1, TTL: time.Hour}
	if p, err := rs.Acquire(ctx, "p", one, "h1"); err != nil || !p.Acquired {
		t.Fatalf("Acquire h1 = %+v, %v", p, err)
	}
	if p, err := rs.Acquire(ctx, "p", one, "h2"); err != nil || p.Acquired || p.RetryAfter <= 0 {
		t.Fatalf("Acquire h2 with h1 held = %+v, %v; want denied with a RetryAfter", p, err)
	}
	if p, err := rs.Extend(ctx, "p", one, "h1"); err != nil || !p.Acquired {
		t.Fatalf("Extend h1 = %+v, %v", p, err)
	}
	if p, err := rs.Extend(ctx, "p", one, "h2"); !errors.Is(err, sluice.ErrPermitLost) || p.Acquired {
		t.Fatalf("Extend of h2, never held = %+v, %v; want ErrPermitLost", p, err)
	}
	if err := rs.Release(ctx, "p", "h1"); err != nil {
		t.Fatalf("Release h1: %v", err)
	}
	if p, err := rs.Acquire(ctx, "p", one, "h2"); err != nil || !p.Acquired {
		t.Fatalf("Acquire h2 after the release = %+v, %v", p, err)
	}
}
