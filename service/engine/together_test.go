package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
)

// togetherConfig mixes limits counting all hits and admitted hits, of every
// counter-based algorithm, with shadow, quota-mode and requests_per_unit: 0
// rules, and small rates so that limits deny often.
const togetherConfig = `
domain: t
descriptors:
  - key: fw
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: all
    rate_limit: {unit: minute, requests_per_unit: 5, counting: all}
  - key: allg
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: gcra, counting: all}
  - key: alls
    rate_limit: {unit: minute, requests_per_unit: 6, algorithm: sliding_window, counting: all}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 4, algorithm: sliding_log}
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 4}
  - key: two
    rate_limits:
      - {unit: second, requests_per_unit: 3, counting: all}
      - {unit: minute, requests_per_unit: 8}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2, counting: all}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: blockedall
    rate_limit: {unit: second, requests_per_unit: 0, counting: all}
`

// outcome is what a decision answers, status by status, and reports.
type outcome struct {
	Code     Code
	Denied   bool
	Statuses []statusOut
	Reports  []Report
	Err      string
}

type statusOut struct {
	Code       Code
	Rule       string
	Unlimited  bool
	Remaining  uint32
	UntilReset time.Duration
	HasReset   bool
}

func decideOutcome(e *Engine, rec *recorder, req *Request) outcome {
	res, err := e.Decide(context.Background(), req)
	o := outcome{Code: res.Code, Denied: res.Denied, Reports: rec.take()}
	if err != nil {
		o.Err = err.Error()
	}
	for _, st := range res.Statuses {
		so := statusOut{Code: st.Code, Unlimited: st.Unlimited, Remaining: st.Remaining, UntilReset: st.UntilReset, HasReset: st.HasReset}
		if st.Rule != nil {
			so.Rule = st.Rule.Name
		}
		o.Statuses = append(o.Statuses, so)
	}
	return o
}

// TestDecideTogether holds the one store call that decides a request's
// limits counting all hits with its others (decideTogether) to deciding
// them apart, charges first (chargeAll, decideAdmitted): on random
// requests against two memory stores on one clock, every answer, status
// and report is the same.
func TestDecideTogether(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte(togetherConfig))
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2026, 11, 29, 9, 0, 10, 0, time.UTC)}
	engine := func(apart bool) (*Engine, *recorder) {
		st := memstore.New(memstore.WithClock(clk.now))
		t.Cleanup(func() { st.Close() })
		rec := &recorder{}
		e := New(st, cfg, WithClock(clk.now), WithObserver(rec), WithCounting(sluice.CountAdmitted))
		e.chargesApart = apart
		return e, rec
	}
	together, trec := engine(false)
	apart, arec := engine(true)
	keys := []string{"fw", "all", "allg", "alls", "log", "tb", "two", "shadow", "quota", "blocked", "blockedall"}
	rng := rand.New(rand.NewPCG(26, 4))
	folded := 0
	for i := range 6000 {
		req := &Request{Domain: "t", Hits: uint32(rng.IntN(3))}
		for range 1 + rng.IntN(4) {
			k := keys[rng.IntN(len(keys))]
			x := Descriptor{Entries: []Entry{{Key: k, Value: fmt.Sprint(rng.IntN(2))}}}
			if rng.IntN(3) == 0 {
				x.Hits, x.HasHits = uint64(rng.IntN(7)), true
			}
			req.Descriptors = append(req.Descriptors, x)
		}
		if chargesAndOthers(cfg, req) {
			folded++
		}
		want := decideOutcome(apart, arec, req)
		got := decideOutcome(together, trec, req)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("step %d: Decide(%+v): together differs from apart (-apart +together):\n%s", i, req.Descriptors, diff)
		}
		clk.add(time.Duration(rng.IntN(400)) * time.Millisecond)
	}
	if folded < 300 {
		t.Fatalf("only %d requests had limits counting all beside others: the test decides too few together", folded)
	}
}

// chargesAndOthers reports a request with an enforcing limit counting all
// hits and another enforcing limit: what decideTogether folds.
func chargesAndOthers(cfg *config.Config, req *Request) bool {
	all, n := false, 0
	for _, d := range req.Descriptors {
		m, _ := cfg.Match(req.Domain, d.Entries)
		for _, r := range m.Rules {
			if r.ShadowMode || r.QuotaMode {
				continue
			}
			n++
			all = all || r.Limit.Counting == sluice.CountAll
		}
	}
	return all && n > 1
}
