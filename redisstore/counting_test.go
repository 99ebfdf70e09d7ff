package redisstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/window"
)

// TestCountAllBatched: concurrent charges of one key, batched into shared
// script runs, are each counted, denied ones included: the batch script
// never answers a charge from an earlier denial of its group. The window
// is an hour of Redis's clock: the sequence runs within one (on a fresh
// key if a slow machine carried it across a boundary).
func TestCountAllBatched(t *testing.T) {
	srv := redistest.Server(t)
	for _, batching := range []bool{true, false} {
		s := NewRueidis(newRueidis(t, srv.Addr), WithBatching(batching))
		ctx := context.Background()
		lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Hour, Counting: sluice.CountAll}
		window.Run(t, lim.Period, time.Minute, func(f *window.Findings, attempt int) {
			key := fmt.Sprintf("countall/batched/%v/%d", batching, attempt)
			const workers, each = 8, 200
			var wg sync.WaitGroup
			var mu sync.Mutex
			var errs []error
			for range workers {
				wg.Go(func() {
					for range each {
						if _, err := s.AllowN(ctx, key, lim, 1); err != nil {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
							return
						}
					}
				})
			}
			wg.Wait()
			if len(errs) > 0 {
				f.Errorf("batching %v: %d charges failed, the first: %v", batching, len(errs), errs[0])
				return
			}
			// 1600 counted: refunding 1500 leaves the window exactly spent.
			if err := s.Return(ctx, key, lim, workers*each-lim.Rate, time.Time{}); err != nil {
				f.Errorf("batching %v: refund: %v", batching, err)
				return
			}
			d, err := s.AllowN(ctx, key, lim, 0)
			if err != nil || !d.Allowed || d.Remaining != 0 {
				f.Errorf("batching %v: after %d charges and a refund of %d: %+v, %v; want allowed, Remaining 0", batching, workers*each, workers*each-lim.Rate, d, err)
				return
			}
			if err := s.Return(ctx, key, lim, 1, time.Time{}); err != nil {
				f.Errorf("batching %v: refund: %v", batching, err)
				return
			}
			if d, _ := s.AllowN(ctx, key, lim, 0); d.Remaining != 1 {
				f.Errorf("batching %v: after one more refund: %+v, want Remaining 1", batching, d)
			}
		})
	}
}
