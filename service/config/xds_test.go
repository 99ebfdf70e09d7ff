package config

import (
	"reflect"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

func xdsLimit(unit rlsconf.RateLimitUnit, rpu uint32) *rlsconf.RateLimitPolicy {
	return &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: rpu}
}

// TestFromXDSIsTheFile: a RateLimitConfig with every field of the proto
// gives the configuration of the YAML file that says the same.
func TestFromXDSIsTheFile(t *testing.T) {
	named := xdsLimit(rlsconf.RateLimitUnit_HOUR, 100)
	named.Name = "generic"
	specific := xdsLimit(rlsconf.RateLimitUnit_HOUR, 1)
	specific.Name = "specific"
	specific.Replaces = []*rlsconf.RateLimitReplace{{Name: "generic"}}
	res := &rlsconf.RateLimitConfig{Name: "res", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "plain", RateLimit: xdsLimit(rlsconf.RateLimitUnit_MINUTE, 5)},
		{Key: "kv", Value: "sil*", RateLimit: xdsLimit(rlsconf.RateLimitUnit_SECOND, 4), DetailedMetric: true},
		{Key: "kv", Value: "yes", RateLimit: xdsLimit(rlsconf.RateLimitUnit_DAY, 0)}, // a YAML bool as a value, blocked
		{Key: "unl", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
		{Key: "shadow", ShadowMode: true, RateLimit: xdsLimit(rlsconf.RateLimitUnit_MINUTE, 1)},
		{Key: "generic", RateLimit: named},
		{Key: "specific", RateLimit: specific},
		{Key: "org", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "user", RateLimit: xdsLimit(rlsconf.RateLimitUnit_MINUTE, 2)},
			{Key: "plan", Value: "123", Descriptors: []*rlsconf.RateLimitDescriptor{
				{Key: "path", Value: "#: x", RateLimit: xdsLimit(rlsconf.RateLimitUnit_HOUR, 3)},
			}},
		}},
	}}
	const file = `domain: edge
descriptors:
  - key: plain
    rate_limit: {unit: MINUTE, requests_per_unit: 5}
  - key: kv
    value: "sil*"
    detailed_metric: true
    rate_limit: {unit: SECOND, requests_per_unit: 4}
  - key: kv
    value: "yes"
    rate_limit: {unit: DAY, requests_per_unit: 0}
  - key: unl
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: MINUTE, requests_per_unit: 1}
  - key: generic
    rate_limit: {unit: HOUR, requests_per_unit: 100, name: generic}
  - key: specific
    rate_limit: {unit: HOUR, requests_per_unit: 1, name: specific, replaces: [{name: generic}]}
  - key: org
    descriptors:
      - key: user
        rate_limit: {unit: MINUTE, requests_per_unit: 2}
      - key: plan
        value: "123"
        descriptors:
          - key: path
            value: "#: x"
            rate_limit: {unit: HOUR, requests_per_unit: 3}
`
	got, err := FromXDS([]*rlsconf.RateLimitConfig{res})
	if err != nil {
		t.Fatal(err)
	}
	want, err := Parse("edge.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.domains, want.domains) {
		t.Fatalf("FromXDS and the file differ:\n xds: %v\nfile: %v", got.Rules(), want.Rules())
	}
	if len(got.Rules()) != 9 {
		t.Fatalf("%d rules, want 9", len(got.Rules()))
	}
	m, ok := got.Match("edge", d("org", "o1", "plan", "123", "path", "#: x"))
	if !ok || len(m.Rules) != 1 || m.Rules[0].Limit.Rate != 3 {
		t.Fatalf("nested match %+v %v", m, ok)
	}
}

func TestFromXDSEmpty(t *testing.T) {
	c, err := FromXDS(nil)
	if err != nil || len(c.Domains()) != 0 {
		t.Fatalf("no resources: %v %v", c.Domains(), err)
	}
	if _, ok := c.Match("any", d("k", "v")); ok {
		t.Fatal("a Config without domains matched")
	}
}

func TestFromXDSErrors(t *testing.T) {
	deep := &rlsconf.RateLimitDescriptor{Key: "k", RateLimit: xdsLimit(rlsconf.RateLimitUnit_SECOND, 1)}
	for range maxDepth + 1 {
		deep = &rlsconf.RateLimitDescriptor{Key: "k", Descriptors: []*rlsconf.RateLimitDescriptor{deep}}
	}
	unitAndUnlimited := &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, Unlimited: true}
	many := make([]*rlsconf.RateLimitConfig, MaxXDSResources+1)
	for i := range many {
		many[i] = &rlsconf.RateLimitConfig{}
	}
	for _, tc := range []struct {
		name string
		res  []*rlsconf.RateLimitConfig
		want string
	}{
		{"duplicate domain", []*rlsconf.RateLimitConfig{{Name: "b", Domain: "x"}, {Name: "a", Domain: "x"}},
			`xds resource "b": domain: duplicate domain "x" (already defined in xds resource "a")`},
		{"no domain", []*rlsconf.RateLimitConfig{{Name: "a"}}, `xds resource "a": domain: missing or empty`},
		{"no unit", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "x", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 1}}}}}, `xds resource "a": descriptors[0].rate_limit.unit: missing`},
		{"an unknown unit", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "x", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "k", RateLimit: xdsLimit(9, 1)}}}}, `xds resource "a": descriptors[0].rate_limit.unit`},
		{"a unit with unlimited", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "x", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "k", RateLimit: unitAndUnlimited}}}}, `xds resource "a": descriptors[0].rate_limit`},
		{"no key", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "x", Descriptors: []*rlsconf.RateLimitDescriptor{
			{RateLimit: xdsLimit(rlsconf.RateLimitUnit_SECOND, 1)}}}}, `xds resource "a": descriptors[0].key`},
		{"too deep", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "x", Descriptors: []*rlsconf.RateLimitDescriptor{deep}}}, "nested deeper than 64 levels"},
		{"too many", many, "10001 resources: at most 10000"},
		{"a long name", []*rlsconf.RateLimitConfig{{Name: strings.Repeat("n", MaxXDSNameBytes+1), Domain: "x"}}, `xds resource #0: name: 1025 bytes: at most 1024`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := FromXDS(tc.res)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("FromXDS: %v %v, want an error with %q", c, err, tc.want)
			}
			es, ok := err.(Errors)
			if !ok || len(es) == 0 {
				t.Fatalf("error %T is no Errors", err)
			}
			for _, e := range es {
				if e.Line != 0 {
					t.Errorf("error %q has a line", e)
				}
			}
		})
	}
}

// FuzzFromXDS: any RateLimitConfig a control plane can send gives a
// Config or an Errors, never a panic.
func FuzzFromXDS(f *testing.F) {
	seed := &rlsconf.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "k", Value: "v*", RateLimit: xdsLimit(rlsconf.RateLimitUnit_MINUTE, 3), Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "k2", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true, Name: "x", Replaces: []*rlsconf.RateLimitReplace{{Name: "y"}}}}}},
	}}
	b, err := proto.Marshal(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var r rlsconf.RateLimitConfig
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		c, err := FromXDS([]*rlsconf.RateLimitConfig{&r, &r})
		if err == nil {
			t.Fatalf("the same domain twice loaded: %v", c.Domains())
		}
		if _, ok := err.(Errors); !ok {
			t.Fatalf("error %T is no Errors: %v", err, err)
		}
		if c, err = FromXDS([]*rlsconf.RateLimitConfig{&r}); err == nil && len(c.Domains()) != 1 {
			t.Fatalf("one resource gave domains %v", c.Domains())
		}
	})
}
