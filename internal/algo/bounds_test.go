package algo

import (
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestCheckBounds(t *testing.T) {
	const day = 86_400 * sec
	swMax := int64((MaxExact-1)/day - 1) // largest sliding_window Rate for a 1-day Period
	tests := []struct {
		name                string
		kind                Kind
		rate, burst, period int64
	}{
		{"fixed window, largest rate", FixedWindow, MaxExact/2 - 1, 0, sec},
		{"sliding log, largest rate", SlidingLog, sec, 0, sec},
		{"sliding log, 100,000 an hour", SlidingLog, 100_000, 0, 3600 * sec},
		{"sliding log, 1ms, one per µs", SlidingLog, 1000, 0, 1000},
		{"sliding window, 1 day, largest rate", SlidingWindow, swMax, 0, day},
		{"token bucket, burst at the edge", TokenBucket, 1, (MaxExact-1)/(2*day) - 1, day},
		{"gcra, burst 0, largest rate", GCRA, 643_371_145, 0, 7_000_001},
		{"gcra, a common divisor helps", GCRA, 1_000_000, 1 << 40, sec},
		{"token bucket, rate above burst, still exact", TokenBucket, MaxExact/8 - 1, 1, sec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := CheckBounds(tt.kind, tt.rate, tt.burst, tt.period); err != nil {
				t.Errorf("CheckBounds(%d, %d, %d, %d) = %v, want nil", tt.kind, tt.rate, tt.burst, tt.period, err)
			}
		})
	}
}

func TestCheckBoundsErrors(t *testing.T) {
	const day = 86_400 * sec
	swMax := int64((MaxExact-1)/day - 1)
	tests := []struct {
		name                string
		kind                Kind
		rate, burst, period int64
		wantErr             string
	}{
		{"fixed window, rate too large", FixedWindow, MaxExact / 2, 0, sec, "Rate 4503599627370496 is too large"},
		{"sliding log, rate too large", SlidingLog, MaxExact / 2, 0, sec, "Rate 4503599627370496 per 1000000µs is more than sliding_log's maximum of one per microsecond"},
		{"sliding log, one past the maximum", SlidingLog, 1001, 0, 1000, "Rate 1001 per 1000µs is more than sliding_log's maximum of one per microsecond; use sliding_window"},
		{"period too long", FixedWindow, 1, 0, MaxExact / 2, "Period of 4503599627370496µs is too long"},
		{"sliding window, 1 day, rate too large", SlidingWindow, swMax + 1, 0, day, "Rate × Period (104249 × 86400000000µs) is too large"},
		{"token bucket, burst too large", TokenBucket, 1, (MaxExact-1)/(2*day) + 1, day, "Burst × Period/gcd(Rate, Period) (52125 × 86400000000µs) is too large for exact token_bucket"},
		{"gcra, burst 0 means rate", GCRA, 643_371_284, 0, 7_000_001, "Burst × Period/gcd(Rate, Period) (643371284 × 7000001µs) is too large for exact gcra"},
		{"gcra, burst 0, 2·Cap·P + 3·R too large", GCRA, 643_371_146, 0, 7_000_001, "Rate 643371146 per 7000001µs is too large for exact gcra arithmetic with Burst 643371146"},
		{"gcra, rate far above burst", GCRA, 1 << 62, 1, sec, "Rate 4611686018427387904 per 1000000µs is too large for exact gcra arithmetic with Burst 1"},
		{"token bucket, rate far above burst", TokenBucket, MaxExact/2 + 1, 1, sec + 1, "Rate 4503599627370497 per 1000001µs is too large for exact token_bucket"},
		{"unknown algorithm", Kind(9), 1, 0, sec, "unknown algorithm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckBounds(tt.kind, tt.rate, tt.burst, tt.period)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("CheckBounds(%d, %d, %d, %d) = %v, want an error containing %q", tt.kind, tt.rate, tt.burst, tt.period, err, tt.wantErr)
			}
		})
	}
}

// exactLimit reports whether the largest intermediate value the step
// functions form for p stays below 2^53, computed in math/big:
//   - fixed window and log: counts up to 2·Rate;
//   - sliding window: prev·(P-e), (a+1)·P and (Rate-n+1)·P, all at most
//     (Rate+1)·Period;
//   - buckets: GCRA's deficit (TAT-now)·R + Frac up to Cap·P + 2R, one
//     request more up to 2·Cap·P + 2R, ceil divisions adding R to those.
func exactLimit(p Params) bool {
	b := big.NewInt
	var worst *big.Int
	switch p.Kind {
	case FixedWindow, SlidingLog:
		worst = new(big.Int).Mul(b(2), b(p.Rate))
	case SlidingWindow:
		worst = new(big.Int).Mul(b(p.Rate+1), b(p.Period))
	case TokenBucket, GCRA:
		worst = new(big.Int).Mul(b(2*p.Cap), b(p.P))
		worst.Add(worst, new(big.Int).Mul(b(3), b(p.R)))
	}
	return worst.Cmp(b(MaxExact)) < 0 && p.Period < MaxExact/2
}

// TestCheckBoundsExact: every limit CheckBounds accepts keeps the math
// exact in doubles, over limits drawn log-uniformly up to 2^62.
func TestCheckBoundsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	logUniform := func() int64 { return 1 + rng.Int64N(int64(1)<<rng.IntN(62)) }
	accepted := 0
	for range 50_000 {
		k := kinds[rng.IntN(len(kinds))]
		rate, period := logUniform(), logUniform()
		burst := int64(0)
		if rng.IntN(2) == 0 {
			burst = logUniform()
		}
		if CheckBounds(k, rate, burst, period) != nil {
			continue
		}
		accepted++
		if p := NewParams(k, rate, burst, period); !exactLimit(p) {
			t.Fatalf("CheckBounds accepts %s (burst %d), whose math exceeds 2^53", describe(p), burst)
		}
	}
	if accepted < 2_000 {
		t.Fatalf("only %d limits accepted: the test draws too few valid limits", accepted)
	}
}

// TestExactAtTheEdge runs limits at the edge of CheckBounds, with large n,
// against the math/big reference models.
func TestExactAtTheEdge(t *testing.T) {
	const day = 86_400 * sec
	tests := []struct {
		name                string
		kind                Kind
		rate, burst, period int64
	}{
		{"fixed window, huge rate", FixedWindow, MaxExact/2 - 1, 0, sec},
		{"sliding window, 1 day", SlidingWindow, (MaxExact-1)/day - 1, 0, day},
		{"sliding window, 1ms", SlidingWindow, (MaxExact-1)/1000 - 1, 0, 1000},
		{"sliding window, prime period", SlidingWindow, (MaxExact-1)/999_983 - 1, 0, 999_983},
		{"token bucket, 1 day, rate 1", TokenBucket, 1, (MaxExact-1)/(2*day) - 1, day},
		{"gcra, 1 day, rate 1", GCRA, 1, (MaxExact-1)/(2*day) - 1, day},
		{"token bucket, coprime", TokenBucket, 999_983, (MaxExact - 1) / (2 * sec) / 2, sec},
		{"gcra, coprime", GCRA, 999_983, (MaxExact - 1) / (2 * sec) / 2, sec},
		{"gcra, burst 0, rate at the edge", GCRA, 643_371_145, 0, 7_000_001},
		{"token bucket, huge rate, burst 1", TokenBucket, MaxExact/8 - 1, 1, sec},
		{"gcra, huge rate, burst 3", GCRA, MaxExact/8 - 1, 3, sec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := CheckBounds(tt.kind, tt.rate, tt.burst, tt.period); err != nil {
				t.Fatalf("CheckBounds = %v: not a valid edge", err)
			}
			p := NewParams(tt.kind, tt.rate, tt.burst, tt.period)
			rng := rand.New(rand.NewPCG(uint64(tt.rate), uint64(tt.period)))
			for range 8 {
				ops := make([]op, 40)
				for i := range ops {
					switch rng.IntN(3) {
					case 0:
						ops[i].dt = rng.Int64N(p.Period/4 + 1)
					case 1:
						ops[i].dt = rng.Int64N(3*p.Period + 1)
					default:
						ops[i].dt = rng.Int64N(1000)
					}
					switch rng.IntN(4) {
					case 0:
						ops[i].n = p.Cap
					case 1:
						ops[i].n = 1
					default:
						ops[i].n = rng.Int64N(p.Cap + 1)
					}
				}
				checkSteps(t, p, 1_800_000_000*sec+rng.Int64N(day), ops)
			}
		})
	}
}
