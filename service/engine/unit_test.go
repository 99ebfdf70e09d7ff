package engine

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/service/config"
)

// windowLeft counts in whole microseconds, as the stores place their
// windows.
func TestWindowLeft(t *testing.T) {
	epoch := time.Unix(1_700_000_040, 0) // a whole number of minutes
	tests := []struct {
		now  time.Time
		p    time.Duration
		want time.Duration
	}{
		{epoch, time.Minute, time.Minute},
		{epoch.Add(1500 * time.Millisecond), time.Second, 500 * time.Millisecond},
		{epoch.Add(59 * time.Second), time.Minute, time.Second},
		{epoch.Add(time.Microsecond + 999), time.Millisecond, 999 * time.Microsecond},
		{epoch.Add(999), time.Second, time.Second},                     // below a microsecond: the window's start
		{epoch.Add(300 * time.Millisecond), 0, 700 * time.Millisecond}, // no period: a second's
	}
	for _, tt := range tests {
		if got := windowLeft(tt.p, tt.now); got != tt.want {
			t.Errorf("windowLeft(%v, epoch+%v) = %v, want %v", tt.p, tt.now.Sub(epoch), got, tt.want)
		}
	}
}

// referenceKey is envoyproxy/ratelimit's cache key of a counting key:
// prefix, domain_, key_value_ per entry, with sluice's escapes undone.
func TestReferenceKey(t *testing.T) {
	tests := []struct{ prefix, key, want string }{
		{"", "dom/k=v", "dom_k_v_"},
		{"p:", "dom/k=v/k2=v2", "p:dom_k_v_k2_v2_"},
		{"", `dom/path=\/a\/b\=c/w=pre\*`, "dom_path_/a/b=c_w_pre*_"},
		{"", `d\\x/k=`, `d\x_k__`},
	}
	for _, tt := range tests {
		if got := referenceKey(tt.prefix, tt.key); got != tt.want {
			t.Errorf("referenceKey(%q, %q) = %q, want %q", tt.prefix, tt.key, got, tt.want)
		}
	}
	key := config.CountingKey("d/=", []config.Entry{{Key: `a\b`, Value: "x=y*"}, {Key: "k", Value: "/"}})
	if got, want := referenceKey("", key), `d/=_a\b_x=y*_k_/_`; got != want {
		t.Errorf("referenceKey of CountingKey %q = %q, want %q", key, got, want)
	}
}
