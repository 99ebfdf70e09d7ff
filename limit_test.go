package sluice_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicehq/sluice"
)

func TestLimitValidate(t *testing.T) {
	tests := []struct {
		name string
		give sluice.Limit
	}{
		{"per second", sluice.PerSecond(10)},
		{"per minute", sluice.PerMinute(600)},
		{"per hour", sluice.PerHour(1)},
		{"every", sluice.Every(100*time.Millisecond, 3)},
		{"every, burst 0", sluice.Every(time.Second, 0)},
		{"fixed window, 1ms", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Millisecond}},
		{"sliding window, 24h", sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 100_000, Period: 24 * time.Hour}},
		{"token bucket with burst", sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 7, Period: time.Second, Burst: 2}},
		{"sliding log", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: 500 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.give.Validate(); err != nil {
				t.Errorf("%#v.Validate() = %v, want nil", tt.give, err)
			}
		})
	}
}

// TestLimitValidateErrors: each invalid field is named, with its value,
// in an error wrapping ErrInvalidLimit.
func TestLimitValidateErrors(t *testing.T) {
	tests := []struct {
		name    string
		give    sluice.Limit
		wantErr string // the message after "sluice: invalid limit: "
	}{
		{"zero limit", sluice.Limit{}, "Algorithm is unset"},
		{"algorithm unset", sluice.Limit{Rate: 1, Period: time.Second}, "Algorithm is unset"},
		{"algorithm unknown", sluice.Limit{Algorithm: 6, Rate: 1, Period: time.Second}, "Algorithm 6 is unknown"},
		{"rate 0", sluice.Limit{Algorithm: sluice.GCRA, Rate: 0, Period: time.Second}, "Rate 0 must be > 0"},
		{"rate negative", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: -3, Period: time.Second}, "Rate -3 must be > 0"},
		{"period 0", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1}, "Period 0s must be >= 1ms"},
		{"period negative", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: -time.Second}, "Period -1s must be >= 1ms"},
		{"period below 1ms", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 1, Period: 999 * time.Microsecond}, "Period 999µs must be >= 1ms"},
		{"period not whole µs", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Millisecond + 500}, "Period 1.0005ms must be a whole number of microseconds"},
		{"burst negative", sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 1, Period: time.Second, Burst: -1}, "Burst -1 must be >= 0"},
		{"burst on fixed window", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Second, Burst: 5}, "Burst 5 applies only to token_bucket and gcra, not fixed_window"},
		{"burst on sliding log", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 1, Period: time.Second, Burst: 2}, "Burst 2 applies only to token_bucket and gcra, not sliding_log"},
		{"sliding window too exact for doubles", sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 200_000_000, Period: 24 * time.Hour}, "Rate × Period (200000000 × 86400000000µs) is too large"},
		{"period too long", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: 200 * 365 * 24 * time.Hour}, "Period of 6307200000000000µs is too long"},
		{"token bucket rate far above burst", sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 1 << 60, Period: time.Second, Burst: 1}, "Rate 1152921504606846976 per 1000000µs is too large for exact token_bucket arithmetic with Burst 1"},
		{"gcra burst too large", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: 24 * time.Hour, Burst: 100_000}, "Burst × Period/gcd(Rate, Period) (100000 × 86400000000µs) is too large for exact gcra"},
		{"sliding log beyond one per microsecond", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 1001, Period: time.Millisecond}, "Rate 1001 per 1000µs is more than sliding_log's maximum of one per microsecond; use sliding_window"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			if !errors.Is(err, sluice.ErrInvalidLimit) {
				t.Fatalf("%#v.Validate() = %v, want an error wrapping ErrInvalidLimit", tt.give, err)
			}
			if got, want := err.Error(), "sluice: invalid limit: "+tt.wantErr; !strings.HasPrefix(got, want) {
				t.Errorf("%#v.Validate() = %q, want %q", tt.give, got, want)
			}
		})
	}
}

func TestLimitConstructors(t *testing.T) {
	tests := []struct {
		name string
		give sluice.Limit
		want sluice.Limit
	}{
		{"PerSecond", sluice.PerSecond(10), sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Second}},
		{"PerMinute", sluice.PerMinute(60), sluice.Limit{Algorithm: sluice.GCRA, Rate: 60, Period: time.Minute}},
		{"PerHour", sluice.PerHour(5), sluice.Limit{Algorithm: sluice.GCRA, Rate: 5, Period: time.Hour}},
		{"Every", sluice.Every(250*time.Millisecond, 4), sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: 250 * time.Millisecond, Burst: 4}},
		{"With", sluice.PerSecond(3).With(sluice.SlidingLog), sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 3, Period: time.Second}},
		{"WithBurst", sluice.PerSecond(3).WithBurst(9), sluice.Limit{Algorithm: sluice.GCRA, Rate: 3, Period: time.Second, Burst: 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.give); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestLimitCapacity(t *testing.T) {
	tests := []struct {
		give sluice.Limit
		want int
	}{
		{sluice.PerSecond(10), 10},
		{sluice.PerSecond(10).WithBurst(25), 25},
		{sluice.PerSecond(10).WithBurst(2), 2},
		{sluice.PerSecond(10).With(sluice.TokenBucket).WithBurst(4), 4},
		{sluice.PerSecond(10).With(sluice.TokenBucket), 10},
		{sluice.PerSecond(10).With(sluice.FixedWindow), 10},
		{sluice.PerSecond(10).With(sluice.SlidingLog), 10},
		{sluice.PerSecond(10).With(sluice.SlidingWindow), 10},
		{sluice.Every(time.Second, 0), 1},
	}
	for _, tt := range tests {
		if got := tt.give.Capacity(); got != tt.want {
			t.Errorf("%v.Capacity() = %d, want %d", tt.give, got, tt.want)
		}
	}
}

func TestLimitString(t *testing.T) {
	tests := []struct {
		give sluice.Limit
		want string
	}{
		{sluice.PerSecond(10), "10 per 1s (gcra, burst 10)"},
		{sluice.PerSecond(7).With(sluice.TokenBucket).WithBurst(2), "7 per 1s (token_bucket, burst 2)"},
		{sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: 500 * time.Millisecond}, "5 per 500ms (sliding_log)"},
		{sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 100, Period: 24 * time.Hour}, "100 per 24h0m0s (sliding_window)"},
		{sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: 30 * time.Second}, "3 per 30s (fixed_window)"},
		{sluice.Every(100*time.Millisecond, 0), "1 per 100ms (gcra, burst 1)"},
		{sluice.Limit{}, "0 per 0s (Algorithm(0))"},
	}
	for _, tt := range tests {
		if got := tt.give.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func TestAlgorithmText(t *testing.T) {
	tests := []struct {
		give sluice.Algorithm
		want string
	}{
		{sluice.FixedWindow, "fixed_window"},
		{sluice.SlidingLog, "sliding_log"},
		{sluice.SlidingWindow, "sliding_window"},
		{sluice.TokenBucket, "token_bucket"},
		{sluice.GCRA, "gcra"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.give.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			b, err := tt.give.MarshalText()
			if err != nil || string(b) != tt.want {
				t.Errorf("MarshalText() = %q, %v, want %q, nil", b, err, tt.want)
			}
			parsed, err := sluice.ParseAlgorithm(tt.want)
			if err != nil || parsed != tt.give {
				t.Errorf("ParseAlgorithm(%q) = %v, %v, want %v, nil", tt.want, parsed, err, tt.give)
			}
			var u sluice.Algorithm
			if err := u.UnmarshalText(b); err != nil || u != tt.give {
				t.Errorf("UnmarshalText(%q) = %v, %v, want %v, nil", b, u, err, tt.give)
			}
		})
	}
}

func TestAlgorithmTextErrors(t *testing.T) {
	tests := []struct {
		give    string
		wantErr string
	}{
		{"", `unknown algorithm ""`},
		{"GCRA", `unknown algorithm "GCRA"`},
		{"sliding-window", `unknown algorithm "sliding-window"`},
		{" gcra", `unknown algorithm " gcra"`},
		{"leaky_bucket", `unknown algorithm "leaky_bucket"`},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			a, err := sluice.ParseAlgorithm(tt.give)
			if a != 0 || !errors.Is(err, sluice.ErrInvalidLimit) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseAlgorithm(%q) = %v, %v, want 0 and an ErrInvalidLimit containing %q", tt.give, a, err, tt.wantErr)
			}
			u := sluice.GCRA
			if err := u.UnmarshalText([]byte(tt.give)); !errors.Is(err, sluice.ErrInvalidLimit) || u != sluice.GCRA {
				t.Errorf("UnmarshalText(%q) = %v leaving %v, want ErrInvalidLimit leaving gcra", tt.give, err, u)
			}
		})
	}
	for _, a := range []sluice.Algorithm{0, 6, 255} {
		if b, err := a.MarshalText(); !errors.Is(err, sluice.ErrInvalidLimit) || b != nil {
			t.Errorf("Algorithm(%d).MarshalText() = %q, %v, want nil and ErrInvalidLimit", a, b, err)
		}
	}
	if got, want := sluice.Algorithm(0).String(), "Algorithm(0)"; got != want {
		t.Errorf("Algorithm(0).String() = %q, want %q", got, want)
	}
}

// TestLimitJSON: Algorithm is a TextMarshaler, so a Limit reads and writes
// its algorithm by name, and a zero Algorithm cannot be written.
func TestLimitJSON(t *testing.T) {
	give := sluice.PerSecond(7).With(sluice.TokenBucket).WithBurst(2)
	b, err := json.Marshal(give)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"Algorithm":"token_bucket","Rate":7,"Period":1000000000,"Burst":2}`; got != want {
		t.Errorf("json.Marshal = %s, want %s", got, want)
	}
	var back sluice.Limit
	if err := json.Unmarshal(b, &back); err != nil || back != give {
		t.Errorf("json.Unmarshal(%s) = %+v, %v, want %+v", b, back, err, give)
	}
	if _, err := json.Marshal(sluice.Limit{Rate: 1}); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("json.Marshal of a zero Algorithm = %v, want ErrInvalidLimit", err)
	}
}

// TestLimitErrorField: Validate's error is a *LimitError naming the field,
// at the edge of each bound: the largest value admitted is valid, one past
// it names its field.
func TestLimitErrorField(t *testing.T) {
	log := func(rate int) sluice.Limit {
		return sluice.Limit{Algorithm: sluice.SlidingLog, Rate: rate, Period: time.Hour}
	}
	for _, rate := range []int{1000, 100_000, 3_600_000_000} {
		if err := log(rate).Validate(); err != nil {
			t.Errorf("sliding log of %d an hour: Validate() = %v, want nil", rate, err)
		}
	}
	tests := []struct {
		name  string
		give  sluice.Limit
		field string
	}{
		{"algorithm", sluice.Limit{Rate: 1, Period: time.Second}, "Algorithm"},
		{"rate", sluice.Limit{Algorithm: sluice.GCRA, Period: time.Second}, "Rate"},
		{"sliding log rate", log(3_600_000_001), "Rate"},
		{"period", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Microsecond}, "Period"},
		{"period too long", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: 200 * 365 * 24 * time.Hour}, "Period"},
		{"burst", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: 24 * time.Hour, Burst: 100_000}, "Burst"},
	}
	for _, tt := range tests {
		var le *sluice.LimitError
		if err := tt.give.Validate(); !errors.As(err, &le) || le.Field != tt.field {
			t.Errorf("%s: Validate() = %v, want a *LimitError with Field %q", tt.name, err, tt.field)
		}
	}
	var le *sluice.LimitError
	if _, err := sluice.ParseAlgorithm("leaky"); !errors.As(err, &le) || le.Field != "Algorithm" || !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("ParseAlgorithm(leaky) = %v, want a *LimitError with Field Algorithm", err)
	}
}
