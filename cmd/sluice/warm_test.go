package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/region"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
)

// gatedHome is a home store whose grants wait for gate, or fail with err
// once it is closed when err is set.
type gatedHome struct {
	*memstore.Store
	gate chan struct{}
	err  error
}

func (h *gatedHome) Grant(ctx context.Context, key string, lim sluice.Limit, r sluice.GrantRequest) (sluice.Grant, error) {
	select {
	case <-h.gate:
	case <-ctx.Done():
		return sluice.Grant{}, ctx.Err()
	}
	if h.err != nil {
		return sluice.Grant{}, h.err
	}
	return h.Store.Grant(ctx, key, lim, r)
}

const warmConfig = `domain: w
descriptors:
  - key: plan
    value: gold
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: plan
    value: free
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
`

// newTestWarmer is a warmer of warmConfig over a region store of home,
// logging to log; the store is closed when the test ends.
func newTestWarmer(t *testing.T, home sluice.Store, log io.Writer) (*warmer, *engine.Engine) {
	t.Helper()
	rs, err := region.New(home, "eu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	cfg, err := config.Parse("w.yaml", []byte(warmConfig))
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(rs, cfg)
	return newWarmer(rs, eng, 10*time.Second, slog.New(slog.NewTextHandler(log, nil))), eng
}

// The warmer keeps /readyz at 503, naming what it does, until its first
// pass is over; the counters of fixed values are then granted their
// first units at the home store. A home store that fails ends the pass
// (ready, the failure logged) rather than keeping the process unready.
func TestWarmerReadiness(t *testing.T) {
	for _, fail := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			mem := memstore.New()
			defer mem.Close()
			home := &gatedHome{Store: mem, gate: make(chan struct{})}
			if fail {
				home.err = errors.New("connection refused")
			}
			var logs strings.Builder
			w, _ := newTestWarmer(t, home, &logs)
			defer w.close()
			w.kick()
			synctest.Wait()
			if ok, why := w.ready(); ok || why != "warming the configuration's 2 counters of fixed values at the home store (--region)" {
				t.Fatalf("ready while warming = %v %q, want false naming the 2 counters", ok, why)
			}
			close(home.gate)
			synctest.Wait()
			if ok, why := w.ready(); !ok {
				t.Fatalf("ready after the pass = false %q, want true", why)
			}
			for _, v := range []struct {
				key  string
				rate int
			}{{"w/plan=gold", 50}, {"w/plan=free", 10}} {
				lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: v.rate, Period: time.Hour}
				d, err := mem.AllowN(context.Background(), v.key, lim, 0)
				want := v.rate - v.rate/10
				if fail {
					want = v.rate
				}
				if err != nil || d.Remaining != want {
					t.Errorf("fail %v: the home store's %s after the pass: %+v, %v; want %d left", fail, v.key, d, err, want)
				}
			}
			if got := strings.Contains(logs.String(), "not every counter of the configuration was warmed"); got != fail {
				t.Errorf("fail %v: the log %q; want the failure said: %v", fail, logs.String(), fail)
			}
		})
	}
}

// A configuration put in force is warmed too: its new counters are
// granted their first units at the home store, /readyz staying ready.
func TestWarmerReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		defer mem.Close()
		w, eng := newTestWarmer(t, mem, io.Discard)
		defer w.close()
		w.kick()
		synctest.Wait()
		next, err := config.Parse("w.yaml", []byte(warmConfig+"  - key: plan\n    value: team\n    rate_limit: {unit: hour, requests_per_unit: 30}\n"))
		if err != nil {
			t.Fatal(err)
		}
		eng.SetConfig(next)
		w.kick()
		if ok, why := w.ready(); !ok {
			t.Errorf("ready while a reload is warmed = false %q, want true (only the first pass holds it)", why)
		}
		synctest.Wait()
		lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 30, Period: time.Hour}
		if d, err := mem.AllowN(context.Background(), "w/plan=team", lim, 0); err != nil || d.Remaining != 27 {
			t.Errorf("the new counter at the home store after the reload: %+v, %v; want 27 of 30 left (3 granted)", d, err)
		}
	})
}
