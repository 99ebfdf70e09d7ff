package metrics

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// maxVersionLabel bounds the version label of sluice_config_info: a
// version comes from the control plane or is a files' fingerprint.
const maxVersionLabel = 128

// configInfo are the metrics of the configuration in force.
type configInfo struct {
	mu     sync.Mutex
	info   *prometheus.GaugeVec
	loaded prometheus.Gauge
}

func newConfigInfo(reg *prometheus.Registry) *configInfo {
	return &configInfo{
		info: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_config_info",
			Help: "1 for the configuration in force: its source (file, xds, builtin) and version (the xDS version_info, or a fingerprint of the files)."},
			[]string{"source", "version"})),
		loaded: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_config_last_load_timestamp_seconds",
			Help: "When the configuration in force was loaded, in seconds since the Unix epoch."})),
	}
}

// ConfigLoaded records the configuration in force: its source ("file",
// "xds", "builtin"), its version (at most 128 bytes are kept) and when it
// was loaded.
func (m *Metrics) ConfigLoaded(source, version string, at time.Time) {
	if len(version) > maxVersionLabel {
		version = strings.ToValidUTF8(version[:maxVersionLabel], "")
	}
	ci := m.info
	ci.mu.Lock()
	defer ci.mu.Unlock()
	ci.info.Reset()
	ci.info.WithLabelValues(source, version).Set(1)
	ci.loaded.Set(float64(at.UnixNano()) / 1e9)
}
