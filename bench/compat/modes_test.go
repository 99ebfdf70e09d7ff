package compat

import (
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testserver/window"
)

// TestCompatModes compares the service-wide settings: the reference's
// SHADOW_MODE (every request answered OK) with custom header names
// (LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER), and its
// QUOTA_MODE (every limit in quota mode), against sluice's --shadow-mode,
// --limit-header, --remaining-header, --reset-header and --quota-mode, on
// random sequences and on one request over its limit.
func TestCompatModes(t *testing.T) {
	referenceBin(t)
	yaml, err := filepath.Abs(filepath.Join("testdata", "compat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	modes := []struct {
		name  string
		env   []string
		flags []string
	}{
		{"shadow mode, header names",
			[]string{"SHADOW_MODE=true", "LIMIT_LIMIT_HEADER=X-RL-Limit", "LIMIT_REMAINING_HEADER=X-RL-Remaining", "LIMIT_RESET_HEADER=X-RL-Reset"},
			[]string{"--shadow-mode", "--limit-header", "X-RL-Limit", "--remaining-header", "X-RL-Remaining", "--reset-header", "X-RL-Reset"}},
		{"quota mode", []string{"QUOTA_MODE=true"}, []string{"--quota-mode"}},
	}
	for k, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			ref := startReference(t, yaml, m.env...)
			sl := startSluice(t, "sluice "+m.name, yaml, m.flags...)
			c := newChecker(ref, sl)
			tok := tokens(rand.New(rand.NewPCG(seed, 200+uint64(k))))
			t.Run("over its limit", func(t *testing.T) {
				inOneMinute(t, func(w window.TB) {
					x := d("plain", tok()) // 5 per minute
					for range 5 {
						call(t, c, rq(x))
					}
					ref, sl := call(t, c, rq(x))
					if ref.OverallCode != ok || sl.OverallCode != ok {
						w.Errorf("overall: reference %v, sluice %v, want OK in %s", ref.OverallCode, sl.OverallCode, m.name)
					}
					if m.name == "quota mode" && (ref.Statuses[0].Code != ok || sl.Statuses[0].Code != ok) {
						w.Errorf("quota mode: statuses %v and %v, want OK", ref.Statuses[0], sl.Statuses[0])
					}
					if m.name != "quota mode" && (ref.Statuses[0].Code != overLimit || sl.Statuses[0].Code != overLimit) {
						w.Errorf("shadow mode: statuses %v and %v, want OVER_LIMIT", ref.Statuses[0], sl.Statuses[0])
					}
					if got, want := header(sl, "X-RL-Limit").GetValue(), header(ref, "X-RL-Limit").GetValue(); m.name != "quota mode" && (got != "5" || want != "5") {
						w.Errorf("X-RL-Limit: sluice %q, reference %q, want 5", got, want)
					}
				})
			})
			t.Run("random", func(t *testing.T) {
				testRandom(t, c, rand.New(rand.NewPCG(seed, 300+uint64(k))), 300)
			})
			c.summary(t)
		})
	}
}
