package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

// TestCountAllBatched: concurrent charges of one key, batched into shared
// script runs, are each counted, denied ones included: the batch script
// never answers a charge from an earlier denial of its group.
func TestCountAllBatched(t *testing.T) {
	srv := redistest.Server(t)
	for _, batching := range []bool{true, false} {
		s := NewRueidis(newRueidis(t, srv.Addr), WithBatching(batching))
		ctx := context.Background()
		lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Hour, Counting: sluice.CountAll}
		key := "countall/batched/" + time.Now().String()
		const workers, each = 8, 200
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range each {
					if _, err := s.AllowN(ctx, key, lim, 1); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		// 1600 counted: refunding 1500 leaves the window exactly spent.
		if err := s.Return(ctx, key, lim, workers*each-lim.Rate, time.Time{}); err != nil {
			t.Fatal(err)
		}
		d, err := s.AllowN(ctx, key, lim, 0)
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("batching %v: after %d charges and a refund of %d: %+v, %v; want allowed, Remaining 0", batching, workers*each, workers*each-lim.Rate, d, err)
		}
		if err := s.Return(ctx, key, lim, 1, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if d, _ := s.AllowN(ctx, key, lim, 0); d.Remaining != 1 {
			t.Fatalf("batching %v: after one more refund: %+v, want Remaining 1", batching, d)
		}
	}
}
