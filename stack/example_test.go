package stack_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/stack"
	"github.com/sluicehq/sluice/tiered"
)

// The stack over a memory store (in production, redisstore): the local
// tier answers the repeated denial without a shared call; failover bounds
// every shared call and would decide by the failure mode if the shared
// store stopped answering.
func Example() {
	shared := memstore.New()
	defer shared.Close()
	s, err := stack.New(shared,
		stack.WithFailover(failover.WithTimeout(time.Second), failover.WithDefaultMode(sluice.FailClosed)),
		stack.WithTiered(tiered.WithLeases(100, 0.5, time.Second)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 2, Period: time.Hour}
	for i := range 5 {
		d, err := s.AllowN(ctx, "tenant-1", lim, 1)
		fmt.Println(i+1, d.Allowed, d.Degraded, err)
	}
	ts, fs := s.Tiered().Stats(), s.Failover().Stats()
	fmt.Println("cached denials:", ts.CachedDenials, "shared calls:", fs.SharedCalls, "ready:", s.Ready())
	// Output:
	// 1 true false <nil>
	// 2 true false <nil>
	// 3 false false <nil>
	// 4 false false <nil>
	// 5 false false <nil>
	// cached denials: 2 shared calls: 3 ready: true
}
