package redisstore

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
)

// Reset implements sluice.Resetter: it deletes the one Redis key that holds
// the state of key under lim's algorithm and period, in one script run on
// the key's node (so on Cluster too), and every process deciding through
// this Redis sees the key untouched at once. key and lim are validated as
// AllowN validates them, before any call to Redis.
//
// In the millisecond layout (WithMillisecondLayout) a sliding log keeps
// one state per key whatever the Period, rl:<key>: resetting a
// sliding-log limit there deletes it, for every period and for every other
// worker sharing that layout.
func (s *Store) Reset(ctx context.Context, key string, lim sluice.Limit) error {
	if err := s.check(ctx, key, lim, 0); err != nil {
		return fmt.Errorf("redisstore: reset: %w", err)
	}
	_, err := s.run(ctx, resetScript, []string{s.redisKey(key, lim)}, nil)
	return err
}
