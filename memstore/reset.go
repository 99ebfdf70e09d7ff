package memstore

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
)

// Reset implements sluice.Resetter: it removes the state of key under lim's
// algorithm and period, so that the key is as if it had never been asked
// for; its states under other algorithms or periods are untouched. key and
// lim are validated as AllowN validates them; a key with no state is reset
// already.
func (s *Store) Reset(ctx context.Context, key string, lim sluice.Limit) error {
	p, err := s.check(ctx, key, lim, 0)
	if err != nil {
		return fmt.Errorf("memstore: reset: %w", err)
	}
	rf := s.ref(key, p)
	sh := rf.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i := sh.lookup(&rf); i >= 0 {
		sh.removeAt(i)
	}
	return nil
}
