package region_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/validate"
	"github.com/sluicehq/sluice/region"
)

// Warm asks the home store for a first use's units (a tenth of the
// capacity) before the key's first decision, and after it the key's
// decisions never wait: admitted from those units at once, then denied at
// once while the next units are on their way. A decision made while
// Warm's call is on its way does not wait for it either.
func TestWarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		home := newHome(t)
		w := newWAN(home, 80*time.Millisecond, 0, 1)
		s := mustNew(t, w, "eu")
		defer s.Close()
		lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Hour}

		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- s.Warm(ctx, "k", lim) }()
		time.Sleep(time.Millisecond)
		synctest.Wait()
		d, err := s.AllowN(ctx, "k", lim, 1)
		if err != nil || d.Allowed || time.Since(start) != time.Millisecond {
			t.Fatalf("AllowN during Warm = %+v, %v after %v; want denied at once", d, err, time.Since(start)-time.Millisecond)
		}
		if err := <-done; err != nil || time.Since(start) != 80*time.Millisecond {
			t.Fatalf("Warm = %v after %v, want nil after one round trip", err, time.Since(start))
		}
		if calls, granted := w.stats(); calls != 1 || len(granted) != 1 || sum(granted) != 10 {
			t.Fatalf("Warm made %d calls granting %v, want 1 call granting 10 units", calls, granted)
		}
		if err := s.Warm(ctx, "k", lim); err != nil || time.Since(start) != 80*time.Millisecond {
			t.Fatalf("Warm of an answered key = %v after %v, want nil at once", err, time.Since(start)-80*time.Millisecond)
		}

		// Ten admitted from the warm's units, then a denial while the
		// next units come, all at once.
		for i := range 11 {
			t0 := time.Now()
			d, err := s.AllowN(ctx, "k", lim, 1)
			if err != nil || d.Allowed != (i < 10) || time.Since(t0) != 0 {
				t.Fatalf("AllowN %d after Warm = %+v, %v after %v; want admitted %v at once", i, d, err, time.Since(t0), i < 10)
			}
			if i == 10 && (d.RetryAfter <= 0 || d.RetryAfter > 80*time.Millisecond) {
				t.Fatalf("the denial while units come: RetryAfter %v, want within a round trip", d.RetryAfter)
			}
			if i == 10 {
				time.Sleep(d.RetryAfter)
				synctest.Wait()
			}
		}
		if d, err := s.AllowN(ctx, "k", lim, 1); err != nil || !d.Allowed {
			t.Fatalf("AllowN once the next units came = %+v, %v; want admitted", d, err)
		}
		if st := s.Stats(); st.Waits != 0 {
			t.Fatalf("stats %+v: want no decision waiting", st)
		}
	})
}

// A warmed key is kept for the report TTL though unused (the idle time is
// shorter), its units with it; after that it is forgotten as any other,
// and its next use waits for the home store's answer.
func TestWarmHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w := newWAN(newHome(t), 80*time.Millisecond, 0, 1)
		s := mustNew(t, w, "eu", region.WithReportTTL(10*time.Second))
		defer s.Close()
		lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Hour}
		if err := s.Warm(ctx, "k", lim); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second) // past the idle time (1.6 s)
		t0 := time.Now()
		if d, err := s.AllowN(ctx, "k", lim, 1); err != nil || !d.Allowed || time.Since(t0) != 0 {
			t.Fatalf("AllowN 5 s after Warm = %+v, %v after %v; want admitted at once", d, err, time.Since(t0))
		}
		time.Sleep(20 * time.Second)
		t0 = time.Now()
		if d, err := s.AllowN(ctx, "k", lim, 1); err != nil || !d.Allowed || time.Since(t0) != 80*time.Millisecond {
			t.Fatalf("AllowN 20 s after the last use = %+v, %v after %v; want admitted after a round trip (a first use)", d, err, time.Since(t0))
		}
	})
}

func sum(m map[int64]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// Warm's errors: invalid input, a link that does not answer, the caller's
// context; a limit the home store decides alone needs no warming.
func TestWarmErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w := newWAN(newHome(t), 80*time.Millisecond, 0, 1)
		s := mustNew(t, w, "eu")
		defer s.Close()
		lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Hour}

		if err := s.Warm(ctx, "k", sluice.Limit{Algorithm: sluice.FixedWindow, Period: time.Second}); !validate.IsInput(err) {
			t.Errorf("Warm of a zero rate = %v, want an input error", err)
		}
		if err := s.Warm(ctx, "", lim); !validate.IsInput(err) {
			t.Errorf("Warm of an empty key = %v, want an input error", err)
		}
		log := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: time.Second}
		if err := s.Warm(ctx, "log", log); err != nil {
			t.Errorf("Warm of a sliding log = %v, want nil", err)
		}
		if calls, _ := w.stats(); calls != 0 {
			t.Errorf("%d calls for invalid or home-decided keys, want 0", calls)
		}

		short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		if err := s.Warm(short, "k", lim); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Warm past the caller's deadline = %v, want DeadlineExceeded", err)
		}
		time.Sleep(time.Second)
		synctest.Wait()

		w.set("cut")
		if err := s.Warm(ctx, "cut", lim); !errors.Is(err, errCut) {
			t.Errorf("Warm over a cut link = %v, want the link's error", err)
		}
		s.Close()
		if err := s.Warm(ctx, "k", lim); !errors.Is(err, sluice.ErrClosed) {
			t.Errorf("Warm after Close = %v, want ErrClosed", err)
		}
	})
}
