package validate_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/validate"
)

func TestValidateRequest(t *testing.T) {
	gcra := sluice.PerSecond(10)
	tests := []struct {
		name string
		key  string
		lim  sluice.Limit
		n    int
	}{
		{"plain", "tenant-1", gcra, 1},
		{"peek", "tenant-1", gcra, 0},
		{"n = capacity", "tenant-1", gcra, 10},
		{"n = burst", "k", gcra.WithBurst(25), 25},
		{"1024-byte key", strings.Repeat("k", 1024), gcra, 1},
		{"NUL in the key", "a\x00b", gcra, 1},
		{"only NUL", "\x00", gcra, 1},
		{"not UTF-8", "\xff\xfe\xfd", gcra, 1},
		{"braces", "{tenant}:route", gcra, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := validate.Request(tt.key, tt.lim, tt.n); err != nil {
				t.Errorf("ValidateRequest(%q, %v, %d) = %v, want nil", tt.key, tt.lim, tt.n, err)
			}
		})
	}
}

// TestValidateRequestErrors: the first bad argument (key, then limit, then
// n) is reported, wrapping its sentinel, with the offending value.
func TestValidateRequestErrors(t *testing.T) {
	gcra := sluice.PerSecond(10)
	tests := []struct {
		name     string
		key      string
		lim      sluice.Limit
		n        int
		wantIs   error
		wantText string // the whole message
	}{
		{"empty key", "", gcra, 1, sluice.ErrInvalidKey, "sluice: invalid key: key is empty"},
		{"1025-byte key", strings.Repeat("k", 1025), gcra, 1, sluice.ErrInvalidKey, "sluice: invalid key: key is 1025 bytes, longer than 1024"},
		{"empty key before a bad limit", "", sluice.Limit{}, -1, sluice.ErrInvalidKey, "sluice: invalid key: key is empty"},
		{"invalid limit", "k", sluice.Limit{Rate: 1, Period: time.Second}, 1, sluice.ErrInvalidLimit, "sluice: invalid limit: Algorithm is unset"},
		{"invalid limit before a bad n", "k", sluice.Limit{Algorithm: sluice.GCRA, Period: time.Second}, -1, sluice.ErrInvalidLimit, "sluice: invalid limit: Rate 0 must be > 0"},
		{"n negative", "k", gcra, -1, sluice.ErrInvalidCost, "sluice: invalid cost: n = -1 must be >= 0"},
		{"n above capacity", "k", gcra, 11, sluice.ErrExceedsCapacity, "sluice: cost exceeds capacity: n = 11, but 10 per 1s (gcra, burst 10) admits at most 10 at once"},
		{"n above burst", "k", gcra.With(sluice.TokenBucket).WithBurst(2), 3, sluice.ErrExceedsCapacity, "sluice: cost exceeds capacity: n = 3, but 10 per 1s (token_bucket, burst 2) admits at most 2 at once"},
		{"n above rate of a window", "k", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: 500 * time.Millisecond}, 6, sluice.ErrExceedsCapacity, "sluice: cost exceeds capacity: n = 6, but 5 per 500ms (sliding_log) admits at most 5 at once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validate.Request(tt.key, tt.lim, tt.n)
			if !errors.Is(err, tt.wantIs) || err.Error() != tt.wantText {
				t.Errorf("ValidateRequest(%q, %v, %d) = %v, want %q wrapping %v", tt.key, tt.lim, tt.n, err, tt.wantText, tt.wantIs)
			}
		})
	}
}

// TestErrorsDistinct: the sentinels are distinct, so errors.Is tells them
// apart.
func TestErrorsDistinct(t *testing.T) {
	errs := []error{sluice.ErrInvalidLimit, sluice.ErrInvalidKey, sluice.ErrInvalidCost, sluice.ErrExceedsCapacity, sluice.ErrWouldExceedDeadline, sluice.ErrClosed, sluice.ErrMultiUnsupported}
	for i, a := range errs {
		for j, b := range errs {
			if got := errors.Is(a, b); got != (i == j) {
				t.Errorf("errors.Is(%v, %v) = %v", a, b, got)
			}
		}
		if !strings.HasPrefix(a.Error(), "sluice: ") {
			t.Errorf("%q does not start with \"sluice: \"", a)
		}
	}
}

func TestCombineRetry(t *testing.T) {
	tests := []struct {
		name string
		give []sluice.Decision
		want time.Duration
	}{
		{"none", nil, 0},
		{"all allowed", []sluice.Decision{{Allowed: true}, {Allowed: true}}, 0},
		{"the longest", []sluice.Decision{{RetryAfter: 3 * time.Millisecond}, {}, {RetryAfter: 250 * time.Millisecond}, {RetryAfter: time.Microsecond}}, 250 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sluice.CombineRetry(tt.give); got != tt.want {
				t.Errorf("CombineRetry(%+v) = %v, want %v", tt.give, got, tt.want)
			}
		})
	}
}
