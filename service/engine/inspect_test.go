package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
)

// TestInspectIsDecidesCounter checks that Inspect peeks at the counters
// Decide counts on, two limits of one node included, and counts nothing.

func TestInspectIsDecidesCounter(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte(`
domain: t
descriptors:
  - key: two
    rate_limits:
      - {name: a, unit: minute, requests_per_unit: 5}
      - {name: b, unit: minute, requests_per_unit: 8, counting: all, algorithm: sliding_window}
`))
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	rec := &recorder{}
	e := New(st, cfg, WithObserver(rec))
	ctx := context.Background()
	for range 3 {
		if _, err := e.Decide(ctx, &Request{Domain: "t", Descriptors: []Descriptor{d("two", "x", -1)}}); err != nil {
			t.Fatal(err)
		}
	}
	rec.take()
	ins, err := e.Inspect(ctx, "t", []Entry{{Key: "two", Value: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if !ins.Known || len(ins.Rules) != 2 {
		t.Fatalf("Inspect = %+v, want two rules", ins)
	}
	a, b := ins.Rules[0], ins.Rules[1]
	if a.Rule.Name != "a" || a.Decision.Remaining != 2 || b.Rule.Name != "b" || b.Decision.Remaining != 5 || a.Key != b.Key || a.CounterLimit.Algorithm == b.CounterLimit.Algorithm {
		t.Errorf("Inspect rules = a %q %+v, b %q %+v; want 2 and 5 remaining, one key, two algorithms", a.Key, a.Decision, b.Key, b.Decision)
	}
	if reps := rec.take(); len(reps) != 0 {
		t.Errorf("Inspect reported %d decisions, want none: %+v", len(reps), reps)
	}
	again, _ := e.Inspect(ctx, "t", []Entry{{Key: "two", Value: "x"}})
	if again.Rules[0].Decision.Remaining != 2 || again.Rules[1].Decision.Remaining != 5 {
		t.Errorf("a second Inspect = %+v, want the same state", again.Rules)
	}
}

func TestInspectErrors(t *testing.T) {
	e, _, _ := newEngine(t)
	ctx := context.Background()
	many := make([]Entry, 17)
	for i := range many {
		many[i] = Entry{Key: "k", Value: "v"}
	}
	for _, tt := range []struct {
		domain  string
		entries []Entry
		field   string
	}{
		{"", []Entry{{Key: "fw", Value: "x"}}, "domain"},
		{"t", nil, "descriptors[0]"},
		{"t", many, "descriptor"},
	} {
		_, err := e.Inspect(ctx, tt.domain, tt.entries)
		var re *RequestError
		if !errors.As(err, &re) || re.Field != tt.field {
			t.Errorf("Inspect(%q, %d entries) = %v, want a RequestError on %q", tt.domain, len(tt.entries), err, tt.field)
		}
	}
	// A used-up fixed window tells when it admits again.
	for range 5 {
		e.Decide(ctx, &Request{Domain: "t", Descriptors: []Descriptor{d("fw", "y", -1)}})
	}
	ins, err := e.Inspect(ctx, "t", []Entry{{Key: "fw", Value: "y"}})
	if err != nil || !ins.Rules[0].Over || ins.Rules[0].Decision.RetryAfter != 50*time.Second {
		t.Errorf("Inspect of a used-up window = %+v %v, want over, retry 50s", ins.Rules, err)
	}
}
