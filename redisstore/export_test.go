package redisstore

import (
	"context"
	"time"
)

// WithTestClock is withTestClock, for this package's tests.
var WithTestClock = withTestClock

// ReleaseAt is Release, also returning the Redis time of the release.
func (s *Store) ReleaseAt(ctx context.Context, key, holder string) (time.Time, error) {
	return s.release(ctx, key, holder)
}

// SemKey is the Redis name of key's holders.
func (s *Store) SemKey(key string) string { return s.semKey(key) }
