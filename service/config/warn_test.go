package config

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestLargeSlidingLog: a sliding log of 100,000 an hour loads, exact, and
// draws a warning that says what its keys may cost; one of
// LogWarnEntries does not.
func TestLargeSlidingLog(t *testing.T) {
	c, err := Parse("t.yaml", []byte(`domain: api
descriptors:
  - key: api_key
    rate_limit: {algorithm: sliding_log, unit: hour, requests_per_unit: 100000}
  - key: tenant
    rate_limit: {algorithm: sliding_log, unit: hour, requests_per_unit: 10000}
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	m, ok := c.Match("api", []Entry{{Key: "api_key", Value: "k1"}})
	if want := (sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 100_000, Period: time.Hour}); !ok || len(m.Rules) != 1 || m.Rules[0].Limit != want {
		t.Fatalf("Match = %+v, %v; want the rule %v", m, ok, want)
	}
	w := c.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "rule api.api_key: a sliding_log of 100000 per 1h0m0s keeps up to 100000 entries per key, about 10 MB in Redis and 2 MB in memory") {
		t.Errorf("Warnings() = %q, want one line for api.api_key", w)
	}
}
