package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// fakeClock is a clock that moves only when told, for examples whose
// output must not depend on the machine's speed.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

func ExampleLimiter_Allow() {
	clock := &fakeClock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	store := memstore.New(memstore.WithClock(clock.Now))
	l := sluice.New(store)
	defer l.Close()

	lim := sluice.PerSecond(3) // GCRA: one every 333.333…ms, bursts of 3
	for range 4 {
		d, err := l.Allow(context.Background(), "tenant-42", lim)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry after %v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// allowed=true remaining=2 retry after 0s
	// allowed=true remaining=1 retry after 0s
	// allowed=true remaining=0 retry after 0s
	// allowed=false remaining=0 retry after 333.334ms
}

// Twelve callers share a quota of five per half second, counted by a
// sliding log: each denied caller waits exactly the RetryAfter it was
// told, and they are admitted in groups one window apart. (Limiter.Wait
// does the waiting for concurrent callers; here a fake clock stands in for
// it so that the output is exact.)
func Example_groups() {
	clock := &fakeClock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	l := sluice.New(memstore.New(memstore.WithClock(clock.Now)))
	defer l.Close()

	lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: 500 * time.Millisecond}
	var elapsed time.Duration
	for waiting := 12; waiting > 0; {
		admitted, wait := 0, time.Duration(0)
		for range waiting {
			d, err := l.Allow(context.Background(), "upstream", lim)
			if err != nil {
				panic(err)
			}
			if d.Allowed {
				admitted++
			} else {
				wait = d.RetryAfter
			}
		}
		fmt.Printf("at %v: %d admitted\n", elapsed, admitted)
		waiting -= admitted
		clock.Advance(wait)
		elapsed += wait
	}
	// Output:
	// at 0s: 5 admitted
	// at 500ms: 5 admitted
	// at 1s: 2 admitted
}

func ExampleLimit_String() {
	fmt.Println(sluice.PerSecond(10))
	fmt.Println(sluice.PerSecond(7).With(sluice.TokenBucket).WithBurst(2))
	fmt.Println(sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 100, Period: time.Minute})
	// Output:
	// 10 per 1s (gcra, burst 10)
	// 7 per 1s (token_bucket, burst 2)
	// 100 per 1m0s (sliding_window)
}

func ExampleParseAlgorithm() {
	a, err := sluice.ParseAlgorithm("sliding_window")
	fmt.Println(a, err)
	_, err = sluice.ParseAlgorithm("leaky_bucket")
	fmt.Println(err)
	// Output:
	// sliding_window <nil>
	// sluice: invalid limit: unknown algorithm "leaky_bucket" (want fixed_window, sliding_log, sliding_window, token_bucket or gcra)
}
