package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicehq/sluice"
)

func fw(rate int, period time.Duration) sluice.Limit {
	return sluice.Limit{Algorithm: sluice.FixedWindow, Rate: rate, Period: period}
}

const day = 24 * time.Hour

func d(kv ...string) []Entry {
	var ds []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		ds = append(ds, Entry{kv[i], kv[i+1]})
	}
	return ds
}

type matchCase struct {
	name    string
	domain  string
	entries []Entry
	want    []Rule // nil: no limit applies
	key     string
	metric  string
}

func runMatches(t *testing.T, c *Config, tests []matchCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, ok := c.Match(tt.domain, tt.entries)
			if !ok {
				t.Fatalf("Match(%q, %v): unknown domain", tt.domain, tt.entries)
			}
			var got []Rule
			for _, r := range m.Rules {
				got = append(got, *r)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Match(%q, %v) rules (-want +got):\n%s", tt.domain, tt.entries, diff)
			}
			if m.Key != tt.key || m.Metric != tt.metric {
				t.Errorf("Match(%q, %v) = key %q metric %q, want key %q metric %q", tt.domain, tt.entries, m.Key, m.Metric, tt.key, tt.metric)
			}
		})
	}
}

// TestCompat loads envoyproxy/ratelimit-style files unchanged (the
// reference's README examples and later keys) and checks what each request
// descriptor resolves to.
func TestCompat(t *testing.T) {
	c, err := Load("testdata/compat")
	if err != nil {
		t.Fatal(err)
	}
	wantDomains := []string{"edge_proxy_per_ip", "example4", "example6", "example7", "example8", "example9", "internal", "messaging", "mongo_cps", "newer", "share"}
	if diff := cmp.Diff(wantDomains, c.Domains()); diff != "" {
		t.Fatalf("Domains() (-want +got):\n%s", diff)
	}
	runMatches(t, c, []matchCase{
		{
			name: "exact value", domain: "mongo_cps", entries: d("database", "users"),
			want: []Rule{{Name: "mongo_cps.database_users", Limit: fw(500, time.Second), Unit: "SECOND"}},
			key:  "mongo_cps/database=users", metric: "mongo_cps.database_users",
		},
		{name: "value not configured, no default", domain: "mongo_cps", entries: d("database", "orders")},
		{name: "key not configured", domain: "mongo_cps", entries: d("table", "users")},
		{name: "empty descriptor", domain: "mongo_cps"},
		{
			name: "nested default", domain: "messaging", entries: d("message_type", "marketing", "to_number", "2061111111"),
			want: []Rule{{Name: "messaging.message_type_marketing.to_number", Limit: fw(5, day), Unit: "DAY"}},
			key:  "messaging/message_type=marketing/to_number=2061111111", metric: "messaging.message_type_marketing.to_number",
		},
		{
			name: "default counts per value", domain: "messaging", entries: d("message_type", "marketing", "to_number", "2062222222"),
			want: []Rule{{Name: "messaging.message_type_marketing.to_number", Limit: fw(5, day), Unit: "DAY"}},
			key:  "messaging/message_type=marketing/to_number=2062222222", metric: "messaging.message_type_marketing.to_number",
		},
		{
			name: "top-level default", domain: "messaging", entries: d("to_number", "2061111111"),
			want: []Rule{{Name: "messaging.to_number", Limit: fw(100, day), Unit: "DAY"}},
			key:  "messaging/to_number=2061111111", metric: "messaging.to_number",
		},
		{name: "placeholder node has no limit", domain: "messaging", entries: d("message_type", "marketing")},
		{
			name: "default address", domain: "edge_proxy_per_ip", entries: d("remote_address", "50.0.0.1"),
			want: []Rule{{Name: "edge_proxy_per_ip.remote_address", Limit: fw(10, time.Second), Unit: "SECOND"}},
			key:  "edge_proxy_per_ip/remote_address=50.0.0.1", metric: "edge_proxy_per_ip.remote_address",
		},
		{
			name: "exact value beats default: blocked address", domain: "edge_proxy_per_ip", entries: d("remote_address", "50.0.0.5"),
			want: []Rule{{Name: "edge_proxy_per_ip.remote_address_50.0.0.5", Limit: fw(0, time.Second), Unit: "SECOND", Deny: true}},
			key:  "edge_proxy_per_ip/remote_address=50.0.0.5", metric: "edge_proxy_per_ip.remote_address_50.0.0.5",
		},
		{name: "shallower than the limit", domain: "example4", entries: d("key", "value")},
		{
			name: "depth matches", domain: "example4", entries: d("key", "value", "subkey", "subvalue"),
			want: []Rule{{Name: "example4.key_value.subkey", Limit: fw(300, time.Second), Unit: "SECOND"}},
			key:  "example4/key=value/subkey=subvalue", metric: "example4.key_value.subkey",
		},
		{name: "deeper than the config", domain: "example4", entries: d("key", "value", "subkey", "subvalue", "extra", "x")},
		{
			name: "unlimited", domain: "internal", entries: d("ldap", "anyone"),
			want: []Rule{{Name: "internal.ldap", Unlimited: true}},
			key:  "internal/ldap=anyone", metric: "internal.ldap",
		},
		{
			name: "limited sibling", domain: "internal", entries: d("azure", "x"),
			want: []Rule{{Name: "internal.azure", Limit: fw(100, time.Minute), Unit: "MINUTE"}},
			key:  "internal/azure=x", metric: "internal.azure",
		},
		{
			name: "shadow mode", domain: "example6", entries: d("service", "auth-service", "user", "user-a"),
			want: []Rule{{Name: "example6.service.user_user-a", Limit: fw(10, time.Second), Unit: "SECOND", ShadowMode: true}},
			key:  "example6/service=auth-service/user=user-a", metric: "example6.service.user_user-a",
		},
		{
			name: "not shadowed", domain: "example6", entries: d("service", "auth-service", "user", "user-b"),
			want: []Rule{{Name: "example6.service.user_user-b", Limit: fw(20, time.Second), Unit: "SECOND"}},
			key:  "example6/service=auth-service/user=user-b", metric: "example6.service.user_user-b",
		},
		{
			name: "named rule", domain: "example7", entries: d("key_1", "value_1", "user", "bkthomps"),
			want: []Rule{{Name: "specific_limit", ConfiguredName: "specific_limit", Limit: fw(5, time.Second), Unit: "SECOND"}},
			key:  "example7/key_1=value_1/user=bkthomps", metric: "example7.key_1_value_1.user_bkthomps",
		},
		{
			name: "replacing rule", domain: "example7", entries: d("key_2", "value_2", "user", "bkthomps"),
			want: []Rule{{Name: "example7.key_2_value_2.user_bkthomps", Limit: fw(10, time.Second), Unit: "SECOND", Replaces: []string{"specific_limit"}}},
			key:  "example7/key_2=value_2/user=bkthomps", metric: "example7.key_2_value_2.user_bkthomps",
		},
		{
			name: "detailed metric on a default", domain: "example8", entries: d("key1", "unspecified_value"),
			want: []Rule{{Name: "example8.key1", Limit: fw(10, time.Minute), Unit: "MINUTE", DetailedMetric: true}},
			key:  "example8/key1=unspecified_value", metric: "example8.key1_unspecified_value",
		},
		{
			name: "explicit value beside a detailed default", domain: "example8", entries: d("key1", "value1"),
			want: []Rule{{Name: "example8.key1_value1", Limit: fw(20, time.Minute), Unit: "MINUTE"}},
			key:  "example8/key1=value1", metric: "example8.key1_value1",
		},
		{
			name: "first wildcard in config order", domain: "example9", entries: d("key1", "value_2"),
			want: []Rule{{Name: "example9.key1_value*", Limit: fw(20, time.Minute), Unit: "MINUTE"}},
			key:  "example9/key1=value_2", metric: "example9.key1_value*",
		},
		{
			name: "second wildcard", domain: "example9", entries: d("key1", "valid"),
			want: []Rule{{Name: "example9.key1_val*", Limit: fw(30, time.Minute), Unit: "MINUTE"}},
			key:  "example9/key1=valid", metric: "example9.key1_val*",
		},
		{
			name: "wildcard prefix alone", domain: "example9", entries: d("key1", "value"),
			want: []Rule{{Name: "example9.key1_value*", Limit: fw(20, time.Minute), Unit: "MINUTE"}},
			key:  "example9/key1=value", metric: "example9.key1_value*",
		},
		{
			name: "default after wildcards", domain: "example9", entries: d("key1", "other"),
			want: []Rule{{Name: "example9.key1", Limit: fw(40, time.Minute), Unit: "MINUTE"}},
			key:  "example9/key1=other", metric: "example9.key1",
		},
		{
			name: "nested wildcards", domain: "example9", entries: d("nested", "abc", "leaf", "bcd"),
			want: []Rule{{Name: "example9.nested_a*.leaf_b*", Limit: fw(7, time.Hour), Unit: "HOUR"}},
			key:  "example9/nested=abc/leaf=bcd", metric: "example9.nested_a*.leaf_b*",
		},
		{name: "nested wildcard mismatch", domain: "example9", entries: d("nested", "abc", "leaf", "cd")},
		{
			name: "share_threshold: one counter for the pattern", domain: "share", entries: d("files", "files/a.pdf"),
			want: []Rule{{Name: "share.files_files/*", Limit: fw(100, time.Minute), Unit: "MINUTE", ShareThreshold: true}},
			key:  `share/files=files\/\*`, metric: "share.files_files/*",
		},
		{
			name: "share_threshold: same counter for another value", domain: "share", entries: d("files", "files/b.csv"),
			want: []Rule{{Name: "share.files_files/*", Limit: fw(100, time.Minute), Unit: "MINUTE", ShareThreshold: true}},
			key:  `share/files=files\/\*`, metric: "share.files_files/*",
		},
		{
			name: "share_threshold parent, value_to_metric child", domain: "share", entries: d("route", "api/v1/users", "method", "GET"),
			want: []Rule{{Name: "share.route_api/*.method", Limit: fw(60, time.Minute), Unit: "MINUTE", ValueToMetric: true}},
			key:  `share/route=api\/\*/method=GET`, metric: "share.route_api/*.method_GET",
		},
		{
			name: "exact value beats a shared wildcard", domain: "share", entries: d("file", "test1"),
			want: []Rule{{Name: "share.file_test1", Limit: fw(50, time.Minute), Unit: "MINUTE"}},
			key:  "share/file=test1", metric: "share.file_test1",
		},
		{
			name: "shared wildcard", domain: "share", entries: d("file", "test2"),
			want: []Rule{{Name: "share.file_test*", Limit: fw(100, time.Minute), Unit: "MINUTE", ShareThreshold: true}},
			key:  `share/file=test\*`, metric: "share.file_test*",
		},
		{
			name: "the pattern sent as a value shares its counter (as the reference)", domain: "share", entries: d("file", "test*"),
			want: []Rule{{Name: "share.file_test*", Limit: fw(100, time.Minute), Unit: "MINUTE", ShareThreshold: true}},
			key:  `share/file=test\*`, metric: "share.file_test*",
		},
		{
			name: "value_to_metric on a parent default", domain: "newer", entries: d("route", "/search", "user_id", "u1"),
			want: []Rule{{Name: "newer.route.user_id", Limit: fw(60, time.Minute), Unit: "MINUTE"}},
			key:  "newer/route=\\/search/user_id=u1", metric: "newer.route_/search.user_id",
		},
		{
			name: "quota mode, upper-case unit", domain: "newer", entries: d("tenant", "t1"),
			want: []Rule{{Name: "newer.tenant", Limit: fw(1000, time.Hour), Unit: "HOUR", QuotaMode: true}},
			key:  "newer/tenant=t1", metric: "newer.tenant",
		},
		{
			name: "unit_multiplier", domain: "newer", entries: d("batch", "b"),
			want: []Rule{{Name: "newer.batch", Limit: fw(20, 5*time.Minute), Unit: "MINUTE"}},
			key:  "newer/batch=b", metric: "newer.batch",
		},
		{
			name: "week", domain: "newer", entries: d("unit", "week"),
			want: []Rule{{Name: "newer.unit_week", Limit: fw(1, 7*day), Unit: "WEEK"}},
			key:  "newer/unit=week", metric: "newer.unit_week",
		},
		{
			name: "month is 30 days", domain: "newer", entries: d("unit", "month"),
			want: []Rule{{Name: "newer.unit_month", Limit: fw(2, 30*day), Unit: "MONTH"}},
			key:  "newer/unit=month", metric: "newer.unit_month",
		},
		{
			name: "year is 365 days", domain: "newer", entries: d("unit", "year"),
			want: []Rule{{Name: "newer.unit_year", Limit: fw(3, 365*day), Unit: "YEAR"}},
			key:  "newer/unit=year", metric: "newer.unit_year",
		},
		{name: "null rate_limit is no limit", domain: "newer", entries: d("empty", "x")},
		{name: "node without limit or children", domain: "newer", entries: d("allowed", "x")},
		{
			name: "unlimited ignores requests_per_unit", domain: "newer", entries: d("free", "x"),
			want: []Rule{{Name: "free_tier", ConfiguredName: "free_tier", Unlimited: true}},
			key:  "newer/free=x", metric: "newer.free",
		},
	})
	if _, ok := c.Match("nope", d("a", "b")); ok {
		t.Errorf("Match(unknown domain) ok = true, want false")
	}
}

func TestExtensions(t *testing.T) {
	c, err := Load("testdata/sluice/extensions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	runMatches(t, c, []matchCase{
		{
			name: "sliding log with a window", domain: "ext", entries: d("api_key", "k1"),
			want: []Rule{{Name: "ext.api_key", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: 30 * time.Second, FailureMode: sluice.FailClosed}}},
			key:  "ext/api_key=k1", metric: "ext.api_key",
		},
		{
			name: "two limits on one node", domain: "ext", entries: d("tenant", "acme"),
			want: []Rule{
				{Name: "tenant_per_second", ConfiguredName: "tenant_per_second", Limit: sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Second, Burst: 20}, Unit: "SECOND"},
				{Name: "ext.tenant#1", Limit: fw(100000, day).WithFailureMode(sluice.FailOpen), Unit: "DAY"},
			},
			key: "ext/tenant=acme", metric: "ext.tenant",
		},
		{
			name: "wildcard with a sliding window", domain: "ext", entries: d("path", "/upload/big"),
			want: []Rule{{Name: "ext.path_/upload*", Limit: sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 90, Period: 90 * time.Second}}},
			key:  "ext/path=\\/upload\\/big", metric: "ext.path_/upload*",
		},
	})
}

func TestDefaultExample(t *testing.T) {
	c, err := Parse("example.yaml", DefaultExample())
	if err != nil {
		t.Fatalf("DefaultExample does not parse: %v", err)
	}
	if diff := cmp.Diff([]string{"example"}, c.Domains()); diff != "" {
		t.Fatalf("Domains() (-want +got):\n%s", diff)
	}
	runMatches(t, c, []matchCase{
		{
			name: "fixed window per minute", domain: "example", entries: d("remote_address", "10.0.0.1"),
			want: []Rule{{Name: "example.remote_address", Limit: fw(20, time.Minute), Unit: "MINUTE"}},
			key:  "example/remote_address=10.0.0.1", metric: "example.remote_address",
		},
		{
			name: "sliding log 30s", domain: "example", entries: d("api_key", "k"),
			want: []Rule{{Name: "example.api_key", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: 30 * time.Second}}},
			key:  "example/api_key=k", metric: "example.api_key",
		},
		{
			name: "two limits", domain: "example", entries: d("path", "/search?q=x"),
			want: []Rule{
				{Name: "example.path_/search*#0", Limit: sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 10, Period: time.Second, Burst: 20}, Unit: "SECOND"},
				{Name: "example.path_/search*#1", Limit: fw(1000, time.Hour), Unit: "HOUR"},
			},
			key: "example/path=\\/search?q\\=x", metric: "example.path_/search*",
		},
		{
			name: "unlimited", domain: "example", entries: d("path", "/healthz"),
			want: []Rule{{Name: "example.path_/healthz", Unlimited: true}},
			key:  "example/path=\\/healthz", metric: "example.path_/healthz",
		},
		{name: "other path", domain: "example", entries: d("path", "/")},
	})
}

// TestMatchPrecedence checks the reference's order at each level: the exact
// key/value, then wildcards in config order, then the key-only default; and
// that the node of the last entry decides. (A "*" beside a key-only default
// is an error: the default would never match; see TestNeverMatches.)
func TestMatchPrecedence(t *testing.T) {
	const yml = `
domain: p
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: sub
        rate_limit: {unit: second, requests_per_unit: 11}
  - key: k
    value: "ab*"
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: "a*"
    rate_limit: {unit: second, requests_per_unit: 3}
    descriptors:
      - key: sub
        value: x
        rate_limit: {unit: second, requests_per_unit: 33}
  - key: k
    value: abc
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: any
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: other
    value: "a*"
    rate_limit: {unit: second, requests_per_unit: 6}
`
	c, err := Parse("p.yaml", []byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		entries []Entry
		want    int // Rate of the single rule; 0: no limit
	}{
		{d("k", "abc"), 4},   // exact beats every wildcard
		{d("k", "abd"), 2},   // first wildcard in order
		{d("k", "axe"), 3},   // second wildcard
		{d("k", "zzz"), 1},   // no wildcard matches: the default
		{d("any", "zzz"), 5}, // "*" matches every value
		{d("any", ""), 5},    // the empty value too
		{d("other", "b"), 0}, // wildcard of another key does not apply, no default
		{d("other", "a"), 6},
		{d("k", "axe", "sub", "x"), 33},
		{d("k", "axe", "sub", "y"), 0}, // the wildcard node has no default child: no fallback to the key-only node
		{d("k", "abc", "sub", "x"), 0}, // exact node has no children
		{d("nokey", "x"), 0},
		{d("k", "abc", "k", "abc"), 0},
	}
	for _, tt := range tests {
		m, _ := c.Match("p", tt.entries)
		got := 0
		if len(m.Rules) == 1 {
			got = m.Rules[0].Limit.Rate
		} else if len(m.Rules) > 1 {
			t.Errorf("Match(%v) = %d rules, want at most 1", tt.entries, len(m.Rules))
		}
		if got != tt.want {
			t.Errorf("Match(%v) rate = %d, want %d", tt.entries, got, tt.want)
		}
		if (m.Key == "") != (tt.want == 0) {
			t.Errorf("Match(%v) key = %q with %d rules", tt.entries, m.Key, len(m.Rules))
		}
	}
}

// TestCountingKeysDistinct checks that distinct (path, values) never share a
// counting key, whatever separators the keys and values hold.
func TestCountingKeysDistinct(t *testing.T) {
	c, err := Parse("k.yaml", []byte(`
domain: "d/x"
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: "a/b"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: "a=b"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: "a*"
    rate_limit: {unit: second, requests_per_unit: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	requests := [][]Entry{
		d("a", "b=c"),
		d("a", "b/c"),
		d("a", "b", "b", "c"),
		d("a", `b\`, "b", "c"),
		d("a/b", "c"),
		d("a=b", "c"),
		d("a", "b=c", "b", ""),
		d("a", ""),
		d("a", "", "b", ""),
		d("a*", "x"),
		d("a", "*x"),
		d("a", `\`),
		d("a", `\\`),
	}
	seen := map[string][]Entry{}
	for _, r := range requests {
		m, ok := c.Match("d/x", r)
		if !ok || len(m.Rules) == 0 {
			t.Fatalf("Match(%v): no rule", r)
		}
		if prev, dup := seen[m.Key]; dup {
			t.Errorf("Match(%v) and Match(%v) share key %q", prev, r, m.Key)
		}
		seen[m.Key] = r
	}
}

// TestErrors checks every validation error and that it names the file, the
// line and the offending key.
func TestErrors(t *testing.T) {
	tests := []struct {
		name, give, want string
	}{
		{"empty file", ``, `t.yaml: domain: missing or empty: a config file needs a domain`},
		{"empty domain", `domain: ""`, `t.yaml:1: domain: missing or empty: a config file needs a domain`},
		{"domain is a list", `domain: [a]`, `t.yaml:1: domain: want a string, got a list`},
		{"domain is a list, then descriptors", "domain: [a]\ndescriptors:\n  - key: k\n", `t.yaml:1: domain: want a string, got a list`},
		{"top level is a list", `- domain: a`, `t.yaml:1: want a mapping, got a list`},
		{"bad YAML", "domain: a\ndescriptors: [", `t.yaml:2: invalid YAML: did not find expected node content`},
		{"unknown root key", "domain: a\ndomian: b", `t.yaml:2: domian: unknown key (want one of domain, descriptors)`},
		{"key given twice", "domain: a\ndomain: b", `t.yaml:2: domain: key given twice`},
		{"second document", "domain: a\n---\ndomain: b", `t.yaml:3: a second YAML document: put one domain per file`},
		{"third document", "domain: a\n---\n---\ndomain: b", `t.yaml:4: a second YAML document: put one domain per file`},
		{"descriptors not a list", "domain: a\ndescriptors: {key: x}", `t.yaml:2: descriptors: want a list, got a mapping`},
		{"list of non-maps", "domain: a\ndescriptors: [a]", `t.yaml:2: descriptors[0]: want a mapping, got "a"`},
		{"null descriptor", "domain: a\ndescriptors:\n  -\n", `t.yaml:3: descriptors[0]: want a descriptor mapping with a key, got null`},
		{"misspelled descriptor key", `
domain: a
descriptors:
  - key: k
    ratelimit:
      unit: second`, `t.yaml:5: descriptors[0].ratelimit: unknown key (want one of key, value, rate_limit, rate_limits, descriptors, shadow_mode, detailed_metric, quota_mode, value_to_metric, share_threshold, metadata)`},
		{"misspelled rate_limit key", `
domain: a
descriptors:
  - key: k
    rate_limit:
      unit: second
      requestsperunit: 5`, `t.yaml:7: descriptors[0].rate_limit.requestsperunit: unknown key (want one of unit, unit_multiplier, requests_per_unit, unlimited, name, replaces, algorithm, window, burst, failure_mode, counting)`},
		{"non-string key", `
domain: a
descriptors:
  - key: k
    0.25: x`, `t.yaml:5: descriptors[0].0.25: unknown key (want one of key, value, rate_limit, rate_limits, descriptors, shadow_mode, detailed_metric, quota_mode, value_to_metric, share_threshold, metadata)`},
		{"mapping as key", "domain: a\n? [x]\n: y", `t.yaml:2: a key must be a string, got a list`},
		{"empty key", `
domain: a
descriptors:
  - key: ""
    value: v`, `t.yaml:4: descriptors[0].key: missing or empty: a descriptor needs a key`},
		{"missing key", `
domain: a
descriptors:
  - value: v`, `t.yaml:4: descriptors[0].key: missing or empty: a descriptor needs a key`},
		{"nested empty key", `
domain: a
descriptors:
  - key: k
    descriptors:
      - key: j
      - value: v`, `t.yaml:7: descriptors[0].descriptors[1].key: missing or empty: a descriptor needs a key`},
		{"duplicate key/value", `
domain: a
descriptors:
  - key: k
    value: v
  - key: k
    value: v`, `t.yaml:6: descriptors[1].key: duplicate descriptor "k" with value "v" at this level (a.k_v; first at line 4)`},
		{"duplicate default", `
domain: a
descriptors:
  - key: k
    descriptors:
      - key: j
      - key: j`, `t.yaml:7: descriptors[0].descriptors[1].key: duplicate descriptor "j" with no value at this level (a.k.j; first at line 6)`},
		{"bad unit", `
domain: a
descriptors:
  - key: k
    rate_limit:
      unit: fortnight
      requests_per_unit: 5`, `t.yaml:6: descriptors[0].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)`},
		{"UNKNOWN unit", `
domain: a
descriptors:
  - key: k
    rate_limit: {unit: unknown, requests_per_unit: 5}`, `t.yaml:5: descriptors[0].rate_limit.unit: unknown unit "unknown" (want second, minute, hour, day, week, month or year)`},
		{"missing unit", `
domain: a
descriptors:
  - key: k
    rate_limit:
      requests_per_unit: 5`, `t.yaml:6: descriptors[0].rate_limit.unit: missing: want one of second, minute, hour, day, week, month, year (or a window)`},
		{"empty rate_limit", `
domain: a
descriptors:
  - key: k
    rate_limit: {}`, `t.yaml:5: descriptors[0].rate_limit.unit: missing: want one of second, minute, hour, day, week, month, year (or a window)`},
		{"unlimited with unit", `
domain: a
descriptors:
  - key: k
    rate_limit:
      unlimited: true
      unit: second`, `t.yaml:7: descriptors[0].rate_limit.unit: must not be set when unlimited`},
		{"unlimited with window", `
domain: a
descriptors:
  - key: k
    rate_limit:
      unlimited: true
      window: 30s`, `t.yaml:7: descriptors[0].rate_limit.window: must not be set when unlimited`},
		{"unlimited not a bool", `
domain: a
descriptors:
  - key: k
    rate_limit:
      unlimited: maybe`, `t.yaml:6: descriptors[0].rate_limit.unlimited: want true or false, got "maybe"`},
		{"shadow_mode not a bool", `
domain: a
descriptors:
  - key: k
    shadow_mode: [x]`, `t.yaml:5: descriptors[0].shadow_mode: want true or false, got a list`},
		{"replaces entry without name", `
domain: a
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: 5
      replaces:
        - name: ""`, `t.yaml:9: descriptors[0].rate_limit.replaces[0].name: missing or empty: a replaces entry names the rule it replaces`},
		{"replaces entry empty mapping", `
domain: a
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: 5
      replaces: [{}]`, `t.yaml:8: descriptors[0].rate_limit.replaces[0].name: missing or empty: a replaces entry names the rule it replaces`},
		{"quoted requests_per_unit", `
domain: a
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: "5"}`, `t.yaml:5: descriptors[0].rate_limit.requests_per_unit: want a whole number, got the string "5" (write it unquoted)`},
		{"!!str boolean", `
domain: a
descriptors:
  - key: k
    shadow_mode: !!str true
    rate_limit: {unit: second, requests_per_unit: 5}`, `t.yaml:5: descriptors[0].shadow_mode: want true or false, got the string "true" (write it unquoted)`},
		{"float value", `
domain: a
descriptors:
  - key: k
    value: 1.5
    rate_limit: {unit: second, requests_per_unit: 5}`, `t.yaml:5: descriptors[0].value: 1.5 is a YAML float, which envoyproxy/ratelimit rejects: quote it ("1.5") to mean the string`},
		{"integer value beyond 64 bits", `
domain: a
descriptors:
  - key: k
    value: 18446744073709551615
    rate_limit: {unit: second, requests_per_unit: 5}`, `t.yaml:5: descriptors[0].value: 18446744073709551615 is a YAML integer beyond 64 bits, which envoyproxy/ratelimit rejects: quote it ("18446744073709551615") to mean the string`},
		{"float domain", `domain: 7.5`, `t.yaml:1: domain: 7.5 is a YAML float, which envoyproxy/ratelimit rejects: quote it ("7.5") to mean the string`},
		{"share_threshold without a wildcard", `
domain: a
descriptors:
  - key: k
    value: v
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 5}`, `t.yaml:6: descriptors[0].share_threshold: can only be used with a wildcard value (one with a '*'), not "v"`},
		{"share_threshold on a key-only descriptor", `
domain: a
descriptors:
  - key: k
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 5}`, `t.yaml:5: descriptors[0].share_threshold: can only be used with a wildcard value (one with a '*'), not ""`},
		{"replaces entry unknown key", `
domain: a
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: 5
      replaces:
        - nam: x`, `t.yaml:9: descriptors[0].rate_limit.replaces[0].nam: unknown key (want one of name)`},
		{"replaces itself", `
domain: a
descriptors:
  - key: k
    rate_limit:
      name: me
      unit: second
      requests_per_unit: 5
      replaces:
        - name: me`, `t.yaml:9: descriptors[0].rate_limit.replaces: a rule must not replace itself ("me")`},
		{"replaces not a list", `
domain: a
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: 5
      replaces: x`, `t.yaml:8: descriptors[0].rate_limit.replaces: want a list, got "x"`},
		{"negative requests_per_unit", `
domain: a
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: -1}`, `t.yaml:5: descriptors[0].rate_limit.requests_per_unit: -1 is out of range [0, 4294967295]`},
		{"requests_per_unit over uint32", `
domain: a
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 4294967296}`, `t.yaml:5: descriptors[0].rate_limit.requests_per_unit: 4294967296 is out of range [0, 4294967295]`},
		{"fractional requests_per_unit", `
domain: a
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1.5}`, `t.yaml:5: descriptors[0].rate_limit.requests_per_unit: want a whole number, got "1.5"`},
		{"unit_multiplier 0", `
domain: a
descriptors:
  - key: k
    rate_limit: {unit: second, unit_multiplier: 0, requests_per_unit: 5}`, `t.yaml:5: descriptors[0].rate_limit.unit_multiplier: must be >= 1, got 0`},
		{"unit_multiplier with window", `
domain: a
descriptors:
  - key: k
    rate_limit: {window: 5s, unit_multiplier: 2, requests_per_unit: 5}`, `t.yaml:5: descriptors[0].rate_limit.unit_multiplier: applies to unit, not to window`},
		{"unit and window", `
domain: a
descriptors:
  - key: k
    rate_limit:
      unit: second
      window: 30s
      requests_per_unit: 5`, `t.yaml:7: descriptors[0].rate_limit.window: give unit or window, not both`},
		{"bad window", `
domain: a
descriptors:
  - key: k
    rate_limit:
      window: 5 minutes
      requests_per_unit: 5`, `t.yaml:6: descriptors[0].rate_limit.window: want a positive duration such as 30s or 5m, got "5 minutes"`},
		{"zero window", `
domain: a
descriptors:
  - key: k
    rate_limit: {window: 0s, requests_per_unit: 5}`, `t.yaml:5: descriptors[0].rate_limit.window: want a positive duration such as 30s or 5m, got "0s"`},
		{"window under 1ms", `
domain: a
descriptors:
  - key: k
    rate_limit: {window: 500us, requests_per_unit: 5}`, `t.yaml:5: descriptors[0].rate_limit.window: Period 500µs must be >= 1ms`},
		{"unknown algorithm", `
domain: a
descriptors:
  - key: k
    rate_limit: {algorithm: leaky_bucket, unit: second, requests_per_unit: 5}`, `t.yaml:5: descriptors[0].rate_limit.algorithm: unknown algorithm "leaky_bucket" (want fixed_window, sliding_log, sliding_window, token_bucket or gcra)`},
		{"burst with fixed window", `
domain: a
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: 5
      burst: 10`, `t.yaml:8: descriptors[0].rate_limit.burst: Burst 10 applies only to token_bucket and gcra, not fixed_window`},
		{"sliding window too large", `
domain: a
descriptors:
  - key: k
    rate_limit: {algorithm: sliding_window, unit: year, requests_per_unit: 4000000000}`, `t.yaml:5: descriptors[0].rate_limit.requests_per_unit: Rate × Period (4000000000 × 31536000000000µs) is too large for exact sliding_window arithmetic (limit 2^53); use a shorter Period or fixed_window`},
		{"bad failure_mode", `
domain: a
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5, failure_mode: maybe}`, `t.yaml:5: descriptors[0].rate_limit.failure_mode: want closed, error, open or uncounted, got "maybe"`},
		{"failure_mode open_unbounded", `
domain: a
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5, failure_mode: open_unbounded}`, `t.yaml:5: descriptors[0].rate_limit.failure_mode: want closed, error, open or uncounted, got "open_unbounded"`},
		{"failure_mode default", `
domain: a
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5, failure_mode: default}`, `t.yaml:5: descriptors[0].rate_limit.failure_mode: want closed, error, open or uncounted, got "default"`},
		{"bad counting", `
domain: a
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5, counting: most}`, `t.yaml:5: descriptors[0].rate_limit.counting: want admitted or all, got "most"`},
		{"empty counting", `
domain: a
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5, counting: ""}`, `t.yaml:5: descriptors[0].rate_limit.counting: want admitted or all, got ""`},
		{"sliding_log counting all", `
domain: a
descriptors:
  - key: k
    rate_limit:
      algorithm: sliding_log
      unit: second
      requests_per_unit: 5
      counting: all`, `t.yaml:9: descriptors[0].rate_limit.counting: sliding_log keeps one entry per admitted unit and cannot count hits beyond its Rate; use sliding_window to count every hit`},
		{"counting on an unlimited rule", `
domain: a
descriptors:
  - key: k
    rate_limit: {unlimited: true, counting: all}`, `t.yaml:5: descriptors[0].rate_limit.counting: must not be set when unlimited`},
		{"sliding window too large with a window", `
domain: a
descriptors:
  - key: k
    rate_limit:
      algorithm: sliding_window
      window: 8760h
      requests_per_unit: 4000000000`, `t.yaml:8: descriptors[0].rate_limit.requests_per_unit: Rate × Period (4000000000 × 31536000000000µs) is too large for exact sliding_window arithmetic (limit 2^53); use a shorter Period or fixed_window`},
		{"gcra rate too large for its window", `
domain: a
descriptors:
  - key: k
    rate_limit:
      algorithm: gcra
      window: 1h
      burst: 0
      requests_per_unit: 4294967295`, `t.yaml:9: descriptors[0].rate_limit.requests_per_unit: Burst × Period/gcd(Rate, Period) (4294967295 × 240000000µs) is too large for exact gcra arithmetic (limit 2^52)`},
		{"period too long from a unit", `
domain: a
descriptors:
  - key: k
    rate_limit: {algorithm: gcra, unit: year, unit_multiplier: 200, requests_per_unit: 1}`, `t.yaml:5: descriptors[0].rate_limit: Period of 6307200000000000µs is too long`},
		{"rate_limit and rate_limits", `
domain: a
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5}
    rate_limits: [{unit: minute, requests_per_unit: 50}]`, `t.yaml:6: descriptors[0].rate_limits: give rate_limit or rate_limits, not both`},
		{"empty rate_limits", `
domain: a
descriptors:
  - key: k
    rate_limits: []`, `t.yaml:5: descriptors[0].rate_limits: empty list: give at least one limit or drop the key`},
		{"null in rate_limits", `
domain: a
descriptors:
  - key: k
    rate_limits:
      - unit: second
        requests_per_unit: 5
      -`, `t.yaml:8: descriptors[0].rate_limits[1]: empty limit`},
		{"same algorithm and period twice", `
domain: a
descriptors:
  - key: k
    rate_limits:
      - unit: minute
        requests_per_unit: 5
      - window: 1m
        requests_per_unit: 50`, `t.yaml:8: descriptors[0].rate_limits[1]: same algorithm and period (fixed_window, 1m0s) as descriptors[0].rate_limits[0]: one key holds one state per algorithm and period; keep the stricter limit`},
		{"bad entry in rate_limits", `
domain: a
descriptors:
  - key: k
    rate_limits:
      - unit: minute
        requests_per_unit: 5
      - unit: eon
        requests_per_unit: 50`, `t.yaml:8: descriptors[0].rate_limits[1].unit: unknown unit "eon" (want second, minute, hour, day, week, month or year)`},
		{"block-all with a bad burst", `
domain: a
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 0, burst: 3}`, `t.yaml:5: descriptors[0].rate_limit.burst: Burst 3 applies only to token_bucket and gcra, not fixed_window`},
		{"too deep", deep(65), `t.yaml:2: ` + strings.Repeat("descriptors[0].", 64) + `descriptors: descriptors nested more than 64 levels deep`},
		{"alias bomb", bomb(), `t.yaml:5: descriptors[1].rate_limit: aliases expand the file beyond 5152 YAML nodes (132 written)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("t.yaml", []byte(tt.give))
			if err == nil {
				t.Fatalf("Parse(%q) = %v, want error %q", tt.give, c.Domains(), tt.want)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse error\n got: %s\nwant: %s", got, tt.want)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.File != "t.yaml" {
				t.Errorf("Parse error %#v is not an *Error for t.yaml", err)
			}
		})
	}
}

// deep nests n levels of descriptors in flow style, all on line 2.
func deep(n int) string {
	return "domain: a\ndescriptors: " + strings.Repeat("[{key: k, descriptors: ", n) + "[]" + strings.Repeat("}]", n)
}

// bomb is a billion-laughs document: under a kilobyte, it expands to 10^8
// mappings through merge keys if aliases are followed blindly.
func bomb() string {
	var b strings.Builder
	b.WriteString("domain: a\ndescriptors:\n  - key: anchors\n    metadata:\n")
	b.WriteString("      l0: &l0 {unit: second}\n")
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&b, "      l%d: &l%d {<<: [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*l%d", i-1)
		}
		b.WriteString("]}\n")
	}
	b.WriteString("  - key: k\n    rate_limit: *l8\n")
	return b.String()
}

// TestAnchorsReused checks that ordinary use of anchors (one base limit
// shared by many descriptors) stays well inside the alias budget.
func TestAnchorsReused(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: a\ndescriptors:\n  - key: base\n    rate_limit: &base {unit: minute, requests_per_unit: 10, algorithm: sliding_window}\n")
	for i := range 5000 {
		fmt.Fprintf(&b, "  - key: k\n    value: v%d\n    rate_limit: {<<: *base, requests_per_unit: %d}\n", i, i+1)
		fmt.Fprintf(&b, "  - key: j\n    value: v%d\n    rate_limit: *base\n", i)
	}
	c, err := Parse("a.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := c.Match("a", d("k", "v4999"))
	if len(m.Rules) != 1 || m.Rules[0].Limit != (sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 5000, Period: time.Minute}) {
		t.Errorf("Match(k=v4999) = %+v", m.Rules)
	}
}

func TestTrailingEmptyDocuments(t *testing.T) {
	for _, y := range []string{"---\ndomain: a\n---\n", "domain: a\n---\n# nothing\n---\n~\n"} {
		c, err := Parse("t.yaml", []byte(y))
		if err != nil {
			t.Errorf("Parse(%q) = %v", y, err)
			continue
		}
		if diff := cmp.Diff([]string{"a"}, c.Domains()); diff != "" {
			t.Errorf("Parse(%q).Domains() (-want +got):\n%s", y, diff)
		}
	}
}

func TestDeepest(t *testing.T) {
	if _, err := Parse("t.yaml", []byte(deep(64))); err != nil {
		t.Errorf("Parse(64 levels) = %v, want nil", err)
	}
}

func TestBombIsFast(t *testing.T) {
	start := time.Now()
	if _, err := Parse("t.yaml", []byte(bomb())); err == nil {
		t.Fatal("Parse(bomb) succeeded")
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Parse(bomb) took %v", el)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("conf/a.yaml", "domain: a\n")
	write("conf/b.yml", "domain: b\n")
	write("conf/.hidden.yaml", "not: valid\n")
	write("conf/readme.txt", "ignored")
	write("conf/sub/c.yaml", "domain: c\n")
	dup := write("dup/a.yaml", "# same domain\n\ndomain: a\n")
	bad := write("bad/x.yaml", "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n")
	bad2 := write("bad/y.yaml", "domain: [y]\ndomian: y\n")
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}

	if err := os.Symlink(filepath.Join(dir, "conf"), filepath.Join(dir, "conf", "sub", "loop")); err != nil {
		t.Fatal(err)
	}
	c, err := Load(filepath.Join(dir, "conf"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, c.Domains()); diff != "" {
		t.Errorf("Load(dir).Domains(), subdirectories included as the reference loads them (-want +got):\n%s", diff)
	}
	c, err = Load(filepath.Join(dir, "conf"), filepath.Join(dir, "conf/sub/c.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, c.Domains()); diff != "" {
		t.Errorf("Load(dir, a file in it).Domains(), the file read once (-want +got):\n%s", diff)
	}

	errTests := []struct {
		name  string
		paths []string
		want  string
	}{
		{"duplicate domain", []string{a, dup}, dup + `:3: domain: duplicate domain "a" (already defined in ` + a + ")"},
		{"bad file names itself", []string{a, bad}, bad + `:4: descriptors[0].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)`},
		{"missing file", []string{filepath.Join(dir, "nope.yaml")}, filepath.Join(dir, "nope.yaml") + ": no such file or directory"},
		{"empty directory", []string{empty}, empty + ": no *.yaml or *.yml files in this directory"},
		{"nothing", nil, "no configuration files given"},
		{"every bad file", []string{bad, dup, a, bad2}, bad + `:4: descriptors[0].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)` + "\n" +
			a + `:1: domain: duplicate domain "a" (already defined in ` + dup + ")\n" +
			bad2 + ":1: domain: want a string, got a list\n" +
			bad2 + ":2: domian: unknown key (want one of domain, descriptors)"},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.paths...)
			if err == nil || err.Error() != tt.want {
				t.Errorf("Load(%v) error = %v, want %s", tt.paths, err, tt.want)
			}
		})
	}
}

func TestYAMLFeatures(t *testing.T) {
	// Anchors, merge keys, YAML 1.1 booleans and scalar values of any type
	// decode as the reference's YAML library decodes them.
	c, err := Parse("f.yaml", []byte(`
domain: f
x-base: &base
  unit: minute
  requests_per_unit: 10
descriptors:
  - key: port
    value: 8080
    shadow_mode: yes
    rate_limit:
      <<: *base
      requests_per_unit: 20
  - key: flag
    value: true
    rate_limit: *base
`))
	if err == nil {
		t.Fatalf("Parse accepted an unknown root key x-base: %v", c.Domains())
	}
	c, err = Parse("f.yaml", []byte(`
domain: f
descriptors:
  - key: port
    value: 8080
    shadow_mode: yes
    rate_limit: &base
      unit: minute
      requests_per_unit: 10
  - key: flag
    value: true
    rate_limit:
      <<: *base
      requests_per_unit: 0x20
`))
	if err != nil {
		t.Fatal(err)
	}
	runMatches(t, c, []matchCase{
		{
			name: "int value, yes", domain: "f", entries: d("port", "8080"),
			want: []Rule{{Name: "f.port_8080", Limit: fw(10, time.Minute), Unit: "MINUTE", ShadowMode: true}},
			key:  "f/port=8080", metric: "f.port_8080",
		},
		{
			name: "bool value, merge key", domain: "f", entries: d("flag", "true"),
			want: []Rule{{Name: "f.flag_true", Limit: fw(32, time.Minute), Unit: "MINUTE"}},
			key:  "f/flag=true", metric: "f.flag_true",
		},
	})
}

func TestMatchAllocs(t *testing.T) {
	c, err := Parse("example.yaml", DefaultExample())
	if err != nil {
		t.Fatal(err)
	}
	miss := d("path", "/nothing")
	if n := testing.AllocsPerRun(100, func() { c.Match("example", miss) }); n != 0 {
		t.Errorf("Match without a limit allocates %v times, want 0", n)
	}
	hit := d("remote_address", "10.0.0.1")
	if n := testing.AllocsPerRun(100, func() { c.Match("example", hit) }); n > 1 {
		t.Errorf("Match with a limit allocates %v times, want at most 1 (the key)", n)
	}
	escaped := d("remote_address", "a/b=c*d\\")
	if n := testing.AllocsPerRun(100, func() { c.Match("example", escaped) }); n > 1 {
		t.Errorf("Match with an escaped key allocates %v times, want at most 1", n)
	}
}

func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/compat", "testdata/sluice", "testdata/reference"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			f.Fatal(err)
		}
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Add(DefaultExample())
	f.Add([]byte(bomb()))
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: k, value: \"a*b*c\", share_threshold: true, rate_limit: {unit: second, requests_per_unit: 1}}\n  - {key: k, value: \"a*\"}\n  - {key: k}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, o := range []Options{{}, {Wildcards: WildcardsTrailing, MaxEntries: 2}} {
			c, err := o.Parse("fuzz.yaml", data)
			if err != nil {
				var ce *Error
				if !errors.As(err, &ce) {
					t.Fatalf("Parse error %v is not an *Error", err)
				}
				if ce.File != "fuzz.yaml" || !strings.HasPrefix(err.Error(), "fuzz.yaml") {
					t.Fatalf("Parse error %q does not name the file", err)
				}
				continue
			}
			// Every rule of a config that loads is usable: a valid limit, or
			// unlimited, or the reference's block-all.
			for _, dom := range c.Domains() {
				walk(t, c.domains[dom])
			}
		}
	})
}

func walk(t *testing.T, n *node) {
	for _, r := range n.rules {
		switch {
		case r.Unlimited:
		case r.Deny:
			if r.Limit.Rate != 0 {
				t.Fatalf("rule %s: Deny with Rate %d", r.Name, r.Limit.Rate)
			}
		default:
			if err := r.Limit.Validate(); err != nil {
				t.Fatalf("rule %s: %v", r.Name, err)
			}
		}
	}
	for _, c := range n.exact {
		walk(t, c)
	}
	for _, c := range n.defaults {
		walk(t, c)
	}
}

func BenchmarkMatch(b *testing.B) {
	c, err := Load("testdata/compat")
	if err != nil {
		b.Fatal(err)
	}
	for _, bb := range []struct {
		name    string
		domain  string
		entries []Entry
	}{
		{"exact", "mongo_cps", d("database", "users")},
		{"nested-default", "messaging", d("message_type", "marketing", "to_number", "2061111111")},
		{"wildcard", "example9", d("key1", "valid")},
		{"miss", "mongo_cps", d("database", "orders")},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.Match(bb.domain, bb.entries)
			}
		})
	}
}

// A !!binary value is its decoded bytes, as the reference's decoder reads
// it; plain integers and booleans are their text.
func TestScalarValues(t *testing.T) {
	c, err := Parse("t.yaml", []byte(`
domain: a
descriptors:
  - key: bin
    value: !!binary aGVsbG8=
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: int
    value: 0x1F
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: bool
    value: true
    rate_limit: {unit: second, requests_per_unit: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		key, value string
		rate       int
	}{{"bin", "hello", 1}, {"int", "0x1F", 2}, {"bool", "true", 3}} {
		m, ok := c.Match("a", []Entry{{tt.key, tt.value}})
		if !ok || len(m.Rules) != 1 || m.Rules[0].Limit.Rate != tt.rate {
			t.Errorf("Match(%s=%s) = %+v, want the limit of rate %d", tt.key, tt.value, m, tt.rate)
		}
	}
}

// TestErrorsAll checks that one parse reports every problem of a file, in
// file order, each with its own line and key, and goes on past a bad
// descriptor, limit or key to the next.
func TestErrorsAll(t *testing.T) {
	give := `domain: a
descriptors:
  - key: k
    rate_limit: {unit: fortnight, requests_per_unit: 5}
  - key: j
    colour: red
    rate_limit:
      unit: minute
      requests_per_unit: -1
      algorithm: best
  - value: v
    descriptors:
      - key: deep
        rate_limit: {unit: eon, requests_per_unit: 1}
  - key: two
    rate_limits:
      - {unit: second, requests_per_unit: 1, burst: 2}
      - {unit: second, requests_per_unit: 1}
      - {unit: second, requests_per_unit: 2}
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
extra: 1
`
	want := []string{
		`t.yaml:4: descriptors[0].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)`,
		`t.yaml:6: descriptors[1].colour: unknown key (want one of key, value, rate_limit, rate_limits, descriptors, shadow_mode, detailed_metric, quota_mode, value_to_metric, share_threshold, metadata)`,
		`t.yaml:9: descriptors[1].rate_limit.requests_per_unit: -1 is out of range [0, 4294967295]`,
		`t.yaml:11: descriptors[2].key: missing or empty: a descriptor needs a key`,
		`t.yaml:14: descriptors[2].descriptors[0].rate_limit.unit: unknown unit "eon" (want second, minute, hour, day, week, month or year)`,
		`t.yaml:17: descriptors[3].rate_limits[0].burst: Burst 2 applies only to token_bucket and gcra, not fixed_window`,
		`t.yaml:19: descriptors[3].rate_limits[2]: same algorithm and period (fixed_window, 1s) as descriptors[3].rate_limits[1]: one key holds one state per algorithm and period; keep the stricter limit`,
		`t.yaml:20: descriptors[4].key: duplicate descriptor "k" with no value at this level (a.k; first at line 3)`,
		`t.yaml:22: descriptors[5].key: duplicate descriptor "k" with no value at this level (a.k; first at line 3)`,
		`t.yaml:24: extra: unknown key (want one of domain, descriptors)`,
	}
	_, err := Parse("t.yaml", []byte(give))
	if err == nil {
		t.Fatal("Parse: no error")
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("Parse errors (-want +got):\n%s", diff)
	}
	var es Errors
	if !errors.As(err, &es) || len(es) != len(want) || es[0].Line != 4 || es[0].Path != "descriptors[0].rate_limit.unit" {
		t.Errorf("Parse error %#v: want Errors, the first at line 4 on descriptors[0].rate_limit.unit", err)
	}
}

// TestErrorsBound checks that a file with many errors reports MaxErrors of
// them and says it stopped.
func TestErrorsBound(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: a\ndescriptors:\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "  - key: k%d\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", i)
	}
	_, err := Parse("t.yaml", []byte(b.String()))
	var es Errors
	if !errors.As(err, &es) || len(es) != MaxErrors+1 {
		t.Fatalf("Parse: %d errors, want %d and a last line", len(es), MaxErrors+1)
	}
	if got := es[MaxErrors-1].Error(); !strings.HasPrefix(got, fmt.Sprintf("t.yaml:%d: descriptors[%d]", 2*MaxErrors+2, MaxErrors-1)) {
		t.Errorf("error %d = %s", MaxErrors, got)
	}
	if got, want := es[MaxErrors].Error(), "t.yaml: stopped after 20 errors: fix these and run again for the rest"; got != want {
		t.Errorf("last line = %q, want %q", got, want)
	}
}

// TestYAMLSyntaxLines checks that a YAML syntax error names the line of
// the construct that failed: the decoder counts a parser error's line from
// 0 and omits line 1.
func TestYAMLSyntaxLines(t *testing.T) {
	tests := []struct {
		name, give, want string
	}{
		{"unclosed brace", "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1\n", `t.yaml:4: invalid YAML: did not find expected ',' or '}'`},
		{"unclosed bracket", "domain: x\ndescriptors:\n  - key: k\n    rate_limit: [a, b\n\n\n", `t.yaml:4: invalid YAML: did not find expected ',' or ']'`},
		{"unclosed bracket at the end", "domain: a\ndescriptors: [", `t.yaml:2: invalid YAML: did not find expected node content`},
		{"bad indentation", "domain: x\ndescriptors:\n  - key: k\n   bad: 1\n", `t.yaml:3: invalid YAML: did not find expected '-' indicator`},
		{"unclosed quote", "domain: x\ndescriptors:\n  - key: k\n    value: \"abc\n", `t.yaml:4: invalid YAML: found unexpected end of stream`},
		{"tab", "domain: x\n\tdescriptors: 1\n", `t.yaml:2: invalid YAML: found a tab character that violates indentation`},
		{"line 1", "a: b: c\n", `t.yaml:1: invalid YAML: mapping values are not allowed in this context`},
		{"control character", "domain: x\ndescriptors:\n  - key: \x01\n", `t.yaml:3: invalid YAML: control characters are not allowed`},
		{"invalid UTF-8", "domain: x\n\n# \xff\n", `t.yaml:3: invalid YAML: invalid leading UTF-8 octet`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tt.give))
			if err == nil || err.Error() != tt.want {
				t.Errorf("Parse(%q) = %v, want %s", tt.give, err, tt.want)
			}
		})
	}
}

// TestCounting: a rule's counting key sets its Limit.Counting and
// CountingSet; a rule without one leaves the service's default to apply.
func TestCounting(t *testing.T) {
	c, err := Parse("t.yaml", []byte(`
domain: a
descriptors:
  - key: all
    rate_limit: {unit: second, requests_per_unit: 5, counting: all}
  - key: adm
    rate_limit: {unit: second, requests_per_unit: 5, counting: admitted}
  - key: none
    rate_limit: {unit: second, requests_per_unit: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key     string
		wantC   sluice.Counting
		wantSet bool
	}{
		{"all", sluice.CountAll, true},
		{"adm", sluice.CountAdmitted, true},
		{"none", sluice.CountAdmitted, false},
	}
	for _, tt := range tests {
		m, _ := c.Match("a", []Entry{{Key: tt.key, Value: "v"}})
		if len(m.Rules) != 1 || m.Rules[0].Limit.Counting != tt.wantC || m.Rules[0].CountingSet != tt.wantSet {
			t.Errorf("%s: rules %+v, want Counting %v, CountingSet %v", tt.key, m.Rules, tt.wantC, tt.wantSet)
		}
	}
}

func TestFailureModeError(t *testing.T) {
	for _, tt := range []struct {
		name string
		want sluice.FailureMode
	}{
		{"error", sluice.FailError},
		{"uncounted", sluice.FailUncounted},
		{"closed", sluice.FailClosed},
		{"open", sluice.FailOpen},
	} {
		c, err := Parse("t.yaml", []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, failure_mode: "+tt.name+"}\n"))
		if err != nil {
			t.Fatalf("failure_mode: %s: %v", tt.name, err)
		}
		m, ok := c.Match("a", d("k", "v"))
		if !ok || len(m.Rules) != 1 || m.Rules[0].Limit.FailureMode != tt.want {
			t.Errorf("failure_mode: %s: Match = %+v, %v; want one rule failing %v", tt.name, m, ok, tt.want)
		}
	}
}
