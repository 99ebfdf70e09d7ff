package tiered

// SweepNow runs one sweep, as the sweeper does every interval.
func (s *Store) SweepNow() { s.sweep() }
