package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// Twelve concurrent callers share a quota of five per half second (a
// sliding log). Each denied caller waits exactly the RetryAfter it was told
// and tries again, so they are admitted in groups one window apart: 5 at
// once, 5 half a second later, the last 2 at one second.
//
// Time is a fake clock, advanced to the moment the next caller was told to
// retry, so the output is exact; with the real clock, Limiter.Wait does the
// same sleeping.
func Example_twelveCallers() {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	clock := sluicetest.NewClock(start)
	store := memstore.New(memstore.WithClock(clock.Now))
	defer store.Close()
	lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: 500 * time.Millisecond}

	next := make([]time.Duration, 12) // when each caller tries next; all at 0
	admittedAt := map[time.Duration]int{}
	waiting := 12
	for waiting > 0 {
		// Move the clock to the earliest retry, and let every caller due
		// then try at once, concurrently.
		now := next[0]
		for i, t := range next {
			if t >= 0 && (now < 0 || t < now) {
				now = next[i]
			}
		}
		clock.Set(start.Add(now))
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i, t := range next {
			if t != now {
				continue
			}
			wg.Go(func() {
				d, err := store.AllowN(context.Background(), "upstream-api", lim, 1)
				if err != nil {
					panic(err)
				}
				mu.Lock()
				defer mu.Unlock()
				if d.Allowed {
					admittedAt[now]++
					next[i] = -1 // done
					waiting--
				} else {
					next[i] = now + d.RetryAfter
				}
			})
		}
		wg.Wait()
	}
	var times []time.Duration
	for t := range admittedAt {
		times = append(times, t)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	for _, t := range times {
		fmt.Printf("%v: %d admitted\n", t, admittedAt[t])
	}
	// Output:
	// 0s: 5 admitted
	// 500ms: 5 admitted
	// 1s: 2 admitted
}

// A per-tenant limit of 3 requests per second: the fourth is denied, with the
// exact time to wait.
func ExampleStore_AllowN() {
	clock := sluicetest.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.WithClock(clock.Now))
	defer store.Close()
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 3, Period: time.Second}

	for i := range 4 {
		d, err := store.AllowN(context.Background(), "tenant:acme", lim, 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("request %d: allowed=%v remaining=%d retry after %v\n", i+1, d.Allowed, d.Remaining, d.RetryAfter)
	}
	clock.Advance(333334 * time.Microsecond)
	d, _ := store.AllowN(context.Background(), "tenant:acme", lim, 1)
	fmt.Printf("after waiting: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	// Output:
	// request 1: allowed=true remaining=2 retry after 0s
	// request 2: allowed=true remaining=1 retry after 0s
	// request 3: allowed=true remaining=0 retry after 0s
	// request 4: allowed=false remaining=0 retry after 333.334ms
	// after waiting: allowed=true remaining=0
}

// Limiter.Wait sleeps exactly the RetryAfter each denial reports, and fails
// at once when the context's deadline comes first.
func Example_wait() {
	store := memstore.New()
	lim := sluice.Every(20*time.Millisecond, 1) // one call per 20ms
	limiter := sluice.New(store)
	defer limiter.Close()

	ctx := context.Background()
	for i := range 3 {
		if _, err := limiter.Wait(ctx, "batch-job", lim, 1); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("call %d admitted\n", i+1)
	}

	// An hourly job with a minute to spare: the second run would wait an
	// hour, so Wait fails at once instead of sleeping to fail.
	hourly := sluice.Every(time.Hour, 1)
	limiter.Wait(ctx, "report", hourly, 1)
	soon, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err := limiter.Wait(soon, "report", hourly, 1)
	fmt.Println(errors.Is(err, sluice.ErrWouldExceedDeadline))
	// Output:
	// call 1 admitted
	// call 2 admitted
	// call 3 admitted
	// true
}
