package metrics

import (
	"testing"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/topk"
)

// TestTopFedByDenials checks that only over-limit decisions reach the
// summary of the keys denied most, and that an admitted one costs no
// allocation.
func TestTopFedByDenials(t *testing.T) {
	m := New()
	ok := engine.Report{Domain: "shop", Rule: "per_tenant", Key: "shop/tenant=acme", Outcome: engine.OutcomeOK, Hits: 1, Within: 1}
	m.Decided(ok)
	if n := testing.AllocsPerRun(100, func() { m.Decided(ok) }); n != 0 {
		t.Errorf("an admitted decision allocates %v times, want 0", n)
	}
	if r := m.Top().Report("", "", 10); len(r.Rules) != 0 {
		t.Errorf("admitted decisions reached the summary: %+v", r.Rules)
	}
	for _, o := range []engine.Outcome{engine.OutcomeOverLimit, engine.OutcomeOverLimit, engine.OutcomeShadowOverLimit, engine.OutcomeNotCounted} {
		m.Decided(engine.Report{Domain: "shop", Rule: "per_tenant", Key: "shop/tenant=acme", Outcome: o, Hits: 1})
	}
	r := m.Top().Report("shop", "per_tenant", 10)
	if len(r.Rules) != 1 || len(r.Rules[0].Keys) != 1 || r.Rules[0].Keys[0] != (topk.Key{Key: "tenant=acme", Count: 2}) {
		t.Errorf("summary = %+v, want tenant=acme denied twice", r.Rules)
	}
}
