// Package redisclock gives the tests of sluice's packages redisstore's
// test clock, which is not part of redisstore's API: with it every script
// uses the clock's time instead of Redis's TIME, and TTLs are an hour
// longer, so that keys outlive a clock that stands still.
package redisclock

import "time"

var option func(now func() time.Time) any

// Register is called by redisstore when it initialises, with its
// test-clock option.
func Register(f func(now func() time.Time) any) { option = f }

// Option returns redisstore's option that makes a Store use now instead of
// Redis's TIME. O must be redisstore.Option:
//
//	redisstore.NewRueidis(c, redisclock.Option[redisstore.Option](clock.Now))
func Option[O any](now func() time.Time) O { return option(now).(O) }
