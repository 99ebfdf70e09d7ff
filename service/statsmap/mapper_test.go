package statsmap

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDefaultMapping(t *testing.T) {
	m, err := Parse(DefaultMapping)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		Name   string
		Labels [][2]string
		OK     bool
	}
	tests := []struct {
		give string
		typ  Type
		want want
	}{
		{"ratelimit.service.rate_limit.dom.k1.total_hits", Counter,
			want{"ratelimit_service_rate_limit_total_hits", [][2]string{{"domain", "dom"}, {"key1", "k1"}}, true}},
		{"ratelimit.service.rate_limit.dom.w_pre*.within_limit", Counter,
			want{"ratelimit_service_rate_limit_within_limit", [][2]string{{"domain", "dom"}, {"key1", "w_pre*"}}, true}},
		// Two keys: the regex, with key2.
		{"ratelimit.service.rate_limit.dom.k3_v3.k4.over_limit", Counter,
			want{"ratelimit_service_rate_limit_over_limit", [][2]string{{"domain", "dom"}, {"key1", "k3_v3"}, {"key2", "k4"}}, true}},
		// Three keys: the third is not labelled.
		{"ratelimit.service.rate_limit.dom.a.b.c.near_limit", Counter,
			want{"ratelimit_service_rate_limit_near_limit", [][2]string{{"domain", "dom"}, {"key1", "a"}, {"key2", "b"}}, true}},
		// The regex is not anchored at its end: a longer stat name that
		// ends in over_limit_with_local_cache still maps to over_limit.
		{"ratelimit.service.rate_limit.dom.a.b.over_limit_with_local_cache", Counter,
			want{"ratelimit_service_rate_limit_over_limit", [][2]string{{"domain", "dom"}, {"key1", "a"}, {"key2", "b"}}, true}},
		{"ratelimit.service.rate_limit.dom.k1.over_limit_with_local_cache", Counter, want{}},
		{"ratelimit.service.rate_limit.nodomain.domain_not_found", Counter, want{}},
		// Tags serialized in a name keep it from any mapping.
		{"ratelimit.service.rate_limit.dom.k1.total_hits.__env=prod", Counter, want{}},
		{"ratelimit.service.call.should_rate_limit.redis_error", Counter,
			want{"ratelimit_service_should_rate_limit_error", [][2]string{{"err_type", "redis_error"}}, true}},
		{"ratelimit.service.call.should_rate_limit.redis_error", Gauge, want{}},
		{"ratelimit_server.ShouldRateLimit.total_requests", Counter,
			want{"ratelimit_service_total_requests", [][2]string{{"grpc_method", "ShouldRateLimit"}}, true}},
		{"ratelimit_server.ShouldRateLimit.response_time", Observer,
			want{"ratelimit_service_response_time_seconds", [][2]string{{"grpc_method", "ShouldRateLimit"}}, true}},
		{"ratelimit.service.config_load_success", Counter, want{"ratelimit_service_config_load_success", nil, true}},
		{"ratelimit.go.alloc", Gauge, want{}},
	}
	for _, tt := range tests {
		r, ok := m.Map(tt.give, tt.typ)
		got := want{r.Name, r.Labels, ok}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Map(%q, %s) (-want +got):\n%s", tt.give, tt.typ, diff)
		}
	}
	if _, ok := m.Map("ratelimit_server.ShouldRateLimit.response_time", Observer); !ok {
		t.Fatal("response_time unmapped")
	}
	r, _ := m.Map("ratelimit_server.ShouldRateLimit.response_time", Observer)
	if r.mp.observer != "histogram" || len(r.mp.hist.buckets) != len(defBuckets) {
		t.Errorf("response_time observer %q buckets %v, want a histogram of the default buckets", r.mp.observer, r.mp.hist.buckets)
	}
}

func TestMapOrder(t *testing.T) {
	const file = `
mappings:
  - match: "a.*.c"
    name: "first_$1"
  - match: "a.b.*"
    name: "second_${1}"
  - match: "a\\.(.*)\\.c"
    match_type: regex
    name: "regex_$1"
  - match: "x.*"
    name: "kept_$1_total"
  - match: "x.*.*"
    name: "two_${2}_${1}_${3}"
`
	m, err := Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ give, want string }{
		{"a.b.c", "first_b"},  // the first glob in file order
		{"a.b.d", "second_d"}, // a glob beats an earlier regex
		{"a.b.b.c", "regex_b.b"},
		// statsd_exporter reads $1_total as the reference "1_total", which is
		// no capture: it is removed. ${3} is past the captures: removed.
		{"x.y", "kept_"},
		{"x.y.z", "two_z_y_"},
	}
	for _, tt := range tests {
		if r, _ := m.Map(tt.give, Counter); r.Name != tt.want {
			t.Errorf("Map(%q) = %q, want %q", tt.give, r.Name, tt.want)
		}
	}
	u, err := Parse([]byte("defaults:\n  glob_disable_ordering: true\n" + file))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := u.Map("a.b.c", Counter); r.Name != "second_c" {
		t.Errorf("unordered Map(a.b.c) = %q, want second_c: a name beats '*' at the first place they differ", r.Name)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ give, want string }{
		{"mappings:\n  - match: a.b\n    nmae: x\n", "field nmae not found"},
		{"mappings:\n  - match: a.b\n", "no name"},
		{"mappings:\n  - match: a.b\n    name: 1x\n", `name "1x"`},
		{"mappings:\n  - match: a..b\n    name: x\n", `glob "a..b"`},
		{"mappings:\n  - match: a.b*\n    name: x\n", `glob "a.b*"`},
		{"mappings:\n  - match: '('\n    match_type: regex\n    name: x\n", "regex"},
		{"mappings:\n  - match: a\n    name: x\n    action: keep\n", `action "keep"`},
		{"mappings:\n  - match: a\n    name: x\n    match_metric_type: set\n", `match_metric_type "set"`},
		{"mappings:\n  - match: a\n    name: x\n    labels: {a: b}\n", `label name "a"`},
		{"mappings:\n  - match: a\n    name: x\n    observer_type: bar\n", `observer_type "bar"`},
		{"mappings:\n  - match: a\n    name: x\n    observer_type: histogram\n    summary_options: {max_age: 1m}\n", "summary_options on a histogram"},
		{"mappings:\n  - match: a\n    name: x\n    buckets: [1]\n    observer_type: histogram\n    histogram_options: {buckets: [2]}\n", "buckets both"},
		{"defaults:\n  match_type: fuzzy\n", `match_type "fuzzy"`},
		{"defaults:\n  ttl: forever\n", "forever"},
		{"mappings: 3\n", "cannot unmarshal"},
		// Bounds, and values Prometheus would panic on when a statistic
		// first comes.
		{"mappings:\n  - match: '" + strings.Repeat("a", MaxRegexBytes+1) + "'\n    match_type: regex\n    name: x\n", "regex of 1025 bytes, more than 1024"},
		{"mappings:\n  - match: a\n    name: x\n    labels: {" + manyLabels(MaxLabels+1) + "}\n", "labels: 33, more than 32"},
		{"mappings:\n  - match: a\n    name: x\n    labels: {ab: x, ab: y}\n", `label name "ab": twice`},
		{"mappings:\n  - match: a\n    name: x\n    labels: {__ab: x}\n", `label name "__ab": names starting with __`},
		{"mappings:\n  - match: a\n    name: x\n    observer_type: histogram\n    labels: {le: x}\n", `label name "le": the histogram's own`},
		{"mappings:\n  - match: a\n    name: x\n    labels: {quantile: x}\n", `label name "quantile": the summary's own`},
		{"defaults:\n  observer_type: histogram\nmappings:\n  - match: a\n    name: x\n    labels: {le: x}\n", `mappings[0] (match "a"): label name "le": the histogram's own`},
		{"mappings:\n  - match: a\n    name: x\n    observer_type: histogram\n    buckets: [3, 2]\n", "buckets[1] 2: want each bucket above the one before"},
		{"mappings:\n  - match: a\n    name: x\n    histogram_options: {buckets: [1, 1]}\n", "histogram_options.buckets[1] 1"},
		{"defaults:\n  buckets: [.nan]\n", "defaults: buckets[0]: not a number"},
		{"defaults:\n  buckets: [" + strings.Repeat("1,", MaxBuckets) + "1]\n", "buckets: 257, more than 256"},
		{"defaults:\n  quantiles: [{quantile: 1.5, error: 0.1}]\n", "quantiles[0].quantile 1.5: want 0 to 1"},
		{"defaults:\n  summary_options: {quantiles: [{quantile: 0.5, error: -1}]}\n", "summary_options.quantiles[0].error -1"},
		{"defaults:\n  summary_options: {max_age: -1s}\n", "summary_options.max_age -1s: negative"},
		{"defaults:\n  summary_options: {age_buckets: 65}\n", "age_buckets 65: more than 64"},
		{"mappings:\n  - match: a\n    name: x\n    observer_type: summary\n    summary_options: {buf_cap: 4294967295}\n", "buf_cap 4294967295: more than 65536"},
		{"defaults:\n  histogram_options: {native_histogram_max_buckets: 4097}\n", "native_histogram_max_buckets 4097: more than 4096"},
		{"defaults:\n  histogram_options: {native_histogram_bucket_factor: .inf}\n", "native_histogram_bucket_factor +Inf"},
		{"mappings:\n" + strings.Repeat("  - match: a\n    name: x\n", MaxMappings+1), "mappings: 1001, more than 1000"},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.give))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", tt.give, err, tt.want)
		}
	}
	if _, err := Parse(make([]byte, MaxMappingBytes+1)); err == nil {
		t.Error("Parse of a file above MaxMappingBytes: no error")
	}
	if m, err := Parse(nil); err != nil || len(m.globs)+len(m.regexes) != 0 {
		t.Errorf("Parse(nil) = %v, %v; want no mappings", m, err)
	}
}

// manyLabels is n labels in YAML's flow style.
func manyLabels(n int) string {
	l := make([]string, n)
	for i := range l {
		l[i] = fmt.Sprintf("l%d: x", i)
	}
	return strings.Join(l, ", ")
}

// TestParseBoundsAccepted parses a file at every bound: it loads, and a
// statistic of each kind makes its metric.
func TestParseBoundsAccepted(t *testing.T) {
	buckets := make([]string, MaxBuckets)
	for i := range buckets {
		buckets[i] = strconv.Itoa(i)
	}
	file := "defaults:\n  observer_type: histogram\n  histogram_options: {native_histogram_max_buckets: " + strconv.Itoa(MaxNativeMax) + ", buckets: [" + strings.Join(buckets, ",") + "]}\n" +
		"  summary_options: {age_buckets: " + strconv.Itoa(MaxAgeBuckets) + ", buf_cap: " + strconv.Itoa(MaxBufCap) + ", quantiles: [" + strings.Repeat("{quantile: 0.5, error: 0.1},", MaxQuantiles-1) + "{quantile: 1, error: 0}]}\n" +
		"mappings:\n  - match: '" + strings.Repeat("a", MaxRegexBytes) + "'\n    match_type: regex\n    name: r\n    labels: {" + manyLabels(MaxLabels) + "}\n" +
		"  - match: a\n    name: s\n    observer_type: summary\n    labels: {le: x}\n" +
		"  - match: b\n    name: c\n    match_metric_type: counter\n    labels: {le: x, quantile: y}\n" +
		strings.Repeat("  - match: c\n    name: x\n", MaxMappings-3)
	m, err := Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, m)
}

func TestEscapeName(t *testing.T) {
	tests := []struct{ give, want string }{
		{"ratelimit.go.alloc", "ratelimit_go_alloc"},
		{"ratelimit.service.rate_limit.dom.k1.total_hits.__env=prod", "ratelimit_service_rate_limit_dom_k1_total_hits___env_prod"},
		{"9lives", "_9lives"},
		{"a--b---c", "a_b_c"},
		{"a-b", "a_b"},
		{"café", "caf_"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := EscapeName(tt.give); got != tt.want {
			t.Errorf("EscapeName(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

// TestParseLenient: a key outside the mapping language is refused by Parse
// and ignored by ParseLenient, which still refuses a value statsd_exporter
// refuses.
func TestParseLenient(t *testing.T) {
	misspelt := "mappings:\n- match: a.*\n  name: a\n  lables: {x: $1}\n"
	if _, err := Parse([]byte(misspelt)); err == nil || !strings.Contains(err.Error(), "lables") {
		t.Errorf("Parse with a misspelt key: %v, want an error naming it", err)
	}
	m, err := ParseLenient([]byte(misspelt))
	if err != nil {
		t.Fatalf("ParseLenient with a misspelt key: %v", err)
	}
	if _, ok := m.Map("a.b", Counter); !ok {
		t.Error("ParseLenient: the mapping of the misspelt key's file does not match a.b")
	}
	if _, err := ParseLenient([]byte("mappings:\n- match: a.*\n  name: a\n  match_type: nope\n")); err == nil {
		t.Error("ParseLenient accepted match_type: nope")
	}
}
