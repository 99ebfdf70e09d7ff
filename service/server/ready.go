package server

// Ready reports what /readyz answers: false with the reason while the
// server drains or a readiness condition (WithReadiness) fails. The status
// page shows it.
func (s *Server) Ready() (ok bool, reason string) {
	if s.draining.Load() {
		return false, "draining"
	}
	if s.ready != nil {
		return s.ready()
	}
	return true, ""
}
