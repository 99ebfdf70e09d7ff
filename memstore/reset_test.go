package memstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestReset: a reset key admits its full capacity again, for every
// algorithm, and the key's states under other algorithms and periods keep
// what they counted.
func TestReset(t *testing.T) {
	for _, a := range allAlgorithms {
		t.Run(a.String(), func(t *testing.T) {
			c := sluicetest.NewClock(sluicetest.Epoch())
			s := newStore(t, memstore.WithClock(c.Now))
			lim := sluice.Limit{Algorithm: a, Rate: 5, Period: time.Minute}
			otherPeriod := sluice.Limit{Algorithm: a, Rate: 5, Period: time.Hour}
			otherAlgo := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: time.Minute}
			if a == sluice.FixedWindow {
				otherAlgo.Algorithm = sluice.GCRA
			}
			key := "tenant:7"
			for _, l := range []sluice.Limit{lim, otherPeriod, otherAlgo} {
				allow(t, s, key, l, 5)
			}
			if d := allow(t, s, key, lim, 1); d.Allowed {
				t.Fatalf("AllowN(%q, 1) after the capacity = %+v, want a denial", key, d)
			}
			if err := s.Reset(ctx, key, lim); err != nil {
				t.Fatalf("Reset(%q, %v): %v", key, lim, err)
			}
			if d := allow(t, s, key, lim, 0); !d.Allowed || d.Remaining != 5 || d.ResetAfter != 0 {
				t.Errorf("peek after Reset = %+v, want allowed, Remaining 5, ResetAfter 0", d)
			}
			if d := allow(t, s, key, lim, 5); !d.Allowed || d.Remaining != 0 {
				t.Errorf("AllowN(%q, 5) after Reset = %+v, want allowed, Remaining 0", key, d)
			}
			for _, l := range []sluice.Limit{otherPeriod, otherAlgo} {
				if d := allow(t, s, key, l, 1); d.Allowed {
					t.Errorf("AllowN(%q, %v, 1) after resetting %v = %+v, want a denial (untouched)", key, l, lim, d)
				}
			}
		})
	}
}

// TestResetRemovesState: a reset frees the state (and a log's ring) rather
// than emptying it, a reset of an untouched key is nil, and the store stays
// consistent when states around the removed one probed past it.
func TestResetRemovesState(t *testing.T) {
	c := sluicetest.NewClock(sluicetest.Epoch())
	s := newStore(t, memstore.WithClock(c.Now))
	lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 3, Period: time.Minute}
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	for _, k := range keys {
		allow(t, s, k, lim, 3)
	}
	if got := s.Len(); got != len(keys) {
		t.Fatalf("Len() = %d, want %d", got, len(keys))
	}
	for i, k := range keys {
		if i%2 == 0 {
			if err := s.Reset(ctx, k, lim); err != nil {
				t.Fatalf("Reset(%q): %v", k, err)
			}
		}
	}
	if err := s.Reset(ctx, "never-seen", lim); err != nil {
		t.Errorf("Reset of an untouched key = %v, want nil", err)
	}
	if got := s.Len(); got != len(keys)/2 {
		t.Errorf("Len() after resetting half = %d, want %d", got, len(keys)/2)
	}
	for i, k := range keys {
		d := allow(t, s, k, lim, 0)
		want := 0
		if i%2 == 0 {
			want = 3
		}
		if d.Remaining != want {
			t.Errorf("peek %q after resets = %+v, want Remaining %d", k, d, want)
		}
	}
}

// TestResetCountAllDebt: the debt of a limit that counts every hit is
// cleared by a reset.
func TestResetCountAllDebt(t *testing.T) {
	c := sluicetest.NewClock(sluicetest.Epoch())
	s := newStore(t, memstore.WithClock(c.Now))
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Second}.WithCounting(sluice.CountAll)
	for range 50 {
		allow(t, s, "k", lim, 1)
	}
	if d := allow(t, s, "k", lim, 0); d.Allowed {
		t.Fatalf("peek in debt = %+v, want a denial", d)
	}
	if err := s.Reset(ctx, "k", lim); err != nil {
		t.Fatal(err)
	}
	if d := allow(t, s, "k", lim, 10); !d.Allowed {
		t.Errorf("AllowN(10) after resetting a debt = %+v, want allowed", d)
	}
}

// TestResetInvalid: an invalid key or limit is a *LimitError naming the
// field, and a closed store says so.
func TestResetInvalid(t *testing.T) {
	s := newStore(t)
	good := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Second}
	tests := []struct {
		name, key string
		lim       sluice.Limit
		field     string
	}{
		{"empty key", "", good, "Key"},
		{"long key", string(make([]byte, sluice.MaxKeyLen+1)), good, "Key"},
		{"zero period", "k", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1}, "Period"},
		{"bad algorithm", "k", sluice.Limit{Algorithm: 99, Rate: 1, Period: time.Second}, "Algorithm"},
		{"zero rate", "k", sluice.Limit{Algorithm: sluice.GCRA, Period: time.Second}, "Rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Reset(ctx, tt.key, tt.lim)
			var le *sluice.LimitError
			if !errors.As(err, &le) || le.Field != tt.field {
				t.Errorf("Reset(%.20q, %v) = %v, want a *LimitError with Field %q", tt.key, tt.lim, err, tt.field)
			}
		})
	}
	s.Close()
	if err := s.Reset(ctx, "k", good); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("Reset after Close = %v, want ErrClosed", err)
	}
}
