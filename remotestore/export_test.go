package remotestore

import (
	"context"
	"time"
)

// ExpireCapabilities makes the remembered answer of Capabilities old, as
// capsTTL after it.
func ExpireCapabilities(s *Store) {
	if st := s.caps.state.Load(); st != nil {
		old := *st
		old.until = time.Now().Add(-time.Second)
		s.caps.state.Store(&old)
	}
}

// Fail is the error a call of op on s returns when it failed with err.
func Fail(s *Store, ctx context.Context, op string, err error) error {
	return s.fail(ctx, op, -1, err)
}
