package check

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/engine"
)

// Millis rounds a wait up to whole milliseconds, and a negative one (no
// wait) to 0, never below.
func TestMillis(t *testing.T) {
	for _, tt := range []struct {
		give time.Duration
		want int64
	}{
		{-2500 * time.Microsecond, 0},
		{-time.Second, 0},
		{-1, 0},
		{0, 0},
		{1, 1},
		{time.Millisecond, 1},
		{time.Millisecond + 1, 2},
		{1500 * time.Microsecond, 2},
		{time.Minute, 60000},
	} {
		if got := Millis(tt.give); got != tt.want {
			t.Errorf("Millis(%v) = %d, want %d", tt.give, got, tt.want)
		}
	}
}

func TestParse(t *testing.T) {
	one, zero, neg, two := 1, 0, -1, 2
	c, fe := Parse(Request{Key: "tenant-1", Algorithm: "gcra", Rate: 10, Period: "1m", Burst: 3}, engine.DefaultBounds)
	want := Check{Key: "tenant-1", Limit: sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Minute, Burst: 3}, N: 1}
	if fe != nil || c != want {
		t.Fatalf("Parse = %+v, %v; want %+v", c, fe, want)
	}
	if got := c.StoreKey(); got != "*check/tenant-1" {
		t.Errorf("StoreKey() = %q", got)
	}
	if c, fe := Parse(Request{Key: "k", Algorithm: "gcra", Rate: 1, Period: "1s", Cost: &zero}, engine.DefaultBounds); fe != nil || c.N != 0 {
		t.Errorf("a cost of 0 = %+v, %v; want N 0", c, fe)
	}
	ok := Request{Key: "k", Algorithm: "gcra", Rate: 1, Period: "1s", Cost: &one}
	bounds := engine.Bounds{MaxRate: 100, MaxBurst: 10, MaxPeriod: time.Hour, MaxHits: 5}
	for _, tt := range []struct {
		name      string
		edit      func(*Request)
		wantField string
		wantMsg   string
	}{
		{"no key", func(r *Request) { r.Key = "" }, "key", "missing"},
		{"a key too long", func(r *Request) { r.Key = strings.Repeat("k", MaxKeyLen+1) }, "key", "longer than"},
		{"a key not UTF-8", func(r *Request) { r.Key = "k\xff" }, "key", "UTF-8"},
		{"no algorithm", func(r *Request) { r.Algorithm = "" }, "algorithm", "missing"},
		{"an unknown algorithm", func(r *Request) { r.Algorithm = "leaky" }, "algorithm", "leaky"},
		{"no period", func(r *Request) { r.Period = "" }, "period", "missing"},
		{"a period not a duration", func(r *Request) { r.Period = "soon" }, "period", "soon"},
		{"a period too short", func(r *Request) { r.Period = "1us" }, "period", ""},
		{"a rate beyond --max-rate", func(r *Request) { r.Rate = 101 }, "rate", "--max-rate 100"},
		{"a burst beyond --max-burst", func(r *Request) { r.Burst = 11 }, "burst", "--max-burst 10"},
		{"a period beyond --max-period", func(r *Request) { r.Period = "2h" }, "period", "--max-period"},
		{"a cost beyond --max-hits", func(r *Request) { six := 6; r.Cost = &six }, "cost", "--max-hits 5"},
		{"a rate of 0", func(r *Request) { r.Rate = 0 }, "rate", ""},
		{"a negative burst", func(r *Request) { r.Burst = -1 }, "burst", ""},
		{"a negative cost", func(r *Request) { r.Cost = &neg }, "cost", ">= 0"},
		{"a cost above the capacity", func(r *Request) { r.Cost = &two }, "cost", "capacity 1"},
	} {
		r := ok
		tt.edit(&r)
		c, fe := Parse(r, bounds)
		if fe == nil || fe.Field != tt.wantField || !strings.Contains(fe.Msg, tt.wantMsg) || !strings.HasPrefix(fe.Error(), tt.wantField+": ") {
			t.Errorf("%s: Parse = %+v, %v; want an error naming %q, saying %q", tt.name, c, fe, tt.wantField, tt.wantMsg)
		}
	}
}
