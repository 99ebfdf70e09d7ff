package grpcfast

// NumConns is the number of connections the server holds.
func (s *Server) NumConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// ArmedTimers is the number of first-message timers the server made.
func (s *Server) ArmedTimers() int64 { return s.armed.Load() }
