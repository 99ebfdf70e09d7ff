package statsd

// Sink writes statistics, in an encoding, to a Client. Its methods are
// safe for concurrent use and never wait on the network.
type Sink struct {
	c   *Client
	enc Encoder
}

// NewSink returns a Sink writing to c in enc.
func NewSink(c *Client, enc Encoder) *Sink { return &Sink{c: c, enc: enc} }

// Counter writes a counter's increment since the last flush.
func (s *Sink) Counter(name string, v uint64) {
	s.c.append(func(b []byte) []byte { return s.enc.Counter(b, name, v) })
}

// Gauge writes a gauge's value.
func (s *Sink) Gauge(name string, v uint64) {
	s.c.append(func(b []byte) []byte { return s.enc.Gauge(b, name, v) })
}

// Timer writes a timing in milliseconds.
func (s *Sink) Timer(name string, ms float64) {
	s.c.append(func(b []byte) []byte { return s.enc.Timer(b, name, ms) })
}

// Flush sends the packet being filled.
func (s *Sink) Flush() { s.c.Flush() }
