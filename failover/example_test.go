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
	s, err := failover.New(down{},
		failover.WithFailureThreshold(1),
		failover.WithReplicas(4),              // FailOpen admits Rate/4 per process
		failover.WithProbeInterval(time.Hour), // keep the breaker open for the example
		failover.WithDefaultMode(sluice.FailClosed))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 8, Period: time.Hour}

	d, _ := s.AllowN(ctx, "tenant-1", lim, 1)
	fmt.Println("closed:", d.Allowed, d.Degraded)

	open := lim.WithFailureMode(sluice.FailOpen) // this limit fails open
	admitted := 0
	for range 5 {
		if d, _ := s.AllowN(ctx, "tenant-1", open, 1); d.Allowed {
			admitted++
		}
	}
	fmt.Println("open: admitted", admitted, "of 5")
	fmt.Println("ready:", s.Ready(), "degraded:", s.Stats().Degraded)
	// Output:
	// closed: false true
	// open: admitted 2 of 5
	// ready: false degraded: 6
}
