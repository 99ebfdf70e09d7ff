package config

import (
	"testing"
	"time"
)

func TestLookupUnit(t *testing.T) {
	tests := []struct {
		give   string
		want   Unit
		wantOK bool
	}{
		{"second", Unit{"SECOND", time.Second}, true},
		{"Minute", Unit{"MINUTE", time.Minute}, true},
		{"HOUR", Unit{"HOUR", time.Hour}, true},
		{"day", Unit{"DAY", 24 * time.Hour}, true},
		{"week", Unit{"WEEK", 7 * 24 * time.Hour}, true},
		{"month", Unit{"MONTH", 30 * 24 * time.Hour}, true},
		{"year", Unit{"YEAR", 365 * 24 * time.Hour}, true},
		{"ſecond", Unit{"SECOND", time.Second}, true}, // upper-cased as the reference does
		{"seconds", Unit{}, false},
		{"", Unit{}, false},
	}
	for _, tt := range tests {
		if got, ok := LookupUnit(tt.give); got != tt.want || ok != tt.wantOK {
			t.Errorf("LookupUnit(%q) = %v, %v; want %v, %v", tt.give, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestUnits(t *testing.T) {
	us := Units()
	if len(us) != 7 {
		t.Fatalf("Units() = %v, want the 7 units of the reference", us)
	}
	for i := 1; i < len(us); i++ {
		if us[i-1].Period >= us[i].Period {
			t.Errorf("Units()[%d] = %v is not shorter than Units()[%d] = %v", i-1, us[i-1], i, us[i])
		}
	}
	us[0].Period = 0 // a copy: the table stays
	if u, _ := LookupUnit("second"); u.Period != time.Second {
		t.Errorf("after changing Units()' result, LookupUnit(second) = %v", u)
	}
	if got, want := unitList(" or "), "second, minute, hour, day, week, month or year"; got != want {
		t.Errorf("unitList(\" or \") = %q, want %q", got, want)
	}
}

func TestLargestUnit(t *testing.T) {
	tests := []struct {
		give   time.Duration
		want   string
		wantOK bool
	}{
		{time.Second, "SECOND", true},
		{30 * time.Second, "SECOND", true},
		{2 * time.Hour, "HOUR", true},
		{90 * time.Minute, "MINUTE", true},
		{14 * 24 * time.Hour, "WEEK", true},
		{60 * 24 * time.Hour, "MONTH", true},
		{730 * 24 * time.Hour, "YEAR", true},
		{1500 * time.Millisecond, "", false},
		{time.Millisecond, "", false},
		{0, "", false},
	}
	for _, tt := range tests {
		if got, ok := LargestUnit(tt.give); got.Name != tt.want || ok != tt.wantOK {
			t.Errorf("LargestUnit(%v) = %v, %v; want %s, %v", tt.give, got, ok, tt.want, tt.wantOK)
		}
	}
}
