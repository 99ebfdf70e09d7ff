package failover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
)

// Under FailError a call that the shared store cannot answer is no
// decision: an error wrapping sluice.ErrNoDecision and the cause, peeks
// and charges included; nothing is counted, and the Observer hears of it
// as mode FailError.
func TestFailError(t *testing.T) {
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour}
	tests := []struct {
		name string
		opts []failover.Option
		lim  sluice.Limit
		n    int
	}{
		{"default mode", []failover.Option{failover.WithDefaultMode(sluice.FailError)}, lim, 1},
		{"the limit's mode", nil, lim.WithFailureMode(sluice.FailError), 1},
		{"a peek", []failover.Option{failover.WithDefaultMode(sluice.FailError)}, lim, 0},
		{"a charge", []failover.Option{failover.WithDefaultMode(sluice.FailError)}, lim.WithCounting(sluice.CountAll), 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFaulty(t)
			f.mode.Store(failing)
			obs := &counting{}
			s := mustNew(t, f, append([]failover.Option{failover.WithFailureThreshold(2), failover.WithProbeInterval(time.Hour),
				failover.WithObserver(obs), failover.WithTimeout(time.Minute)}, tt.opts...)...)
			// The first two calls fail in the store; the next ones find
			// the breaker open.
			for i, wantCause := range []error{errBoom, errBoom, failover.ErrBreakerOpen} {
				d, err := s.AllowN(ctx, "k", tt.lim, tt.n)
				if !errors.Is(err, sluice.ErrNoDecision) || !errors.Is(err, wantCause) || !errors.Is(err, failover.ErrUnavailable) {
					t.Fatalf("call %d: AllowN = %+v, %v; want an error wrapping ErrNoDecision, ErrUnavailable and %v", i, d, err, wantCause)
				}
				if d != (sluice.Decision{}) {
					t.Errorf("call %d: Decision %+v with the error, want the zero Decision", i, d)
				}
			}
			if st := s.Stats(); st.Undecided != 3 || st.Degraded != 0 || !st.Open {
				t.Errorf("Stats() = %+v, want 3 undecided, 0 degraded decisions, breaker open", st)
			}
			if cause, m := obs.last(); m != sluice.FailError || !errors.Is(cause, failover.ErrBreakerOpen) {
				t.Errorf("Observer told mode %v, cause %v; want FailError, the breaker", m, cause)
			}
			if obs.degraded != 3 || obs.allowed != 0 {
				t.Errorf("Observer told %d degraded, %d allowed; want 3, 0", obs.degraded, obs.allowed)
			}
			// Invalid input is still the caller's error, not "no decision".
			if _, err := s.AllowN(ctx, "", tt.lim, 1); !errors.Is(err, sluice.ErrInvalidKey) || errors.Is(err, sluice.ErrNoDecision) {
				t.Errorf("AllowN of an empty key = %v, want ErrInvalidKey only", err)
			}
			// Nothing was counted: the store answers again with the key
			// untouched.
			f.mode.Store(healthy)
			if d, err := f.Store.AllowN(ctx, "k", tt.lim, 0); err != nil || d.Remaining != tt.lim.Rate {
				t.Errorf("the key after the outage = %+v, %v; want untouched (Remaining %d)", d, err, tt.lim.Rate)
			}
		})
	}
}

// In an AllowMulti the strictest mode decides: closed before error before
// open.
func TestFailErrorMulti(t *testing.T) {
	ctx := context.Background()
	f := newFaulty(t)
	f.mode.Store(failing)
	s := mustNew(t, f, failover.WithStartOpen(nil), failover.WithProbeInterval(time.Hour), failover.WithReplicas(1))
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour}
	req := func(m sluice.FailureMode) sluice.Request {
		return sluice.Request{Key: "k" + m.String(), Limit: lim.WithFailureMode(m), N: 1}
	}
	tests := []struct {
		name      string
		modes     []sluice.FailureMode
		wantErr   bool
		wantAdmit bool
	}{
		{"error alone", []sluice.FailureMode{sluice.FailError}, true, false},
		{"error and open", []sluice.FailureMode{sluice.FailOpen, sluice.FailError}, true, false},
		{"error and open_unbounded", []sluice.FailureMode{sluice.FailError, sluice.FailOpenUnbounded}, true, false},
		{"closed and error", []sluice.FailureMode{sluice.FailError, sluice.FailClosed}, false, false},
		{"open alone", []sluice.FailureMode{sluice.FailOpen, sluice.FailOpen}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var reqs []sluice.Request
			for _, m := range tt.modes {
				reqs = append(reqs, req(m))
			}
			ds, err := s.AllowMulti(ctx, reqs)
			if tt.wantErr {
				if !errors.Is(err, sluice.ErrNoDecision) || !errors.Is(err, failover.ErrBreakerOpen) || ds != nil {
					t.Errorf("AllowMulti(%v) = %+v, %v; want no decision", tt.modes, ds, err)
				}
				return
			}
			if err != nil || len(ds) != len(reqs) || ds[0].Allowed != tt.wantAdmit || !ds[0].Degraded {
				t.Errorf("AllowMulti(%v) = %+v, %v; want degraded decisions, admitted %v", tt.modes, ds, err, tt.wantAdmit)
			}
		})
	}
}

func TestFailureModeStricter(t *testing.T) {
	order := []sluice.FailureMode{sluice.FailClosed, sluice.FailError, sluice.FailOpen, sluice.FailOpenUnbounded}
	for i, a := range order {
		if got := a.Stricter(sluice.FailDefault); got != a {
			t.Errorf("%v.Stricter(default) = %v, want %v", a, got, a)
		}
		if got := sluice.FailDefault.Stricter(a); got != a {
			t.Errorf("default.Stricter(%v) = %v, want %v", a, got, a)
		}
		for j, b := range order {
			want := order[min(i, j)]
			if got := a.Stricter(b); got != want {
				t.Errorf("%v.Stricter(%v) = %v, want %v", a, b, got, want)
			}
		}
	}
	for _, name := range []string{"closed", "error", "open", "open_unbounded"} {
		m, err := sluice.ParseFailureMode(name)
		if err != nil || m.String() != name {
			t.Errorf("ParseFailureMode(%q) = %v, %v; want the mode named so", name, m, err)
		}
	}
}

// Acquire under FailError: no permit decision while the store is down.
func TestSemaphoreFailError(t *testing.T) {
	ctx := context.Background()
	f := newFaulty(t)
	f.mode.Store(failing)
	s := mustNew(t, f, failover.WithStartOpen(nil), failover.WithProbeInterval(time.Hour), failover.WithDefaultMode(sluice.FailError))
	d, err := s.Acquire(ctx, "k", sluice.ConcurrencyLimit{Max: 2, TTL: time.Minute}, "h1")
	if !errors.Is(err, sluice.ErrNoDecision) || d.Acquired {
		t.Errorf("Acquire with the store down = %+v, %v; want no decision", d, err)
	}
	if st := s.Stats(); st.Undecided != 1 || st.Degraded != 0 {
		t.Errorf("Stats() = %+v, want 1 undecided", st)
	}
}
