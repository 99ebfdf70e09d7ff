package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
)

// FixedCounters are the counters that requests of the configuration's
// fixed descriptors count on, each once, under the engine's keys
// (reference keys included), up to max; unlimited rules have none.
func TestFixedCounters(t *testing.T) {
	const yml = `
domain: w
descriptors:
  - key: plan
    value: gold
    rate_limit: {unit: minute, requests_per_unit: 50}
    descriptors:
      - key: route
        value: /pay
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: plan
    value: free
    rate_limit: {unit: hour, requests_per_unit: 7, algorithm: gcra}
  - key: plan
    value: vip
    rate_limit: {unlimited: true}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 3}
`
	cfg, err := config.Parse("w.yaml", []byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]Option{nil, {WithReferenceKeys("pre_")}} {
		st := memstore.New()
		defer st.Close()
		e := New(st, cfg, opts...)
		cs := e.FixedCounters(10)
		if len(cs) != 3 {
			t.Fatalf("FixedCounters = %+v, want 3 (free, gold, gold/route)", cs)
		}
		if got := e.FixedCounters(2); len(got) != 2 || got[0] != cs[0] || got[1] != cs[1] {
			t.Errorf("FixedCounters(2) = %+v, want the first 2 of %+v", got, cs)
		}
		// A request of each fixed descriptor counts on exactly these.
		ctx := context.Background()
		for _, ents := range [][]Entry{{{Key: "plan", Value: "free"}}, {{Key: "plan", Value: "gold"}}, {{Key: "plan", Value: "gold"}, {Key: "route", Value: "/pay"}}} {
			if _, err := e.Decide(ctx, &Request{Domain: "w", Descriptors: []Descriptor{{Entries: ents}}}); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range cs {
			d, err := st.AllowN(ctx, c.Key, c.Limit, 0)
			if err != nil || d.Remaining != c.Limit.Capacity()-1 {
				t.Errorf("counter %q (%v) after one request: %+v, %v; want one hit counted", c.Key, c.Limit, d, err)
			}
		}
		t.Logf("%v: %s", opts != nil, fmt.Sprint(cs))
	}
}
