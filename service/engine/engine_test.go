package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
)

const testConfig = `
domain: t
descriptors:
  - key: fw
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: all
    rate_limit: {unit: minute, requests_per_unit: 5, counting: all}
  - key: adm
    rate_limit: {unit: minute, requests_per_unit: 5, counting: admitted}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_log}
  - key: ten
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: det
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: unl
    rate_limit: {unlimited: true}
`

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// recorder keeps every Report.
type recorder struct {
	NopObserver
	mu      sync.Mutex
	reports []Report
}

func (r *recorder) Decided(rep Report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports = append(r.reports, rep)
}

func (r *recorder) take() []Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reports
	r.reports = nil
	return out
}

// newEngine is an Engine of testConfig on a memory store, 10 s into a
// minute.
func newEngine(t *testing.T, opts ...Option) (*Engine, *clock, *recorder) {
	t.Helper()
	cfg, err := config.Parse("t.yaml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2026, 11, 29, 9, 0, 10, 0, time.UTC)}
	st := memstore.New(memstore.WithClock(clk.now))
	t.Cleanup(func() { st.Close() })
	rec := &recorder{}
	return New(st, cfg, append([]Option{WithClock(clk.now), WithObserver(rec)}, opts...)...), clk, rec
}

// d is a descriptor key=value of cost hits (-1: the request's).
func d(key, value string, hits int) Descriptor {
	x := Descriptor{Entries: []Entry{{Key: key, Value: value}}}
	if hits >= 0 {
		x.Hits, x.HasHits = uint64(hits), true
	}
	return x
}

// refund is a descriptor giving hits back.
func refund(key, value string, hits int) Descriptor {
	x := d(key, value, hits)
	x.NegativeHits = true
	return x
}

// got is what a test compares of a status: its code and remaining.
type got struct {
	Code      Code
	Remaining uint32
}

func decide(t *testing.T, e *Engine, ds ...Descriptor) (Code, []got) {
	t.Helper()
	res, err := e.Decide(context.Background(), &Request{Domain: "t", Descriptors: ds})
	if err != nil {
		t.Fatalf("Decide(%v) = %v", ds, err)
	}
	out := make([]got, len(res.Statuses))
	for i, st := range res.Statuses {
		out[i] = got{st.Code, st.Remaining}
	}
	return res.Code, out
}

type step struct {
	give     []Descriptor
	want     Code
	wantEach []got
}

func TestCounting(t *testing.T) {
	ok5 := func(rem uint32) []got { return []got{{OK, rem}} }
	over := []got{{OverLimit, 0}}
	spend := func(key string, n int) []step { // n costs of 1 from 5 remaining
		var s []step
		for i := range n {
			s = append(s, step{[]Descriptor{d(key, "a", 1)}, OK, ok5(uint32(4 - i))})
		}
		return s
	}
	cat := func(ss ...[]step) []step {
		var out []step
		for _, s := range ss {
			out = append(out, s...)
		}
		return out
	}
	tests := []struct {
		name  string
		opts  []Option
		steps []step
	}{
		{"admitted: denied hits are not counted", nil, cat(spend("fw", 5), []step{
			{[]Descriptor{d("fw", "a", 1)}, OverLimit, over},
			{[]Descriptor{d("fw", "a", 1)}, OverLimit, over},
			{[]Descriptor{d("fw", "a", 0)}, OK, ok5(0)}, // the peek sees 5
		})},
		{"all: denied hits are counted, a peek in debt is denied", []Option{WithCounting(sluice.CountAll)}, cat(spend("fw", 5), []step{
			{[]Descriptor{d("fw", "a", 1)}, OverLimit, over},
			{[]Descriptor{d("fw", "a", 0)}, OverLimit, over},
		})},
		{"a rule counting all under the default", nil, cat(spend("all", 5), []step{
			{[]Descriptor{d("all", "a", 1)}, OverLimit, over},
			{[]Descriptor{d("all", "a", 0)}, OverLimit, over},
		})},
		{"a rule counting admitted under --counting all", []Option{WithCounting(sluice.CountAll)}, cat(spend("adm", 5), []step{
			{[]Descriptor{d("adm", "a", 1)}, OverLimit, over},
			{[]Descriptor{d("adm", "a", 0)}, OK, ok5(0)},
		})},
		{"sliding_log counts admitted under --counting all", []Option{WithCounting(sluice.CountAll)}, cat(spend("log", 5), []step{
			{[]Descriptor{d("log", "a", 1)}, OverLimit, over},
			{[]Descriptor{d("log", "a", 0)}, OK, ok5(0)},
		})},
		{"all: a cost above the capacity is charged", []Option{WithCounting(sluice.CountAll)}, []step{
			{[]Descriptor{d("fw", "a", 7)}, OverLimit, over},
			{[]Descriptor{d("fw", "a", 0)}, OverLimit, over},
		}},
		{"admitted: a cost above the capacity counts nothing", nil, []step{
			{[]Descriptor{d("fw", "a", 7)}, OverLimit, over},
			{[]Descriptor{d("fw", "a", 0)}, OK, ok5(5)},
		}},
		{"a denial by a limit counting all: those counting admitted count nothing", nil, []step{
			{[]Descriptor{d("all", "a", 6), d("fw", "a", 1)}, OverLimit, []got{{OverLimit, 0}, {OK, 5}}},
			{[]Descriptor{d("fw", "a", 0), d("all", "a", 0)}, OverLimit, []got{{OK, 5}, {OverLimit, 0}}},
		}},
		{"a denial by a limit counting admitted: those counting all are charged", nil, []step{
			{[]Descriptor{d("fw", "a", 6), d("all", "a", 2)}, OverLimit, []got{{OverLimit, 0}, {OK, 3}}},
			{[]Descriptor{d("all", "a", 0), d("fw", "a", 0)}, OK, []got{{OK, 3}, {OK, 5}}},
		}},
		{"limits counting admitted stay all or nothing", nil, []step{
			{[]Descriptor{d("fw", "a", 5), d("ten", "a", 3)}, OK, []got{{OK, 0}, {OK, 7}}},
			{[]Descriptor{d("ten", "a", 1), d("fw", "a", 1)}, OverLimit, []got{{OK, 7}, {OverLimit, 0}}},
			{[]Descriptor{d("ten", "a", 0)}, OK, []got{{OK, 7}}},
		}},
		{"the same counter twice, counting all: both charged, in order", []Option{WithCounting(sluice.CountAll)}, []step{
			{[]Descriptor{d("fw", "a", 4), d("fw", "a", 2)}, OverLimit, []got{{OK, 1}, {OverLimit, 0}}},
			{[]Descriptor{d("fw", "a", 0)}, OverLimit, over},
		}},
		{"requests_per_unit 0, counting admitted: a peek is OK", nil, []step{
			{[]Descriptor{d("blocked", "a", 0)}, OK, []got{{OK, 0}}},
			{[]Descriptor{d("blocked", "a", 1), d("fw", "a", 1)}, OverLimit, []got{{OverLimit, 0}, {OK, 5}}},
			{[]Descriptor{d("blocked", "a", 0)}, OK, []got{{OK, 0}}},
		}},
		{"requests_per_unit 0, counting all: a peek after a hit is over", []Option{WithCounting(sluice.CountAll)}, []step{
			{[]Descriptor{d("blocked", "a", 0)}, OK, []got{{OK, 0}}},
			{[]Descriptor{d("blocked", "a", 1), d("fw", "a", 1)}, OverLimit, []got{{OverLimit, 0}, {OK, 4}}},
			{[]Descriptor{d("blocked", "a", 0)}, OverLimit, []got{{OverLimit, 0}}},
		}},
		{"refund: hits given back", nil, cat(spend("fw", 3), []step{
			{[]Descriptor{refund("fw", "a", 2)}, OK, []got{{OK, 0}}},
			{[]Descriptor{d("fw", "a", 1)}, OK, ok5(3)},
		})},
		{"refund: never beyond an untouched key", nil, cat(spend("fw", 1), []step{
			{[]Descriptor{refund("fw", "a", 10)}, OK, []got{{OK, 0}}},
			{[]Descriptor{d("fw", "a", 1)}, OK, ok5(4)},
		})},
		{"refund: a debt counted all is repaid", []Option{WithCounting(sluice.CountAll)}, []step{
			{[]Descriptor{d("fw", "a", 8)}, OverLimit, over},
			{[]Descriptor{refund("fw", "a", 5)}, OK, []got{{OK, 0}}},
			{[]Descriptor{d("fw", "a", 1)}, OK, ok5(1)},
		}},
		{"refund and spend in one request: the refund first", nil, cat(spend("fw", 5), []step{
			{[]Descriptor{d("fw", "a", 1), refund("fw", "a", 1)}, OK, []got{{OK, 0}, {OK, 0}}},
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _, _ := newEngine(t, tt.opts...)
			for i, s := range tt.steps {
				code, each := decide(t, e, s.give...)
				if code != s.want || !cmp.Equal(each, s.wantEach) {
					t.Errorf("step %d: Decide(%v) = %v %v, want %v %v", i, s.give, code, each, s.want, s.wantEach)
				}
			}
		})
	}
}

// TestCountAllResets: a debt is repaid by the next window.
func TestCountAllResets(t *testing.T) {
	e, clk, _ := newEngine(t, WithCounting(sluice.CountAll))
	decide(t, e, d("fw", "a", 9))
	if code, _ := decide(t, e, d("fw", "a", 0)); code != OverLimit {
		t.Fatalf("a peek in debt = %v, want OverLimit", code)
	}
	clk.add(50 * time.Second) // the next minute
	if code, each := decide(t, e, d("fw", "a", 1)); code != OK || each[0].Remaining != 4 {
		t.Errorf("next window: %v %v, want OK with 4 remaining", code, each)
	}
}

func TestRefundStatus(t *testing.T) {
	e, _, rec := newEngine(t)
	res, err := e.Decide(context.Background(), &Request{Domain: "t", Descriptors: []Descriptor{refund("fw", "a", 2), d("ten", "a", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	st := res.Statuses[0]
	if st.Code != OK || !st.Refund || st.Rule == nil || st.Rule.Name != "t.fw" || st.HasReset {
		t.Errorf("refund status = %+v, want OK, Refund, rule t.fw, no reset", st)
	}
	if i := res.Closest(false); i != 1 {
		t.Errorf("Closest = %d, want 1: a refund is never described by the headers", i)
	}
	reps := rec.take()
	if len(reps) != 2 || reps[1].Outcome != OutcomeRefunded || reps[1].Hits != 2 || reps[1].Rule != "t.fw" {
		t.Errorf("reports = %+v, want the refund of 2 on t.fw last", reps)
	}
}

// noLeaser is a store that cannot give hits back.
type noLeaser struct{ sluice.Store }

func TestRefundNeedsLeaser(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	defer st.Close()
	// A store that is no Reserver, and a wrapper that is one over a store
	// that is not (its Return says so).
	for _, s := range []sluice.Store{noLeaser{st}, unsupported{st}} {
		e := New(s, cfg)
		_, err = e.Decide(context.Background(), &Request{Domain: "t", Descriptors: []Descriptor{d("fw", "a", 1), refund("fw", "a", 1)}})
		var re *RequestError
		if !errors.As(err, &re) || re.Field != "descriptors[1].is_negative_hits" {
			t.Errorf("%T: Decide = %v, want a RequestError naming descriptors[1].is_negative_hits", s, err)
		}
	}
	res, err := New(st, cfg).Decide(context.Background(), &Request{Domain: "t", Descriptors: []Descriptor{d("fw", "a", 0)}})
	if err != nil || res.Statuses[0].Remaining != 5 {
		t.Errorf("after the refused requests: %+v, %v; want 5 remaining: they counted nothing", res, err)
	}
}

// unsupported is a wrapper that is a MultiStore and a Reserver over a store
// that is neither, as the observed store and the library's wrappers are:
// AllowMulti and Return fail with the errors that say so.
type unsupported struct{ sluice.Store }

func (unsupported) AllowMulti(context.Context, []sluice.Request) ([]sluice.Decision, error) {
	return nil, fmt.Errorf("%w: test", sluice.ErrMultiUnsupported)
}

func (unsupported) Reserve(context.Context, string, sluice.Limit, int) (sluice.Decision, time.Time, error) {
	return sluice.Decision{}, time.Time{}, fmt.Errorf("%w: test", sluice.ErrReserveUnsupported)
}

func (unsupported) Return(context.Context, string, sluice.Limit, int, time.Time) error {
	return fmt.Errorf("%w: test", sluice.ErrReserveUnsupported)
}

// A store whose AllowMulti is unsupported decides limit by limit, as one
// that has none.
func TestMultiUnsupported(t *testing.T) {
	e, _, _ := newEngine(t)
	e = New(unsupported{e.store}, e.Config())
	res, err := e.Decide(context.Background(), &Request{Domain: "t", Descriptors: []Descriptor{d("fw", "a", 2), d("ten", "a", 3)}})
	if err != nil || res.Code != OK || res.Statuses[0].Remaining != 3 || res.Statuses[1].Remaining != 7 {
		t.Fatalf("Decide = %+v, %v; want OK with 3 and 7 remaining", res, err)
	}
}

func TestRequestErrors(t *testing.T) {
	e, _, _ := newEngine(t, WithBounds(Bounds{MaxHits: 10, MaxDescriptors: 2, MaxDescriptorEntries: 1, MaxRate: 100, MaxPeriod: time.Hour}))
	over := d("fw", "a", -1)
	over.Limit = &Override{RequestsPerUnit: 3, Unit: "UNKNOWN"}
	tests := []struct {
		name      string
		give      Request
		wantField string
		wantMsg   string
		wantBound bool
	}{
		{"empty domain", Request{Descriptors: []Descriptor{d("fw", "a", 1)}}, "domain", "rate limit domain must not be empty", false},
		{"no descriptors", Request{Domain: "t"}, "descriptors", "rate limit descriptor list must not be empty", false},
		{"no entries", Request{Domain: "t", Descriptors: []Descriptor{d("fw", "a", 1), {}}}, "descriptors[1]", "descriptors[1] has no entries", false},
		{"too many descriptors", Request{Domain: "t", Descriptors: make([]Descriptor, 3)}, "descriptors", "descriptors 3 exceeds --max-descriptors 2", true},
		{"hits beyond the bound", Request{Domain: "t", Descriptors: []Descriptor{d("fw", "a", 11)}}, "descriptors[0].hits_addend", "descriptors[0].hits_addend 11 exceeds --max-hits 10", true},
		{"request hits beyond the bound", Request{Domain: "t", Hits: 11, Descriptors: []Descriptor{d("fw", "a", -1)}}, "hits_addend", "hits_addend 11 exceeds --max-hits 10", true},
		{"refund hits beyond the bound", Request{Domain: "t", Descriptors: []Descriptor{refund("fw", "a", 11)}}, "descriptors[0].hits_addend", "descriptors[0].hits_addend 11 exceeds --max-hits 10", true},
		{"override of an unknown unit", Request{Domain: "t", Descriptors: []Descriptor{over}}, "descriptors[0].limit", "descriptors[0].limit: unit UNKNOWN is not supported", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Decide(context.Background(), &tt.give)
			var re *RequestError
			var be *BoundError
			if !errors.As(err, &re) || re.Field != tt.wantField || re.Error() != tt.wantMsg || errors.As(err, &be) != tt.wantBound {
				t.Errorf("Decide = %v (%#v), want a RequestError on %q: %q (a bound: %v)", err, err, tt.wantField, tt.wantMsg, tt.wantBound)
			}
		})
	}
}

// TestStoreError: a store that fails is a StoreError; one that refuses the
// request's key is a RequestError.
func TestStoreError(t *testing.T) {
	e, _, _ := newEngine(t)
	st := memstore.New()
	st.Close()
	e.store = st
	e.multi = true
	_, err := e.Decide(context.Background(), &Request{Domain: "t", Descriptors: []Descriptor{d("fw", "a", 1)}})
	var se *StoreError
	if !errors.As(err, &se) || !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("Decide on a closed store = %v, want a StoreError wrapping ErrClosed", err)
	}
	e, _, _ = newEngine(t)
	long := make([]byte, sluice.MaxKeyLen)
	_, err = e.Decide(context.Background(), &Request{Domain: "t", Descriptors: []Descriptor{d("fw", string(long), 1)}})
	var re *RequestError
	if !errors.As(err, &re) || !errors.Is(err, sluice.ErrInvalidKey) {
		t.Errorf("Decide with a key too long = %v, want a RequestError wrapping ErrInvalidKey", err)
	}
}

func TestUnknownDomainUnmatchedUnlimited(t *testing.T) {
	e, _, _ := newEngine(t)
	res, err := e.Decide(context.Background(), &Request{Domain: "other", Descriptors: []Descriptor{d("fw", "a", 1)}})
	if err != nil || res.Code != OK || res.Statuses[0].Code != OK || res.Statuses[0].Rule != nil {
		t.Errorf("unknown domain = %+v %v, want OK with no limit", res, err)
	}
	res, err = e.Decide(context.Background(), &Request{Domain: "t", Descriptors: []Descriptor{d("nope", "a", 1), d("unl", "a", 1)}})
	if err != nil || res.Code != OK || res.Statuses[0].Rule != nil || !res.Statuses[1].Unlimited || res.Statuses[1].Rule != nil {
		t.Errorf("unmatched and unlimited = %+v %v, want OK with no limits, the second unlimited", res, err)
	}
	if i := res.Closest(false); i != -1 {
		t.Errorf("Closest = %d, want -1", i)
	}
}

func TestShadowMode(t *testing.T) {
	e, _, _ := newEngine(t, WithShadowMode(true))
	decide(t, e, d("fw", "a", 5))
	res, err := e.Decide(context.Background(), &Request{Domain: "t", Descriptors: []Descriptor{d("fw", "a", 1)}})
	if err != nil || res.Code != OK || !res.Denied || res.Statuses[0].Code != OverLimit {
		t.Errorf("shadow mode over the limit = %+v %v, want overall OK, Denied, the status OverLimit", res, err)
	}
}

// TestSplit: the reference's within_limit, near_limit and over_limit of a
// limit of 10 with the near-limit threshold at 8.
func TestSplit(t *testing.T) {
	tests := []struct {
		before, hits     int
		denied           bool
		within, near, ov int
	}{
		{0, 1, false, 1, 0, 0},
		{7, 1, false, 1, 0, 0},  // 8 is not above 8
		{8, 1, false, 1, 1, 0},  // 9 is
		{6, 4, false, 4, 2, 0},  // 9 and 10
		{9, 0, false, 0, 0, 0},  // a peek
		{10, 1, true, 0, 0, 1},  // all over
		{12, 3, true, 0, 0, 3},  // all over
		{6, 5, true, 0, 2, 1},   // 9, 10 near, 11 over
		{9, 5, true, 0, 1, 4},   // 10 near, the rest over
		{0, 20, true, 0, 2, 10}, // the threshold to the limit near
	}
	for _, tt := range tests {
		w, n, o := split(10, tt.before, tt.hits, tt.denied, 0.8)
		if w != tt.within || n != tt.near || o != tt.ov {
			t.Errorf("split(10, before %d, hits %d, denied %v) = %d, %d, %d; want %d, %d, %d", tt.before, tt.hits, tt.denied, w, n, o, tt.within, tt.near, tt.ov)
		}
	}
}

// TestNearLimitReports: the reports of a sequence on a limit of 10 split
// the hits as the reference does, in either counting.
func TestNearLimitReports(t *testing.T) {
	type split struct{ Within, Near, Over int }
	tests := []struct {
		name  string
		opts  []Option
		hits  []int
		wants []split
	}{
		{"admitted", nil, []int{6, 3, 1, 5, 1}, []split{{6, 0, 0}, {3, 1, 0}, {1, 1, 0}, {0, 0, 5}, {0, 0, 1}}},
		{"admitted, a denial from below the limit", nil, []int{6, 5}, []split{{6, 0, 0}, {0, 2, 1}}},
		{"ratio 0.5", []Option{WithNearLimitRatio(0.5)}, []int{4, 2, 4}, []split{{4, 0, 0}, {2, 1, 0}, {4, 4, 0}}},
		{"all: a charge over the limit counts over", []Option{WithCounting(sluice.CountAll)}, []int{9, 3}, []split{{9, 1, 0}, {0, 0, 3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _, rec := newEngine(t, tt.opts...)
			for i, h := range tt.hits {
				decide(t, e, d("ten", "a", h))
				reps := rec.take()
				if len(reps) != 1 {
					t.Fatalf("step %d: %d reports, want 1", i, len(reps))
				}
				if got := (split{reps[0].Within, reps[0].Near, reps[0].Over}); got != tt.wants[i] || reps[0].Hits != h {
					t.Errorf("step %d (hits %d): %+v of %d hits, want %+v", i, h, got, reps[0].Hits, tt.wants[i])
				}
			}
		})
	}
}

func TestDetail(t *testing.T) {
	e, _, rec := newEngine(t)
	decide(t, e, d("det", "v1", 1), d("ten", "v1", 1))
	reps := rec.take()
	if len(reps) != 2 || reps[0].Detail != "t.det_v1" || reps[1].Detail != "" {
		t.Errorf("reports = %+v, want the detailed name t.det_v1 for the detailed_metric rule only", reps)
	}
}

func TestLimitOf(t *testing.T) {
	lim := func(rate int, p time.Duration) sluice.Limit {
		return sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: rate, Period: p}
	}
	tests := []struct {
		give config.Rule
		want CurrentLimit
	}{
		{config.Rule{Limit: lim(5, time.Minute), Unit: "MINUTE"}, CurrentLimit{RequestsPerUnit: 5, Unit: "MINUTE"}},
		{config.Rule{ConfiguredName: "w", Limit: lim(5, 30*time.Second)}, CurrentLimit{Name: "w", RequestsPerUnit: 5, Unit: "SECOND", Multiplier: 30}},
		{config.Rule{Limit: lim(3, 2*time.Hour)}, CurrentLimit{RequestsPerUnit: 3, Unit: "HOUR", Multiplier: 2}},
		{config.Rule{Limit: lim(3, 1500*time.Millisecond)}, CurrentLimit{RequestsPerUnit: 2, Unit: "SECOND"}},
	}
	for _, tt := range tests {
		if got := LimitOf(&tt.give); got != tt.want {
			t.Errorf("LimitOf(%v) = %+v, want %+v", tt.give.Limit, got, tt.want)
		}
	}
}
