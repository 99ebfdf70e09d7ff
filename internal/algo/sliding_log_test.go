package algo

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSlidingLogStep(t *testing.T) {
	const B = 3600 * sec
	tests := []struct {
		name      string
		rate, per int64
		steps     []step
	}{
		{
			name: "3 per 1s",
			rate: 3, per: sec,
			steps: []step{
				{at: B, n: 0, want: allowed(3, 0)},
				{at: B, n: 1, want: allowed(2, sec)},
				{at: B + 100_000, n: 1, want: allowed(1, sec)},
				{at: B + 200_000, n: 0, want: allowed(1, 900_000)},
				// 2 + 2 > 3: the oldest entry (B) must leave, at B+1s.
				{at: B + 300_000, n: 2, want: denied(1, 700_000, 800_000)},
				{at: B + 300_000, n: 1, want: allowed(0, sec)},
				// n = Cap: all three must leave; the third leaves at B+1.3s.
				{at: B + 400_000, n: 3, want: denied(0, 900_000, 900_000)},
				{at: B + 999_999, n: 1, want: denied(0, 1, 300_001)},
				// B is now outside (B+1s-P, B+1s].
				{at: B + sec, n: 1, want: allowed(0, sec)},
				// Backwards: seen as B+1s, where B+0.1s leaves first.
				{at: B + 500_000, n: 1, want: denied(0, 100_000, sec)},
				{at: B + 500_000, n: 0, want: allowed(0, sec)},
			},
		},
		{
			name: "the k-th oldest entry among equal stamps",
			rate: 3, per: sec,
			steps: []step{
				{at: B + 3*sec, n: 2, want: allowed(1, sec)},
				{at: B + 3_200_000, n: 1, want: allowed(0, sec)},
				{at: B + 3_500_000, n: 1, want: denied(0, 500_000, 700_000)},
				{at: B + 3_500_000, n: 2, want: denied(0, 500_000, 700_000)},
				{at: B + 3_500_000, n: 3, want: denied(0, 700_000, 700_000)},
				{at: B + 3_999_999, n: 2, want: denied(0, 1, 200_001)},
				{at: B + 4*sec, n: 2, want: allowed(0, sec)},
				{at: B + 4_200_000, n: 1, want: allowed(0, sec)},
				{at: B + 4_200_000, n: 3, want: denied(0, sec, sec)}, // the newest must leave too
			},
		},
		{
			name: "window not aligned to the epoch",
			rate: 2, per: 7 * sec,
			steps: []step{
				{at: 10 * sec, n: 1, want: allowed(1, 7*sec)},
				{at: 12 * sec, n: 1, want: allowed(0, 7*sec)},
				{at: 16 * sec, n: 1, want: denied(0, sec, 3*sec)},
				{at: 17 * sec, n: 1, want: allowed(0, 7*sec)},
				{at: 17 * sec, n: 2, want: denied(0, 7*sec, 7*sec)},
			},
		},
		{
			name: "1µs period",
			rate: 2, per: 1,
			steps: []step{
				{at: B, n: 2, want: allowed(0, 1)},
				{at: B, n: 1, want: denied(0, 1, 1)},
				{at: B + 1, n: 2, want: allowed(0, 1)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, NewParams(SlidingLog, tt.rate, 0, tt.per), tt.steps)
		})
	}
}

func TestSlidingLogNoCommit(t *testing.T) {
	p := NewParams(SlidingLog, 3, 0, sec)
	var l Log
	SlidingLogStep(&l, 10, p, 2, true)
	got := SlidingLogStep(&l, 20, p, 1, false)
	if diff := cmp.Diff(allowed(0, sec), got); diff != "" {
		t.Errorf("SlidingLogStep(commit=false) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{10, 10}, l.entries()); diff != "" {
		t.Errorf("entries after a step without commit (-want +got):\n%s", diff)
	}
}

// TestSlidingLogRing holds the ring's bounds: it never grows beyond Rate +
// 1 entries, and wraps around without losing order.
func TestSlidingLogRing(t *testing.T) {
	p := NewParams(SlidingLog, 20, 0, 100)
	for _, cost := range []int64{1, 3} {
		var l Log
		var want []int64
		for now := int64(1000); now < 1000+50*100; now += 1 + 2*cost {
			r := SlidingLogStep(&l, now, p, cost, true)
			for len(want) > 0 && want[0] <= now-100 {
				want = want[1:]
			}
			if r.Allowed {
				for range cost {
					want = append(want, now)
				}
			}
			if got := l.liveUnits(now, 100); !cmp.Equal(got, want) {
				t.Fatalf("cost %d at %d: units %v, want %v", cost, now, got, want)
			}
			if len(l.buf) > 21 {
				t.Fatalf("cost %d at %d: ring holds %d slots, more than Rate + 1 = 21", cost, now, len(l.buf))
			}
		}
		if l.head == 0 {
			t.Errorf("cost %d: the ring never wrapped (head 0): the test does not exercise wrapping", cost)
		}
	}
}

// logModel is the plainest sliding log: one time per unit, and the newest
// time admitted, to which a clock that runs backwards is clamped (a return
// does not move it back). A unit outside the window at one now counts
// again at an earlier one.
type logModel struct {
	units  []int64
	newest int64
	seen   bool
}

// live returns the units that count at now, clamped, and that now.
func (m *logModel) live(now int64, p Params) ([]int64, int64) {
	if m.seen {
		now = max(now, m.newest)
	}
	var live []int64
	for _, u := range m.units {
		if u > now-p.Period {
			live = append(live, u)
		}
	}
	return live, now
}

func (m *logModel) step(now int64, p Params, n int64) Result {
	live, now := m.live(now, p)
	count := int64(len(live))
	if n > 0 && count+n > p.Rate {
		return Result{Remaining: max(p.Rate-count, 0), RetryAfter: live[count+n-p.Rate-1] + p.Period - now, ResetAfter: live[count-1] + p.Period - now}
	}
	r := Result{Allowed: true, Remaining: max(p.Rate-count-n, 0)}
	switch {
	case n > 0:
		r.ResetAfter = p.Period
		for range n {
			m.units = append(m.units, now)
		}
		m.newest, m.seen = now, true
	case count > 0:
		r.ResetAfter = live[count-1] + p.Period - now
	}
	return r
}

// ret gives back up to n units stamped at (newest: the newest units) that
// count at now.
func (m *logModel) ret(at, now int64, p Params, n int64, newest bool) {
	_, now = m.live(now, p)
	for i := len(m.units) - 1; i >= 0 && n > 0; i-- {
		u := m.units[i]
		if u <= now-p.Period {
			break
		}
		if newest || u == at {
			m.units = append(m.units[:i], m.units[i+1:]...)
			n--
		}
	}
}

// TestSlidingLogModel holds the log, its entries shared by the units of
// one time, to the plainest model on random steps, returns and refunds
// (on fewer entries than LogReturnDepth, where a return reaches every
// unit), with the clock running back at times.
func TestSlidingLogModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 300 {
		rate := []int64{1, 3, 10, 50}[rng.IntN(4)]
		p := NewParams(SlidingLog, rate, 0, int64(1+rng.IntN(1000)))
		var l Log
		var m logModel
		var admitted []int64
		now := int64(1_000_000)
		for i := range 200 {
			switch rng.IntN(6) {
			case 0:
				now -= rng.Int64N(p.Period/2 + 1)
			case 1:
			default:
				now += rng.Int64N(p.Period/rate + 2)
			}
			switch rng.IntN(8) {
			case 0:
				k := 1 + rng.Int64N(rate)
				m.ret(0, now, p, k, true)
				SlidingLogReturnNewest(&l, now, p, k)
			case 1:
				if len(admitted) > 0 {
					at := admitted[rng.IntN(len(admitted))]
					k := 1 + rng.Int64N(rate)
					m.ret(at, now, p, k, false)
					SlidingLogReturn(&l, at, now, p, k)
				}
			default:
				n := rng.Int64N(rate + 1)
				want := m.step(now, p, n)
				got := SlidingLogStep(&l, now, p, n, true)
				if got != want {
					t.Fatalf("run %d step %d: SlidingLogStep(%d at %d, %d per %d) = %+v, want %+v", run, i, n, now, rate, p.Period, got, want)
				}
				if got.Allowed && n > 0 {
					admitted = append(admitted[max(len(admitted)-20, 0):], max(now, m.newest))
				}
			}
			if l.n > LogReturnDepth {
				t.Fatalf("run %d: %d entries, more than the test means (%d)", run, l.n, LogReturnDepth)
			}
		}
	}
}

// TestSlidingLogReturnDepth: a return reaches the newest LogReturnDepth
// entries; units admitted before them count until they expire.
func TestSlidingLogReturnDepth(t *testing.T) {
	p := NewParams(SlidingLog, 1000, 0, sec)
	var l Log
	for i := range int64(LogReturnDepth + 1) {
		SlidingLogStep(&l, 1000+i, p, 2, true)
	}
	SlidingLogReturn(&l, 1000, 1100, p, 2) // the oldest: LogReturnDepth entries after it
	if got := SlidingLogStep(&l, 1100, p, 0, false).Remaining; got != 1000-2*(LogReturnDepth+1) {
		t.Errorf("after a return beyond the depth: Remaining %d, want %d (nothing given back)", got, 1000-2*(LogReturnDepth+1))
	}
	SlidingLogReturn(&l, 1001, 1100, p, 1) // LogReturnDepth-1 entries after it
	if got := SlidingLogStep(&l, 1100, p, 0, false).Remaining; got != 1000-2*(LogReturnDepth+1)+1 {
		t.Errorf("after a return within the depth: Remaining %d, want %d", got, 1000-2*(LogReturnDepth+1)+1)
	}
	SlidingLogReturnNewest(&l, 1100, p, 1000)
	if got := SlidingLogStep(&l, 1100, p, 0, false).Remaining; got != 1000-2 {
		t.Errorf("after a refund of everything: Remaining %d, want %d (the units of the %d newest entries given back)", got, 1000-2, LogReturnDepth)
	}
	if got := l.entries(); !cmp.Equal(got, []int64{1000, 1000}) {
		t.Errorf("units left %v, want the oldest entry's (1000, 1000)", got)
	}
	if l.Newest() != 1000+LogReturnDepth {
		t.Errorf("newest time %d after the refund, want %d (kept, emptied)", l.Newest(), 1000+LogReturnDepth)
	}
}

// TestSlidingLogLarge: a log of 100,000 an hour admits costs of any size
// in one entry each, and finds the k-th oldest unit among them.
func TestSlidingLogLarge(t *testing.T) {
	const hour = 3600 * sec
	p := NewParams(SlidingLog, 100_000, 0, hour)
	var l Log
	now := int64(10 * hour)
	for i := range int64(1000) {
		if r := SlidingLogStep(&l, now+i*sec, p, 100, true); !r.Allowed || r.Remaining != 100_000-100*(i+1) {
			t.Fatalf("admission %d: %+v", i, r)
		}
	}
	if l.Len() != 1000 || len(l.buf) > 1024 {
		t.Errorf("%d entries in %d slots, want 1000 in at most 1024", l.Len(), len(l.buf))
	}
	// 250 units must leave: the 250th oldest is of the third entry.
	r := SlidingLogStep(&l, now+1000*sec, p, 250, true)
	if want := (Result{RetryAfter: 2*sec + hour - 1000*sec, ResetAfter: hour - sec}); r != want {
		t.Errorf("denial = %+v, want %+v", r, want)
	}
}
