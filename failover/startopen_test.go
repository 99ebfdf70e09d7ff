package failover_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
)

func TestStartOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := newFaulty(t, memstore.WithSweepInterval(0))
		f.mode.Store(failing)
		obs := &counting{}
		s := failover.New(f, failover.WithStartOpen(nil), failover.WithProbeInterval(100*time.Millisecond), failover.WithObserver(obs))
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
