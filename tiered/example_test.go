package tiered_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/tiered"
)

func Example() {
	// A still clock keeps the output exact; leave it out in production.
	now := func() time.Time { return time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC) }
	shared := memstore.New(memstore.WithClock(now)) // in production: redisstore.NewRueidis(client)
	defer shared.Close()
	s, err := tiered.New(shared, tiered.WithLeases(100, 0.1, time.Second), tiered.WithClock(now))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Hour}
	for range 250 {
		s.AllowN(ctx, "tenant-1", lim, 1)
	}
	st := s.Stats()
	fmt.Printf("250 decisions: %d local, %d shared calls\n", st.Local, st.Shared)
	// Output:
	// 250 decisions: 246 local, 4 shared calls
}
