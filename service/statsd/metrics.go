package statsd

import "github.com/prometheus/client_golang/prometheus"

// Metrics are a Client's own counters, among sluice's metrics: the lines
// sent and dropped, and the failed connection attempts. A nil *Metrics
// counts nothing.
type Metrics struct {
	sentLines  prometheus.Counter
	drops      *prometheus.CounterVec
	connectErr prometheus.Counter
}

// NewMetrics registers the counters on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		sentLines: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_statsd_lines_sent_total",
			Help: "Statistics lines written to the statsd server (--statsd)."}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_statsd_lines_dropped_total",
			Help: "Statistics lines dropped instead of sent to the statsd server, by reason: queue_full (the server did not take them fast enough, or did not answer, for more than 4 MiB of lines), write_error, too_long, closed (left at shutdown)."},
			[]string{"reason"}),
		connectErr: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_statsd_connect_errors_total",
			Help: "Failed attempts to connect to the statsd server."}),
	}
	reg.MustRegister(m.sentLines, m.drops, m.connectErr)
	return m
}

func (m *Metrics) sent(lines int) {
	if m != nil {
		m.sentLines.Add(float64(lines))
	}
}

func (m *Metrics) dropped(lines int, reason string) {
	if m != nil && lines > 0 {
		m.drops.WithLabelValues(reason).Add(float64(lines))
	}
}

func (m *Metrics) connectError() {
	if m != nil {
		m.connectErr.Inc()
	}
}
