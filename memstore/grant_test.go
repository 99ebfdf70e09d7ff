package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// Every field of a grant request is checked, naming the field.
func TestGrantValidation(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Second}
	ok := sluice.GrantRequest{Holder: "eu", N: 1, TTL: time.Second}
	tests := []struct {
		field string
		key   string
		lim   sluice.Limit
		req   func(r *sluice.GrantRequest)
	}{
		{"Key", "", lim, nil},
		{"Rate", "k", sluice.Limit{Algorithm: sluice.FixedWindow, Period: time.Second}, nil},
		{"Algorithm", "k", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: time.Second}, nil},
		{"Counting", "k", lim.WithCounting(sluice.CountAll), nil},
		{"Holder", "k", lim, func(r *sluice.GrantRequest) { r.Holder = "" }},
		{"Holder", "k", lim, func(r *sluice.GrantRequest) { r.Holder = string(make([]byte, sluice.MaxGrantHolderLen+1)) }},
		{"N", "k", lim, func(r *sluice.GrantRequest) { r.N = -1 }},
		{"N", "k", lim, func(r *sluice.GrantRequest) { r.N = 11 }},
		{"Demand", "k", lim, func(r *sluice.GrantRequest) { r.Demand = -1 }},
		{"Allowance", "k", lim, func(r *sluice.GrantRequest) { r.Allowance = 11 }},
		{"TTL", "k", lim, func(r *sluice.GrantRequest) { r.TTL = 0 }},
		{"TTL", "k", lim, func(r *sluice.GrantRequest) { r.TTL = 2 * time.Hour }},
		{"Spent", "k", lim, func(r *sluice.GrantRequest) { r.Spent = 11 }},
	}
	for _, tt := range tests {
		r := ok
		if tt.req != nil {
			tt.req(&r)
		}
		_, err := s.Grant(context.Background(), tt.key, tt.lim, r)
		var le *sluice.LimitError
		if !errors.As(err, &le) || le.Field != tt.field {
			t.Errorf("Grant(%q, %v, %+v) = %v, want a *LimitError on %s", tt.key, tt.lim, r, err, tt.field)
		}
	}
	if s.GrantTables() != 0 {
		t.Errorf("%d holder tables after invalid requests, want 0", s.GrantTables())
	}
}

// A key holds at most MaxGrantHolders; tables leave with their TTL, and
// are bounded by WithMaxKeys.
func TestGrantTablesBounded(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	s := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxKeys(64), memstore.WithSweepInterval(0))
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 100, Period: time.Second}
	for i := range sluice.MaxGrantHolders {
		if _, err := s.Grant(ctx, "k", lim, sluice.GrantRequest{Holder: fmt.Sprint(i), TTL: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Grant(ctx, "k", lim, sluice.GrantRequest{Holder: "late", TTL: time.Second}); !errors.Is(err, sluice.ErrTooManyHolders) || !errors.Is(err, sluice.ErrExceedsCapacity) {
		t.Fatalf("holder %d: %v, want ErrTooManyHolders", sluice.MaxGrantHolders+1, err)
	}
	n := 0
	for i := range 1000 {
		_, err := s.Grant(ctx, fmt.Sprint("key", i), lim, sluice.GrantRequest{Holder: "eu", TTL: time.Second})
		if err == nil {
			n++
		} else if !errors.Is(err, sluice.ErrExceedsCapacity) {
			t.Fatal(err)
		}
	}
	if got := s.GrantTables(); got > 64 || n >= 1000 {
		t.Fatalf("%d holder tables (%d keys granted) with WithMaxKeys(64)", got, n)
	}
	clock.Advance(time.Second)
	s.Sweep()
	if got := s.GrantTables(); got != 0 {
		t.Fatalf("%d holder tables after every TTL, want 0", got)
	}
}

// A stale request (after its NotAfter) changes nothing.
func TestGrantStale(t *testing.T) {
	clock := sluicetest.NewClock(sluicetest.Epoch())
	s := memstore.New(memstore.WithClock(clock.Now))
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Second}
	g, err := s.Grant(ctx, "k", lim, sluice.GrantRequest{Holder: "eu", N: 5, TTL: time.Second, NotAfter: clock.Now().Add(-time.Microsecond)})
	if err != nil || !g.Stale || g.Units != 0 || s.GrantTables() != 0 {
		t.Fatalf("stale Grant = %+v, %v; %d tables", g, err, s.GrantTables())
	}
	if d, _ := s.AllowN(ctx, "k", lim, 0); d.Remaining != 10 {
		t.Fatalf("Remaining %d after a stale grant, want 10", d.Remaining)
	}
}
