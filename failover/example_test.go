package failover_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
)

// down is a shared store that never answers, as a Redis that was killed.
type down struct{}

func (down) AllowN(context.Context, string, sluice.Limit, int) (sluice.Decision, error) {
	return sluice.Decision{}, errors.New("dial tcp 127.0.0.1:6379: connection refused")
}

func Example() {
	s := failover.New(down{},
		failover.WithFailureThreshold(1),
		failover.WithReplicas(4),              // FailOpen admits Rate/4 per process
		failover.WithProbeInterval(time.Hour), // keep the breaker open for the example
		failover.WithDefaultPolicy(failover.FailClosed))
	defer s.Close()
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 8, Period: time.Hour}

	var r failover.Report
	d, _ := s.AllowN(failover.WithReport(ctx, &r), "tenant-1", lim, 1)
	fmt.Println("closed:", d.Allowed, r.Policy, errors.Is(r.Cause, failover.ErrUnavailable))

	open := failover.WithPolicy(ctx, failover.FailOpen)
	admitted := 0
	for range 5 {
		if d, _ := s.AllowN(open, "tenant-1", lim, 1); d.Allowed {
			admitted++
		}
	}
	fmt.Println("open: admitted", admitted, "of 5")
	fmt.Println("ready:", s.Ready(), "degraded:", s.Stats().Degraded)
	// Output:
	// closed: false fail_closed true
	// open: admitted 2 of 5
	// ready: false degraded: 6
}
