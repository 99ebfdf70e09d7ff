package remotestore

import "time"

// ExpireCapabilities makes the remembered answer of Capabilities old, as
// capsTTL after it.
func ExpireCapabilities(s *Store) {
	if st := s.caps.state.Load(); st != nil {
		old := *st
		old.until = time.Now().Add(-time.Second)
		s.caps.state.Store(&old)
	}
}
