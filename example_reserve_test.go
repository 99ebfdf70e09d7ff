package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// A token budget for an LLM upstream: reserve an estimate before the call,
// settle to the tokens the response actually used. A response that uses
// more than the budget has left is charged all the same, and the budget
// then refuses until its window frees it.
func ExampleLimiter_Reserve() {
	clock := &fakeClock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	l := sluice.New(memstore.New(memstore.WithClock(clock.Now)))
	defer l.Close()
	ctx := context.Background()
	budget := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Minute}

	for _, used := range []int{300, 900, 50} {
		r, err := l.Reserve(ctx, "tenant-42", budget, 200) // the estimate
		if err != nil {
			panic(err)
		}
		if !r.Decision().Allowed {
			fmt.Printf("refused, retry after %v\n", r.Decision().RetryAfter)
			continue
		}
		// ... call the upstream; it reports the tokens used ...
		if err := r.Settle(ctx, used); err != nil {
			panic(err)
		}
		d, _ := l.AllowN(ctx, "tenant-42", budget, 0)
		fmt.Printf("used %d, %d left\n", used, d.Remaining)
	}
	// Output:
	// used 300, 700 left
	// used 900, 0 left
	// refused, retry after 1m0s
}

// A limit on requests in flight: take one at the start, give it back at
// the end, when the admission time is no longer at hand.
func ExampleLimiter_Refund() {
	l := sluice.New(memstore.New())
	defer l.Close()
	ctx := context.Background()
	inFlight := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Hour}

	for i := range 3 {
		d, _ := l.Allow(ctx, "streams/tenant-42", inFlight)
		fmt.Printf("stream %d admitted: %v\n", i, d.Allowed)
	}
	_ = l.Refund(ctx, "streams/tenant-42", inFlight, 1) // stream 0 ended
	d, _ := l.Allow(ctx, "streams/tenant-42", inFlight)
	fmt.Printf("stream 3 admitted: %v\n", d.Allowed)
	// Output:
	// stream 0 admitted: true
	// stream 1 admitted: true
	// stream 2 admitted: false
	// stream 3 admitted: true
}
