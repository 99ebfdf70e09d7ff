package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rls"
)

// refused is a shared store that never answers.
type refused struct{}

func (refused) AllowN(context.Context, string, sluice.Limit, int) (sluice.Decision, error) {
	return sluice.Decision{}, errors.New("connection refused")
}

// Under the failure mode error every decision endpoint answers 503 with a
// problem saying no decision was made, for the caller's own policy.
func TestFailureModeError(t *testing.T) {
	cfg, err := config.Parse("example.yaml", config.DefaultExample())
	if err != nil {
		t.Fatal(err)
	}
	fs, err := failover.New(refused{}, failover.WithStartOpen(nil), failover.WithProbeInterval(time.Hour), failover.WithDefaultMode(sluice.FailError))
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	s := New(rls.New(engine.New(fs, cfg)), fs)
	for _, tt := range []struct{ method, path, body string }{
		{"POST", "/json", `{"domain":"example","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}`},
		{"POST", "/v1/check", `{"key":"k","algorithm":"fixed_window","rate":5,"period":"1s","cost":1}`},
		{"GET", "/v1/auth", ""},
	} {
		w := do(t, s, tt.method, tt.path, tt.body, "X-Forwarded-For", "10.0.0.1")
		if w.Code != 503 || !strings.Contains(w.Body.String(), "no decision") {
			t.Errorf("%s %s = %d %s, want 503 saying no decision was made", tt.method, tt.path, w.Code, w.Body)
		}
	}
}
