package failover_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
)

func TestStartOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := newFaulty(t, memstore.WithSweepInterval(0))
		f.mode.Store(failing)
		obs := &counting{}
		s := mustNew(t, f, failover.WithStartOpen(nil), failover.WithProbeInterval(100*time.Millisecond), failover.WithObserver(obs))
		defer s.Close()
		if s.Ready() {
			t.Fatal("Ready() = true at start with WithStartOpen")
		}
		if d, err := s.AllowN(ctx, "k", perSec, 1); err != nil || d.Allowed {
			t.Fatalf("AllowN with the breaker open at start = %+v, %v; want a fail-closed denial", d, err)
		}
		if st := s.Stats(); st.SharedCalls != 0 || !st.Open || st.BreakerOpens != 1 {
			t.Errorf("Stats() = %+v, want no shared call, open, one open", st)
		}
		if obs.opened != 1 {
			t.Errorf("observer saw %d opens, want 1", obs.opened)
		}
		f.mode.Store(healthy)
		time.Sleep(150 * time.Millisecond) // one probe
		synctest.Wait()
		if !s.Ready() {
			t.Fatal("breaker still open after the store answered a probe")
		}
		if d, err := s.AllowN(ctx, "k", perSec, 1); err != nil || !d.Allowed {
			t.Errorf("AllowN after the first answer = %+v, %v; want admitted by the store", d, err)
		}
	})
}

// TestLocalMaxKeys: during an outage, the FailOpen local limiter holds at
// most WithLocalMaxKeys states, so callers that send new keys cannot grow it
// without bound; a state it evicted forgets its count.
func TestLocalMaxKeys(t *testing.T) {
	ctx := context.Background()
	hourly := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Hour}
	for _, tt := range []struct {
		name       string
		opts       []failover.Option
		wantForgot bool // some key admitted again in the second round
	}{
		{"default bound holds all three", nil, false},
		{"two states", []failover.Option{failover.WithLocalMaxKeys(2)}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFaulty(t)
			f.mode.Store(failing)
			opts := append([]failover.Option{failover.WithStartOpen(nil), failover.WithDefaultMode(sluice.FailOpen), failover.WithReplicas(1)}, tt.opts...)
			s := mustNew(t, f, opts...)
			defer s.Close()
			keys := []string{"a", "b", "c"}
			for _, k := range keys {
				if d, err := s.AllowN(ctx, k, hourly, 1); !d.Allowed || err != nil {
					t.Fatalf("first AllowN(%q) = %+v, %v; want admitted locally", k, d, err)
				}
			}
			admitted := 0
			for _, k := range keys {
				if d, _ := s.AllowN(ctx, k, hourly, 1); d.Allowed {
					admitted++
				}
			}
			// Two states hold at most two of the three counts, so at least
			// one key was forgotten and is admitted again.
			if forgot := admitted > 0; forgot != tt.wantForgot {
				t.Errorf("second round admitted %d of 3 keys; want some admitted: %v", admitted, tt.wantForgot)
			}
		})
	}
}
