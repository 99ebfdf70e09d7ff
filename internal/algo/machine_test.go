package algo

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// machine holds one key's state for any algorithm and applies its step
// function, so that tables and property tests can drive all five alike.
type machine struct {
	p Params
	w Window
	c Counter
	b Bucket
	t TAT
	l Log
}

func newMachine(p Params) *machine { return &machine{p: p} }

// step applies one step, keeping the state the step function returns.
func (m *machine) step(now, n int64) Result {
	var r Result
	switch m.p.Kind {
	case FixedWindow:
		m.w, r = FixedWindowStep(m.w, now, m.p, n)
	case SlidingWindow:
		m.c, r = SlidingWindowStep(m.c, now, m.p, n)
	case TokenBucket:
		m.b, r = TokenBucketStep(m.b, now, m.p, n)
	case GCRA:
		m.t, r = GCRAStep(m.t, now, m.p, n)
	case SlidingLog:
		r = SlidingLogStep(&m.l, now, m.p, n, true)
	default:
		panic(fmt.Sprintf("unknown kind %d", m.p.Kind))
	}
	return r
}

// ret gives back n units admitted at at through the Return functions (now
// is at: the lease is returned at once).
func (m *machine) ret(at, n int64) {
	switch m.p.Kind {
	case FixedWindow:
		m.w = FixedWindowReturn(m.w, at, m.p, n)
	case SlidingWindow:
		m.c = SlidingWindowReturn(m.c, at, m.p, n)
	case TokenBucket:
		m.b = TokenBucketReturn(m.b, at, at, m.p, n)
	case GCRA:
		m.t = GCRAReturn(m.t, at, at, m.p, n)
	case SlidingLog:
		SlidingLogReturn(&m.l, at, at, m.p, n)
	}
}

// clone returns a deep copy: stepping the copy leaves m as it is.
func (m *machine) clone() *machine {
	c := *m
	c.l.buf = slices.Clone(m.l.buf)
	return &c
}

// entries returns the times of the log's units, oldest first: one per
// unit, expired ones included until they are dropped.
func (l *Log) entries() []int64 {
	out := []int64{}
	for i := range l.n {
		for range l.units(i) {
			out = append(out, l.entry(i).at)
		}
	}
	return out
}

// liveUnits returns the times of the log's units that still count at now
// (clamped to the newest entry, as SlidingLogStep does).
func (l *Log) liveUnits(now int64, period int64) []int64 {
	if l.n > 0 {
		now = max(now, l.Newest())
	}
	var out []int64
	for _, v := range l.entries() {
		if v > now-period {
			out = append(out, v)
		}
	}
	return out
}

// state describes the algorithm's state as seen by a step at now: two
// states with the same description decide every later step alike.
func (m *machine) state(now int64) string {
	switch m.p.Kind {
	case FixedWindow:
		return fmt.Sprintf("%+v", m.w)
	case SlidingWindow:
		return fmt.Sprintf("%+v", m.c)
	case TokenBucket:
		return fmt.Sprintf("%+v", m.b)
	case GCRA:
		return fmt.Sprintf("%+v", m.t)
	}
	live := m.l.liveUnits(now, m.p.Period)
	if len(live) <= 8 {
		return fmt.Sprint(live)
	}
	sum := uint64(0)
	for _, v := range live {
		sum = sum*1_000_003 + uint64(v)
	}
	return fmt.Sprintf("%d entries from %d to %d, checksum %x", len(live), live[0], live[len(live)-1], sum)
}

// step is one row of a step table: at µs, ask for n, want the result.
type step struct {
	at   int64
	n    int64
	want Result
}

// runSteps applies steps in order to a fresh state of p and checks every
// result, and that denials and peeks leave the state as it was.
func runSteps(t *testing.T, p Params, steps []step) *machine {
	t.Helper()
	m := newMachine(p)
	for i, s := range steps {
		before := m.state(s.at)
		got := m.step(s.at, s.n)
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Fatalf("step %d: Allow(%d) at %dµs = %+v, want %+v (-want +got):\n%s", i, s.n, s.at, got, s.want, diff)
		}
		if after := m.state(s.at); (!got.Allowed || s.n == 0) && after != before {
			t.Fatalf("step %d: Allow(%d) at %dµs (allowed %v) changed the state from %s to %s", i, s.n, s.at, got.Allowed, before, after)
		}
	}
	return m
}

func allowed(remaining, reset int64) Result {
	return Result{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

func denied(remaining, retry, reset int64) Result {
	return Result{Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

const sec = 1_000_000 // µs

func TestNewParams(t *testing.T) {
	tests := []struct {
		name                string
		kind                Kind
		rate, burst, period int64
		want                Params
	}{
		{"gcra burst 0 is rate", GCRA, 10, 0, sec, Params{Kind: GCRA, Rate: 10, Period: sec, Cap: 10, R: 1, P: 100_000, Ahead: sec + 1, Debt: MaxBucketDebt}},
		{"token bucket burst", TokenBucket, 7, 2, sec, Params{Kind: TokenBucket, Rate: 7, Period: sec, Cap: 2, R: 7, P: sec, Ahead: 2*sec/7 + 1, Debt: MaxBucketDebt}},
		{"gcra burst above rate", GCRA, 3, 5, sec, Params{Kind: GCRA, Rate: 3, Period: sec, Cap: 5, R: 3, P: sec, Ahead: 5*sec/3 + 1, Debt: MaxBucketDebt}},
		{"burst ignored by fixed window", FixedWindow, 4, 9, 60 * sec, Params{Kind: FixedWindow, Rate: 4, Period: 60 * sec, Cap: 4, R: 1, P: 15 * sec, Debt: MaxCountDebt}},
		{"sliding log", SlidingLog, 6, 0, 1500, Params{Kind: SlidingLog, Rate: 6, Period: 1500, Cap: 6, R: 1, P: 250}},
		{"sliding window coprime", SlidingWindow, 9, 0, 1000, Params{Kind: SlidingWindow, Rate: 9, Period: 1000, Cap: 9, R: 9, P: 1000, Debt: (MaxExact-1)/1000 - 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NewParams(tt.kind, tt.rate, tt.burst, tt.period)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("NewParams(%d, %d, %d, %d) = %+v, want %+v", tt.kind, tt.rate, tt.burst, tt.period, got, tt.want)
			}
		})
	}
}
