package config

import (
	"strings"
	"time"
)

// Unit is a time unit of the reference's configuration (a rate_limit's
// unit): Name as the reference's protobuf enum spells it, which RLS answers
// report in current_limit, and Period, its length.
type Unit struct {
	Name   string
	Period time.Duration
}

// units are the reference's units, shortest first. A month is 30 days and
// a year 365, as in the reference.
var units = [...]Unit{
	{"SECOND", time.Second},
	{"MINUTE", time.Minute},
	{"HOUR", time.Hour},
	{"DAY", 24 * time.Hour},
	{"WEEK", 7 * 24 * time.Hour},
	{"MONTH", 30 * 24 * time.Hour},
	{"YEAR", 365 * 24 * time.Hour},
}

// Units returns the reference's units, shortest first: second, minute,
// hour, day, week, month (30 days) and year (365 days).
func Units() []Unit { return append([]Unit(nil), units[:]...) }

// LookupUnit returns the unit called name in any case ("minute",
// "MINUTE"): the reference upper-cases a configured unit before it looks it
// up. ok is false for a name that is no unit.
func LookupUnit(name string) (u Unit, ok bool) {
	name = strings.ToUpper(name)
	for _, u := range units {
		if u.Name == name {
			return u, true
		}
	}
	return Unit{}, false
}

// LargestUnit returns the longest unit that p is a whole number of: how
// an RLS answer reports a `window` in current_limit (30s is 30 SECONDs, 2h
// 2 HOURs). ok is false when p is no whole number of seconds.
func LargestUnit(p time.Duration) (u Unit, ok bool) {
	for i := len(units) - 1; i >= 0; i-- {
		if u := units[i]; p >= u.Period && p%u.Period == 0 {
			return u, true
		}
	}
	return Unit{}, false
}
