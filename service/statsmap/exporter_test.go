package statsmap

import (
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// scrape returns the exposition lines of e's handler that start with one
// of prefixes, sorted.
func scrape(t *testing.T, e *Exporter, prefixes ...string) []string {
	t.Helper()
	rec := httptest.NewRecorder()
	e.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	b, _ := io.ReadAll(rec.Body)
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				out = append(out, line)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

func newExporter(t *testing.T, mapping string) *Exporter {
	t.Helper()
	m, err := Parse([]byte(mapping))
	if err != nil {
		t.Fatal(err)
	}
	return NewExporter(m)
}

func TestExporterDefault(t *testing.T) {
	e := newExporter(t, string(DefaultMapping))
	e.Counter("ratelimit.service.rate_limit.dom.k1.total_hits", 7)
	e.Counter("ratelimit.service.rate_limit.dom.k1.total_hits", 2)
	e.Counter("ratelimit.service.rate_limit.dom.k3_v3.k4.total_hits", 1)
	e.Counter("ratelimit.service.rate_limit.nodomain.domain_not_found", 2)
	e.Gauge("ratelimit.go.numGoroutine", 38)
	e.Gauge("ratelimit.go.numGoroutine", 39)
	e.Timer("ratelimit_server.ShouldRateLimit.response_time", 0)
	e.Timer("ratelimit_server.ShouldRateLimit.response_time", 3)
	// A gauge under a counter's name is a conflict: dropped and counted.
	e.Gauge("ratelimit.service.rate_limit.nodomain.domain_not_found", 1)
	got := scrape(t, e, "ratelimit_", "statsd_exporter_", "# TYPE ratelimit_")
	want := []string{
		"# TYPE ratelimit_go_numGoroutine gauge",
		"# TYPE ratelimit_service_rate_limit_nodomain_domain_not_found counter",
		"# TYPE ratelimit_service_rate_limit_total_hits counter",
		"# TYPE ratelimit_service_response_time_seconds histogram",
		"ratelimit_go_numGoroutine 39",
		"ratelimit_service_rate_limit_nodomain_domain_not_found 2",
		`ratelimit_service_rate_limit_total_hits{domain="dom",key1="k1"} 9`,
		`ratelimit_service_rate_limit_total_hits{domain="dom",key1="k3_v3",key2="k4"} 1`,
		`ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="+Inf"} 2`,
		`ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="0.005"} 1`,
		`ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="0.01"} 1`,
		`ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="0.025"} 1`,
		`ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="0.05"} 1`,
		`ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="0.1"} 1`,
		`ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="0.25"} 1`,
		`ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="0.5"} 1`,
		`ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="1"} 1`,
		`ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="10"} 2`,
		`ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="2.5"} 1`,
		`ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="5"} 2`,
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 2`,
		`ratelimit_service_response_time_seconds_sum{grpc_method="ShouldRateLimit"} 3`,
		`statsd_exporter_events_actions_total{action="map"} 5`,
		`statsd_exporter_events_conflict_total{type="gauge"} 1`,
		`statsd_exporter_events_total{type="counter"} 4`,
		`statsd_exporter_events_total{type="gauge"} 2`,
		`statsd_exporter_events_total{type="observer"} 2`,
		`statsd_exporter_events_unmapped_total 4`,
		`statsd_exporter_metrics_total{type="counter"} 3`,
		`statsd_exporter_metrics_total{type="gauge"} 1`,
		`statsd_exporter_metrics_total{type="histogram"} 1`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("exposition (-want +got):\n%s", diff)
	}
	if got := scrape(t, e, "promhttp_metric_handler_requests_total{code=\"200\"}"); len(got) != 1 {
		t.Errorf("scrapes counted: %q", got)
	}
}

func TestExporterMappingOptions(t *testing.T) {
	e := newExporter(t, `
defaults:
  observer_type: summary
  summary_options:
    quantiles: [{quantile: 0.5, error: 0.05}]
mappings:
  - match: "drop.*"
    name: "x"
    action: drop
  - match: "scaled.*"
    name: "scaled_${1}"
    scale: 0.001
    help: "scaled down"
  - match: "timer.*"
    name: "timer_ms"
    labels:
      which: "$1"
`)
	e.Counter("drop.me", 5)
	e.Counter("scaled.bytes", 3000)
	e.Timer("timer.a", 4)
	got := scrape(t, e, "scaled_", "timer_", "drop", "x ", "# HELP scaled", "statsd_exporter_events_actions_total")
	want := []string{
		"# HELP scaled_bytes scaled down",
		"scaled_bytes 3",
		`statsd_exporter_events_actions_total{action="drop"} 1`,
		`statsd_exporter_events_actions_total{action="map"} 2`,
		`timer_ms_count{which="a"} 1`,
		`timer_ms_sum{which="a"} 4`,
		`timer_ms{which="a",quantile="0.5"} 4`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("exposition (-want +got):\n%s", diff)
	}
}

func TestExporterTTL(t *testing.T) {
	e := newExporter(t, `
mappings:
  - match: "short.*"
    name: "short"
    ttl: 1m
    labels: {which: "$1"}
  - match: "long.*"
    name: "long"
    labels: {which: "$1"}
`)
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	e.now = func() time.Time { return now }
	e.Gauge("short.a", 1)
	e.Gauge("short.b", 2)
	e.Gauge("long.a", 3)
	now = now.Add(50 * time.Second)
	e.Gauge("short.b", 4)
	now = now.Add(20 * time.Second) // short.a: 70 s old; short.b: 20 s
	got := scrape(t, e, "short", "long")
	want := []string{`long{which="a"} 3`, `short{which="b"} 4`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after 70 s (-want +got):\n%s", diff)
	}
	e.Gauge("short.a", 5) // made again
	got = scrape(t, e, "short{")
	want = []string{`short{which="a"} 5`, `short{which="b"} 4`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after short.a came back (-want +got):\n%s", diff)
	}
}
