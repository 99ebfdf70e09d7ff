package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// At most 2 report generations at once per tenant: a third waits for a
// slot, or is refused at once with Acquire. A permit whose process dies is
// freed when its lease ends.
func ExampleLimiter_Acquire() {
	clock := &fakeClock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	l := sluice.New(memstore.New(memstore.WithClock(clock.Now)))
	defer l.Close()
	ctx := context.Background()
	reports := sluice.ConcurrencyLimit{Max: 2, TTL: 30 * time.Second}

	var held []*sluice.Permit
	for range 3 {
		p, d, err := l.Acquire(ctx, "tenant-42", reports)
		if err != nil {
			panic(err)
		}
		if p == nil {
			fmt.Printf("refused: %d held, the earliest lease ends in %v\n", d.Held, d.RetryAfter)
			continue
		}
		fmt.Printf("acquired: %d held, lease until %s\n", d.Held, p.Expires().Format("15:04:05"))
		held = append(held, p)
	}

	clock.Advance(20 * time.Second)
	if err := held[0].Extend(ctx); err != nil { // long work: renew the lease
		panic(err)
	}
	fmt.Println("extended until", held[0].Expires().Format("15:04:05"))
	held[1].Release(ctx) // on every path: defer p.Release(ctx)

	p, d, _ := l.Acquire(ctx, "tenant-42", reports)
	fmt.Println("after a release:", p != nil, d.Held)
	// Output:
	// acquired: 1 held, lease until 12:00:30
	// acquired: 2 held, lease until 12:00:30
	// refused: 2 held, the earliest lease ends in 30s
	// extended until 12:00:50
	// after a release: true 2
}
