package failover_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
)

// A shared store 80 ms away: with the default deadline (50 ms) every call
// is degraded; with WithAdaptiveTimeout none is, and the deadline follows
// the round trip.
func TestAdaptiveTimeoutAcrossAWAN(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := newFaulty(t, memstore.WithSweepInterval(0))
		f.delay.Store(int64(80 * time.Millisecond))

		def := mustNew(t, f, failover.WithProbeInterval(time.Hour))
		d, err := def.AllowN(ctx, "k", perSec, 1)
		if err != nil || !d.Degraded {
			t.Errorf("AllowN 80ms away with the default deadline = %+v, %v; want degraded", d, err)
		}
		def.Close()

		s := mustNew(t, f, failover.WithAdaptiveTimeout(5*time.Millisecond, 2*time.Second), failover.WithProbeInterval(time.Hour))
		defer s.Close()
		for i := range 20 {
			start := time.Now()
			d, err := s.AllowN(ctx, "a", perSec, 1)
			if took := time.Since(start); err != nil || d.Degraded || took != 80*time.Millisecond {
				t.Fatalf("AllowN #%d 80ms away, adaptive = %+v, %v after %v; want the store's decision after 80ms", i, d, err, took)
			}
		}
		st := s.Stats()
		if st.SRTT != 80*time.Millisecond || st.Timeout < 120*time.Millisecond || st.Timeout > 240*time.Millisecond || st.Degraded != 0 {
			t.Errorf("Stats() = %+v; want SRTT 80ms, a timeout in [120ms, 240ms], nothing degraded", st)
		}
	})
}

// A round trip that grows past the measured deadline opens the breaker;
// the probes wait up to the cap, measure the new round trip, and close it,
// and the calls' deadline then covers it.
func TestAdaptiveTimeoutFollowsAGrownRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := newFaulty(t, memstore.WithSweepInterval(0))
		f.delay.Store(int64(20 * time.Millisecond))
		s := mustNew(t, f, failover.WithAdaptiveTimeout(5*time.Millisecond, 2*time.Second), failover.WithFailureThreshold(1))
		defer s.Close()
		for range 50 {
			if d, err := s.AllowN(ctx, "k", perSec, 0); err != nil || d.Degraded {
				t.Fatalf("AllowN 20ms away = %+v, %v; want the store's decision", d, err)
			}
		}
		if st := s.Stats(); st.Timeout >= 300*time.Millisecond {
			t.Fatalf("timeout after steady 20ms answers = %v, want below 300ms", st.Timeout)
		}
		f.delay.Store(int64(300 * time.Millisecond))
		if d, err := s.AllowN(ctx, "k", perSec, 0); err != nil || !d.Degraded {
			t.Fatalf("AllowN when the round trip grew to 300ms = %+v, %v; want degraded (the deadline is below it)", d, err)
		}
		time.Sleep(time.Second) // probes every 100ms, each answered in 300ms
		synctest.Wait()
		if st := s.Stats(); st.Open || st.BreakerCloses != 1 || st.Timeout <= 300*time.Millisecond {
			t.Fatalf("Stats() a second after the round trip grew = %+v; want the breaker closed and a timeout above 300ms", st)
		}
		if d, err := s.AllowN(ctx, "k", perSec, 0); err != nil || d.Degraded {
			t.Errorf("AllowN 300ms away after the breaker closed = %+v, %v; want the store's decision", d, err)
		}
	})
}

// With a fixed deadline below the round trip, nothing answers in time and
// the breaker stays open; it measures the store under a long deadline and
// reports that it answers, slower than the deadline.
func TestTimeoutBelowTheRoundTripIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		f := newFaulty(t, memstore.WithSweepInterval(0))
		f.delay.Store(int64(80 * time.Millisecond))
		s := mustNew(t, f, failover.WithFailureThreshold(1), failover.WithLogger(log))
		defer s.Close()
		if d, _ := s.AllowN(context.Background(), "k", perSec, 1); !d.Degraded {
			t.Fatalf("AllowN 80ms away under a 50ms deadline = %+v, want degraded", d)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		st := s.Stats()
		if !st.Open || st.SlowerThanTimeout != 80*time.Millisecond {
			t.Errorf("Stats() = %+v; want the breaker open and SlowerThanTimeout 80ms", st)
		}
		out := buf.String()
		if n := strings.Count(out, failover.ErrTimeoutBelowRTT.Error()); n != 1 {
			t.Errorf("log names ErrTimeoutBelowRTT %d times, want once:\n%s", n, out)
		}
		if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "answered a probe in 80ms, the timeout is 50ms") {
			t.Errorf("log lacks the error with the measured round trip:\n%s", out)
		}
	})
}

func TestAdaptiveTimeoutOption(t *testing.T) {
	for _, c := range [][2]time.Duration{{0, time.Second}, {-time.Millisecond, time.Second}, {time.Second, time.Millisecond}} {
		if _, err := failover.New(newFaulty(t), failover.WithAdaptiveTimeout(c[0], c[1])); err == nil || !strings.Contains(err.Error(), "WithAdaptiveTimeout") {
			t.Errorf("WithAdaptiveTimeout(%v, %v) = %v, want an error naming it", c[0], c[1], err)
		}
	}
}
