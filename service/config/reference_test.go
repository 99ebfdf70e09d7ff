package config

// The configuration tests of envoyproxy/ratelimit (its test/config:
// config_test.go and the YAML files, main branch of July 2026), as
// sluice's: the files are in testdata/reference (see its README), and each
// expectation of the reference (a limit, its stats key, a shared counter, a
// refusal) is asserted here on Match (Rules, Metric, Key) and on the
// loader's errors. The reference's stats key is sluice's Match.Metric.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// refCase is one request of the reference's tests and what it resolves to.
type refCase struct {
	entries []Entry
	rate    int    // requests_per_unit; 0: no limit applies (the reference's nil)
	unit    string // the limit's unit ("" for unlimited)
	metric  string // the reference's Stats.Key
	// shared, when set, is the descriptor whose counting key the request
	// has: its entries with share_threshold patterns in place of the
	// values. Otherwise the key is the request's own entries.
	shared []Entry
}

func runRefCases(t *testing.T, c *Config, domain string, tests []refCase) {
	t.Helper()
	for _, tt := range tests {
		m, ok := c.Match(domain, tt.entries)
		if !ok {
			t.Fatalf("Match(%q, %v): unknown domain", domain, tt.entries)
		}
		if tt.rate == 0 && tt.unit == "" {
			if len(m.Rules) != 0 {
				t.Errorf("Match(%v) = %s, want no limit", tt.entries, m.Rules[0].Name)
			}
			continue
		}
		if len(m.Rules) != 1 {
			t.Errorf("Match(%v) = %d rules, want 1", tt.entries, len(m.Rules))
			continue
		}
		r := m.Rules[0]
		if r.Limit.Rate != tt.rate || r.Unit != tt.unit {
			t.Errorf("Match(%v) = %d per %q, want %d per %q", tt.entries, r.Limit.Rate, r.Unit, tt.rate, tt.unit)
		}
		if m.Metric != tt.metric {
			t.Errorf("Match(%v) metric = %q, want %q", tt.entries, m.Metric, tt.metric)
		}
		key := tt.entries
		if tt.shared != nil {
			key = tt.shared
		}
		if want := CountingKey(domain, key); m.Key != want {
			t.Errorf("Match(%v) key = %q, want %q", tt.entries, m.Key, want)
		}
	}
}

func refFile(name string) string { return filepath.Join("testdata", "reference", name+".yaml") }

func loadRef(t *testing.T, o Options, names ...string) *Config {
	t.Helper()
	var paths []string
	for _, n := range names {
		paths = append(paths, refFile(n))
	}
	c, err := o.Load(paths...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var bothWildcards = []Wildcards{WildcardsAnywhere, WildcardsTrailing}

// TestReferenceBasic is TestBasicConfig, TestConfigLimitOverride (the
// counting key of an override) and TestShadowModeConfig.
func TestReferenceBasic(t *testing.T) {
	for _, w := range bothWildcards {
		c := loadRef(t, Options{Wildcards: w}, "basic_config")
		if _, ok := c.Match("foo_domain", nil); ok {
			t.Errorf("Match(foo_domain): a domain not configured is found")
		}
		runRefCases(t, c, "test-domain", []refCase{
			{entries: nil},
			{entries: d("key1", "something")},
			{entries: d("key1", "value1")},
			{entries: d("key2", "value2", "subkey", "subvalue")},
			{entries: d("key5", "value5", "subkey5", "subvalue")},
			{entries: d("key1", "value1", "subkey1", "something"), rate: 5, unit: "SECOND", metric: "test-domain.key1_value1.subkey1"},
			{entries: d("key1", "value1", "subkey1", "subvalue1"), rate: 10, unit: "SECOND", metric: "test-domain.key1_value1.subkey1_subvalue1"},
			{entries: d("key2", "something"), rate: 20, unit: "MINUTE", metric: "test-domain.key2"},
			{entries: d("key2", "value2"), rate: 30, unit: "MINUTE", metric: "test-domain.key2_value2"},
			{entries: d("key2", "value3")},
			{entries: d("key3", "foo"), rate: 1, unit: "HOUR", metric: "test-domain.key3"},
			{entries: d("key4", "foo"), rate: 1, unit: "DAY", metric: "test-domain.key4"},
			{entries: d("key7", "unspecified_value"), rate: 70, unit: "MINUTE", metric: "test-domain.key7_unspecified_value"},
			{entries: d("key7", "another_value"), rate: 70, unit: "MINUTE", metric: "test-domain.key7_another_value"},
		})
		m, _ := c.Match("test-domain", d("key4", "foo"))
		if len(m.Rules) != 1 || m.Rules[0].ConfiguredName != "key4_rate_limit" {
			t.Errorf("key4: rules %+v, want the name key4_rate_limit", m.Rules)
		}
		m, _ = c.Match("test-domain", d("key6", "foo"))
		if len(m.Rules) != 1 || !m.Rules[0].Unlimited || m.Metric != "test-domain.key6" {
			t.Errorf("key6: %+v, want unlimited, metric test-domain.key6", m)
		}
		m, _ = c.Match("test-domain", d("key3", "foo"))
		if len(m.Rules) != 1 || m.Rules[0].ConfiguredName != "" {
			t.Errorf("key3: %+v, want no name", m.Rules)
		}
	}

	// An override counts on the key of its entries, whatever its limit;
	// another value, another counter.
	something := CountingKey("test-domain", d("key1", "value1", "subkey1", "something"))
	if other := CountingKey("test-domain", d("key1", "value1", "subkey1", "something_else")); other == something {
		t.Errorf("overrides of two values share the key %q", other)
	}

	c := loadRef(t, Options{}, "shadowmode_config")
	for _, tt := range []struct {
		entries []Entry
		rate    int
		shadow  bool
		metric  string
	}{
		{d("key1", "value1", "subkey1", "something"), 5, false, "test-domain.key1_value1.subkey1"},
		{d("key1", "value1", "subkey1", "subvalue1"), 10, true, "test-domain.key1_value1.subkey1_subvalue1"},
		{d("key2", "something"), 20, true, "test-domain.key2"},
		{d("key2", "value2"), 30, false, "test-domain.key2_value2"},
	} {
		m, _ := c.Match("test-domain", tt.entries)
		if len(m.Rules) != 1 || m.Rules[0].Limit.Rate != tt.rate || m.Rules[0].ShadowMode != tt.shadow || m.Metric != tt.metric {
			t.Errorf("shadow mode: Match(%v) = %+v, want rate %d shadow %v metric %q", tt.entries, m, tt.rate, tt.shadow, tt.metric)
		}
	}
}

// TestReferenceMetadata is TestMetadata: the file loads and matches (sluice
// reads metadata and does not check it).
func TestReferenceMetadata(t *testing.T) {
	c := loadRef(t, Options{}, "metadata")
	runRefCases(t, c, "test-domain", []refCase{
		{entries: nil},
		{entries: d("key1", "value1", "subkey1", "something"), rate: 5, unit: "SECOND", metric: "test-domain.key1_value1.subkey1"},
		{entries: d("key2", "something"), rate: 20, unit: "MINUTE", metric: "test-domain.key2"},
	})
}

// TestReferenceWildcard is TestWildcardConfig: in WildcardsAnywhere as the
// reference's main branch, in WildcardsTrailing as its earlier versions
// (a '*' not at the end is literal).
func TestReferenceWildcard(t *testing.T) {
	common := []refCase{
		{entries: d("noVal", "foo1"), rate: 20, unit: "MINUTE", metric: "test-domain.noVal"},
		{entries: d("noVal", "foo2"), rate: 20, unit: "MINUTE", metric: "test-domain.noVal"},
		{entries: d("wild", "foo1"), rate: 20, unit: "MINUTE", metric: "test-domain.wild_foo*"},
		{entries: d("wild", "foo2"), rate: 20, unit: "MINUTE", metric: "test-domain.wild_foo*"},
		{entries: d("nestedWild", "val1", "wild", "goo2"), rate: 20, unit: "MINUTE", metric: "test-domain.nestedWild_val1.wild_goo*"},
		{entries: d("wild", "bar")},
		{entries: d("noWild", "foo1")},
		// The value written in the file matches in either reading.
		{entries: d("midWild", "bar*b"), rate: 20, unit: "MINUTE", metric: "test-domain.midWild_bar*b"},
		{entries: d("multiWild", "foo*bar*baz"), rate: 10, unit: "MINUTE", metric: "test-domain.multiWild_foo*bar*baz"},
		{entries: d("midWild", "bara")},
		{entries: d("midWild", "xbarb")},
		{entries: d("multiWild", "foo123baz")},
		{entries: d("multiWild", "bar456baz")},
	}
	anywhere := []refCase{
		{entries: d("midWild", "barab"), rate: 20, unit: "MINUTE", metric: "test-domain.midWild_bar*b"},
		{entries: d("midWild", "bar123b"), rate: 20, unit: "MINUTE", metric: "test-domain.midWild_bar*b"},
		{entries: d("midWild", "barb"), rate: 20, unit: "MINUTE", metric: "test-domain.midWild_bar*b"},
		{entries: d("multiWild", "foo123bar456baz"), rate: 10, unit: "MINUTE", metric: "test-domain.multiWild_foo*bar*baz"},
		{entries: d("multiWild", "foobarbaz"), rate: 10, unit: "MINUTE", metric: "test-domain.multiWild_foo*bar*baz"},
	}
	runRefCases(t, loadRef(t, Options{}, "wildcard"), "test-domain", append(common, anywhere...))

	trailing := loadRef(t, Options{Wildcards: WildcardsTrailing}, "wildcard")
	runRefCases(t, trailing, "test-domain", common)
	for _, tt := range anywhere {
		tt.rate, tt.unit = 0, ""
		runRefCases(t, trailing, "test-domain", []refCase{tt})
	}
}

// TestReferenceShareThreshold is TestShareThreshold: the values a
// share_threshold wildcard matches share one counter (the key of the
// pattern) and one stats name.
func TestReferenceShareThreshold(t *testing.T) {
	c := loadRef(t, Options{}, "share_threshold")
	const dom = "test-domain"
	runRefCases(t, c, dom, []refCase{
		// Basic.
		{entries: d("files", "files/a.pdf"), rate: 100, unit: "MINUTE", metric: dom + ".files_files/*", shared: d("files", "files/*")},
		{entries: d("files", "files/b.csv"), rate: 100, unit: "MINUTE", metric: dom + ".files_files/*", shared: d("files", "files/*")},
		{entries: d("files", "files/c.txt"), rate: 100, unit: "MINUTE", metric: dom + ".files_files/*", shared: d("files", "files/*")},
		// With value_to_metric and detailed_metric: the pattern wins.
		{entries: d("route", "api/v1", "method", "GET"), rate: 60, unit: "MINUTE", metric: dom + ".route_api/*.method", shared: d("route", "api/*", "method", "GET")},
		{entries: d("service", "svc/user", "endpoint", "get"), rate: 80, unit: "MINUTE", metric: dom + ".service_svc/*.endpoint_get", shared: d("service", "svc/*", "endpoint", "get")},
		// Nested.
		{entries: d("nested", "parent", "files", "nested/file1.txt"), rate: 200, unit: "MINUTE", metric: dom + ".nested_parent.files_nested/*", shared: d("nested", "parent", "files", "nested/*")},
		{entries: d("files", "top/file1.txt", "files", "nested/file1.txt"), rate: 300, unit: "MINUTE", metric: dom + ".files_top/*.files_nested/*", shared: d("files", "top/*", "files", "nested/*")},
		{entries: d("path", "path/foo", "file", "file/doc1", "type", "pdf"), rate: 120, unit: "MINUTE", metric: dom + ".path_path/*.file_file/*.type", shared: d("path", "path/*", "file", "file/doc1", "type", "pdf")},
		{entries: d("user", "user/alice", "resource", "res/file1", "action", "read"), rate: 150, unit: "MINUTE", metric: dom + ".user_user/*.resource_res/*.action", shared: d("user", "user/*", "resource", "res/*", "action", "read")},
		// An explicit value wins over the shared wildcard, on its own counter.
		{entries: d("file", "test1"), rate: 50, unit: "MINUTE", metric: dom + ".file_test1"},
		{entries: d("file", "test2"), rate: 100, unit: "MINUTE", metric: dom + ".file_test*", shared: d("file", "test*")},
		{entries: d("file", "test23"), rate: 100, unit: "MINUTE", metric: dom + ".file_test*", shared: d("file", "test*")},
		{entries: d("file", "test123"), rate: 100, unit: "MINUTE", metric: dom + ".file_test*", shared: d("file", "test*")},
		// Middle wildcards.
		{entries: d("midpath", "/api/v1"), rate: 100, unit: "MINUTE", metric: dom + ".midpath_/api*v1", shared: d("midpath", "/api*v1")},
		{entries: d("midpath", "/api-beta-v1"), rate: 100, unit: "MINUTE", metric: dom + ".midpath_/api*v1", shared: d("midpath", "/api*v1")},
		{entries: d("midpath", "/apiXYZv1"), rate: 100, unit: "MINUTE", metric: dom + ".midpath_/api*v1", shared: d("midpath", "/api*v1")},
		{entries: d("midpath", "/api/v2")},
		{entries: d("multiroute", "svcAepBrpc"), rate: 50, unit: "MINUTE", metric: dom + ".multiroute_svc*ep*rpc", shared: d("multiroute", "svc*ep*rpc")},
		{entries: d("multiroute", "svcXXXepYYYrpc"), rate: 50, unit: "MINUTE", metric: dom + ".multiroute_svc*ep*rpc", shared: d("multiroute", "svc*ep*rpc")},
		{entries: d("multiroute", "svceprpc"), rate: 50, unit: "MINUTE", metric: dom + ".multiroute_svc*ep*rpc", shared: d("multiroute", "svc*ep*rpc")},
		{entries: d("multiroute", "svcABCrpc")},
		{entries: d("midroute", "/api/v2"), rate: 80, unit: "MINUTE", metric: dom + ".midroute_/api*v2", shared: d("midroute", "/api*v2")},
		{entries: d("midroute", "/api-beta-v2"), rate: 80, unit: "MINUTE", metric: dom + ".midroute_/api*v2", shared: d("midroute", "/api*v2")},
		{entries: d("tenant", "t1prod", "resource", "resAv2"), rate: 60, unit: "MINUTE", metric: dom + ".tenant_t*prod.resource_res*v2", shared: d("tenant", "t*prod", "resource", "res*v2")},
		{entries: d("tenant", "t99prod", "resource", "resBBBv2"), rate: 60, unit: "MINUTE", metric: dom + ".tenant_t*prod.resource_res*v2", shared: d("tenant", "t*prod", "resource", "res*v2")},
	})

	// The reference's earlier versions refuse share_threshold on a value
	// whose '*' does not end it; so does WildcardsTrailing.
	_, err := Options{Wildcards: WildcardsTrailing}.Load(refFile("share_threshold"))
	if err == nil || !strings.Contains(err.Error(), `share_threshold: can only be used with a wildcard value (ending in '*'), not "/api*v1"`) {
		t.Errorf("share_threshold.yaml, trailing wildcards: %v, want the refusal of /api*v1", err)
	}
}

// TestReferenceInline is the reference's tests on configurations written
// in Go (TestWildcardStatsBehavior, TestDetailedMetric, the
// TestValueToMetric_* tests), as YAML.
func TestReferenceInline(t *testing.T) {
	tests := []struct {
		name, yaml string
		cases      []refCase
	}{
		{"wildcard, no flags", `
- {key: wild, value: "foo*", rate_limit: {unit: minute, requests_per_unit: 20}}`,
			[]refCase{{entries: d("wild", "foo1"), rate: 20, unit: "MINUTE", metric: "test-domain.wild_foo*"}}},
		{"wildcard, value_to_metric", `
- {key: wild, value: "foo*", value_to_metric: true, rate_limit: {unit: minute, requests_per_unit: 20}}`,
			[]refCase{{entries: d("wild", "foo1"), rate: 20, unit: "MINUTE", metric: "test-domain.wild_foo1"}}},
		{"wildcard, share_threshold", `
- {key: wild, value: "foo*", share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 20}}`,
			[]refCase{{entries: d("wild", "foo1"), rate: 20, unit: "MINUTE", metric: "test-domain.wild_foo*", shared: d("wild", "foo*")}}},
		{"wildcard, share_threshold and value_to_metric", `
- {key: wild, value: "foo*", share_threshold: true, value_to_metric: true, rate_limit: {unit: minute, requests_per_unit: 20}}`,
			[]refCase{{entries: d("wild", "foo1"), rate: 20, unit: "MINUTE", metric: "test-domain.wild_foo*", shared: d("wild", "foo*")}}},
		{"value_to_metric on another descriptor", `
- key: wild
  value: "foo*"
  descriptors:
    - key: other
      value_to_metric: true
      descriptors:
        - {key: limit, rate_limit: {unit: minute, requests_per_unit: 20}}`,
			[]refCase{{entries: d("wild", "foo1", "other", "bar", "limit", "X"), rate: 20, unit: "MINUTE", metric: "test-domain.wild_foo*.other_bar.limit"}}},
		{"middle and trailing wildcard, no flags", `
- {key: wild, value: "foo*bar*", rate_limit: {unit: minute, requests_per_unit: 20}}`,
			[]refCase{
				{entries: d("wild", "foo123bar456"), rate: 20, unit: "MINUTE", metric: "test-domain.wild_foo*bar*"},
				{entries: d("wild", "fooXbarY"), rate: 20, unit: "MINUTE", metric: "test-domain.wild_foo*bar*"},
			}},
		{"middle and trailing wildcard, value_to_metric", `
- {key: wild, value: "foo*bar*", value_to_metric: true, rate_limit: {unit: minute, requests_per_unit: 20}}`,
			[]refCase{{entries: d("wild", "foo123bar456"), rate: 20, unit: "MINUTE", metric: "test-domain.wild_foo123bar456"}}},

		{"detailed: only the top-level key requested", `
- key: key-1
  rate_limit: {unit: minute, requests_per_unit: 100}
  detailed_metric: true
  descriptors:
    - {key: key-2, rate_limit: {unit: minute, requests_per_unit: 5}}`,
			[]refCase{{entries: d("key-1", "value-1"), rate: 100, unit: "MINUTE", metric: "test-domain.key-1_value-1"}}},
		{"not detailed: only the top-level key requested", `
- key: key-1
  rate_limit: {unit: minute, requests_per_unit: 100}
  descriptors:
    - {key: key-2, rate_limit: {unit: minute, requests_per_unit: 5}}`,
			[]refCase{{entries: d("key-1", "value-1"), rate: 100, unit: "MINUTE", metric: "test-domain.key-1"}}},
		{"detailed: fully nested request", `
- key: key-1
  rate_limit: {unit: minute, requests_per_unit: 100}
  detailed_metric: true
  descriptors:
    - {key: key-2, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 5}}`,
			[]refCase{{entries: d("key-1", "value-1", "key-2", "value-2"), rate: 5, unit: "MINUTE", metric: "test-domain.key-1_value-1.key-2_value-2"}}},
		{"not detailed: fully nested request", `
- key: key-1
  rate_limit: {unit: minute, requests_per_unit: 100}
  descriptors:
    - {key: key-2, rate_limit: {unit: minute, requests_per_unit: 5}}`,
			[]refCase{{entries: d("key-1", "value-1", "key-2", "value-2"), rate: 5, unit: "MINUTE", metric: "test-domain.key-1.key-2"}}},
		{"detailed: a realistic nested configuration", `
- {key: key_1, rate_limit: {requests_per_unit: 500, unit: minute}, detailed_metric: true}
- {key: key_1, value: some-value-for-key-1, rate_limit: {requests_per_unit: 500, unit: minute}}
- key: key_2
  rate_limit: {requests_per_unit: 5000, unit: minute}
  detailed_metric: true
  descriptors:
    - {key: key_3, detailed_metric: true}
    - {key: key_3, value: requested-key3-value, rate_limit: {requests_per_unit: 5, unit: minute}, detailed_metric: true}
- key: key_2
  value: specific-id
  rate_limit: {requests_per_unit: 50000, unit: minute}
  detailed_metric: true
  descriptors:
    - {key: key_3, detailed_metric: true}
    - {key: key_3, value: requested-key3-value, rate_limit: {requests_per_unit: 100, unit: minute}, detailed_metric: true}`,
			[]refCase{
				{entries: d("key_1", "value-for-key-1"), rate: 500, unit: "MINUTE", metric: "test-domain.key_1_value-for-key-1"},
				{entries: d("key_2", "key-2-value"), rate: 5000, unit: "MINUTE", metric: "test-domain.key_2_key-2-value"},
				{entries: d("key_2", "key-2-value", "key_3", "requested-key3-value"), rate: 5, unit: "MINUTE", metric: "test-domain.key_2_key-2-value.key_3_requested-key3-value"},
			}},

		{"value_to_metric: runtime values", `
- key: route
  value_to_metric: true
  descriptors:
    - key: http_method
      value_to_metric: true
      descriptors:
        - {key: subject_id, rate_limit: {requests_per_unit: 60, unit: minute}}`,
			[]refCase{
				{entries: d("route", "draw", "http_method", "GET", "subject_id", "123"), rate: 60, unit: "MINUTE", metric: "test-domain.route_draw.http_method_GET.subject_id"},
				// TestValueToMetric_WithEmptyValue.
				{entries: d("route", "", "http_method", "GET", "subject_id", "123"), rate: 60, unit: "MINUTE", metric: "test-domain.route.http_method_GET.subject_id"},
				{entries: d("route", "draw", "http_method", "", "subject_id", "123"), rate: 60, unit: "MINUTE", metric: "test-domain.route_draw.http_method.subject_id"},
				{entries: d("route", "", "http_method", "", "subject_id", "123"), rate: 60, unit: "MINUTE", metric: "test-domain.route.http_method.subject_id"},
			}},
		{"value_to_metric: a default's value", `
- key: k1
  value_to_metric: true
  descriptors:
    - {key: k2, rate_limit: {requests_per_unit: 1, unit: second}}`,
			[]refCase{{entries: d("k1", "A", "k2", "foo"), rate: 1, unit: "SECOND", metric: "test-domain.k1_A.k2"}}},
		{"value_to_metric: mid level only", `
- key: k1
  descriptors:
    - key: k2
      value_to_metric: true
      descriptors:
        - {key: k3, rate_limit: {requests_per_unit: 1, unit: second}}`,
			[]refCase{{entries: d("k1", "X", "k2", "Y", "k3", "Z"), rate: 1, unit: "SECOND", metric: "test-domain.k1.k2_Y.k3"}}},
		{"value_to_metric: no flag", `
- key: k1
  descriptors:
    - {key: k2, rate_limit: {requests_per_unit: 1, unit: second}}`,
			[]refCase{{entries: d("k1", "X", "k2", "Y"), rate: 1, unit: "SECOND", metric: "test-domain.k1.k2"}}},
		{"value_to_metric under detailed_metric", `
- key: route
  value_to_metric: true
  descriptors:
    - key: http_method
      value_to_metric: true
      descriptors:
        - {key: subject_id, detailed_metric: true, rate_limit: {requests_per_unit: 60, unit: minute}}`,
			[]refCase{{entries: d("route", "draw", "http_method", "GET", "subject_id", "123"), rate: 60, unit: "MINUTE", metric: "test-domain.route_draw.http_method_GET.subject_id_123"}}},
		{"value_to_metric with configured values", `
- key: route
  value_to_metric: true
  descriptors:
    - key: http_method
      value: GET
      value_to_metric: true
      descriptors:
        - {key: subject_id, rate_limit: {requests_per_unit: 60, unit: minute}}
    - key: http_method
      value: POST
      value_to_metric: true
      descriptors:
        - {key: subject_id, rate_limit: {requests_per_unit: 30, unit: minute}}`,
			[]refCase{
				{entries: d("route", "api", "http_method", "GET", "subject_id", "user123"), rate: 60, unit: "MINUTE", metric: "test-domain.route_api.http_method_GET.subject_id"},
				{entries: d("route", "api", "http_method", "POST", "subject_id", "user456"), rate: 30, unit: "MINUTE", metric: "test-domain.route_api.http_method_POST.subject_id"},
			}},
		{"value_to_metric with a wildcard", `
- key: user
  value_to_metric: true
  descriptors:
    - key: action
      value: "read*"
      value_to_metric: true
      descriptors:
        - {key: resource, rate_limit: {requests_per_unit: 100, unit: minute}}`,
			[]refCase{
				{entries: d("user", "alice", "action", "readfile", "resource", "documents"), rate: 100, unit: "MINUTE", metric: "test-domain.user_alice.action_readfile.resource"},
				{entries: d("user", "bob", "action", "readdata", "resource", "database"), rate: 100, unit: "MINUTE", metric: "test-domain.user_bob.action_readdata.resource"},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("inline.yaml", []byte("domain: test-domain\ndescriptors:"+tt.yaml+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			runRefCases(t, c, "test-domain", tt.cases)
		})
	}
}

// TestReferenceMerge is TestDomainMerge and TestDuplicateKeyDomainMerge.
func TestReferenceMerge(t *testing.T) {
	c := loadRef(t, Options{MergeDomains: true}, "merge_domain_key1", "merge_domain_key2")
	runRefCases(t, c, "test-domain", []refCase{
		{entries: nil},
		{entries: d("key1", "value1"), rate: 10, unit: "MINUTE", metric: "test-domain.key1_value1"},
		{entries: d("key2", "value2"), rate: 20, unit: "MINUTE", metric: "test-domain.key2_value2"},
	})
	if _, ok := c.Match("foo_domain", nil); ok {
		t.Errorf("foo_domain found")
	}
	if _, err := Load(refFile("merge_domain_key1"), refFile("merge_domain_key2")); err == nil || !strings.Contains(err.Error(), `duplicate domain "test-domain"`) {
		t.Errorf("without MergeDomains: %v, want a duplicate domain", err)
	}

	// The same file twice (Load reads a path once: two copies).
	dir := t.TempDir()
	b, err := os.ReadFile(refFile("merge_domain_key1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a.yaml", "b.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err = Options{MergeDomains: true}.Load(dir)
	want := filepath.Join(dir, "b.yaml") + `:5: descriptors[0].key: duplicate descriptor "key1" with value "value1" at this level (test-domain.key1_value1; first at ` + filepath.Join(dir, "a.yaml") + `:5)`
	if err == nil || err.Error() != want {
		t.Errorf("merging a file with itself: %v, want %s", err, want)
	}
}

// TestReferenceRefusals is the reference's tests of files it refuses
// (expectConfigPanic): sluice refuses each, with its own message.
func TestReferenceRefusals(t *testing.T) {
	tests := []struct {
		files []string
		want  string
	}{
		{[]string{"empty_domain"}, "empty_domain.yaml:1: domain: missing or empty"},
		{[]string{"basic_config", "duplicate_domain"}, `duplicate_domain.yaml:1: domain: duplicate domain "test-domain"`},
		{[]string{"empty_key"}, "empty_key.yaml:3: descriptors[0].key: missing or empty"},
		{[]string{"duplicate_key"}, `duplicate_key.yaml:6: descriptors[1].key: duplicate descriptor "key1" with value "value1"`},
		{[]string{"bad_limit_unit"}, `bad_limit_unit.yaml:6: descriptors[0].rate_limit.unit: unknown unit "foo"`},
		{[]string{"replaces_self"}, `replaces_self.yaml:9: descriptors[0].descriptors[0].rate_limit.replaces: a rule must not replace itself ("self")`},
		{[]string{"replaces_empty"}, "replaces_empty.yaml:10: descriptors[0].descriptors[0].rate_limit.replaces[0].name: missing or empty"},
		{[]string{"bad_yaml"}, "bad_yaml.yaml:2: invalid YAML: found unexpected end of stream"},
		{[]string{"misspelled_key"}, "misspelled_key.yaml:5: descriptors[0].ratelimit: unknown key"},
		{[]string{"misspelled_key2"}, "misspelled_key2.yaml:7: descriptors[0].rate_limit.requestsperunit: unknown key"},
		{[]string{"non_string_key"}, "non_string_key.yaml:1: 0.25: unknown key"},
		{[]string{"non_map_list"}, `non_map_list.yaml:3: descriptors[0]: want a mapping, got "a"`},
		{[]string{"unlimited_with_unit"}, "unlimited_with_unit.yaml:6: descriptors[0].rate_limit.unit: must not be set when unlimited"},
	}
	for _, tt := range tests {
		for _, o := range []Options{{}, {Wildcards: WildcardsTrailing}, {MergeDomains: true}} {
			var paths []string
			for _, f := range tt.files {
				paths = append(paths, refFile(f))
			}
			_, err := o.Load(paths...)
			if o.MergeDomains && tt.files[0] == "basic_config" {
				// Merged, the empty domain of duplicate_domain.yaml adds nothing.
				if err != nil {
					t.Errorf("%v merged: %v", tt.files, err)
				}
				continue
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%v (%+v): %v, want %q", tt.files, o, err, tt.want)
			}
		}
	}
}
