package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

// TestNeverMatches checks that a descriptor that could never match is an
// error naming its line, and what it conflicts with: a wildcard every value
// of which an earlier wildcard of its key matches first, a key-only default
// beside a wildcard that matches every value, a limit deeper than a
// request descriptor can reach.
func TestNeverMatches(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		yaml string
		want string // "" loads
	}{
		{"narrower after broader", Options{}, `
  - {key: k, value: "a*", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: k, value: "ab*", rate_limit: {unit: second, requests_per_unit: 2}}`,
			`t.yaml:5: descriptors[1].value: wildcard "ab*" never matches: every value it matches is matched first by "a*" (line 4), an earlier wildcard of key "k"; put the narrower pattern first`},
		{"narrower first", Options{}, `
  - {key: k, value: "ab*", rate_limit: {unit: second, requests_per_unit: 2}}
  - {key: k, value: "a*", rate_limit: {unit: second, requests_per_unit: 1}}`, ""},
		{"middle wildcard after a broader one", Options{}, `
  - {key: k, value: "foo*", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: k, value: "foo*bar*baz", rate_limit: {unit: second, requests_per_unit: 2}}`,
			`descriptors[1].value: wildcard "foo*bar*baz" never matches: every value it matches is matched first by "foo*"`},
		{"overlapping, neither covers", Options{}, `
  - {key: k, value: "a*", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: k, value: "*b", rate_limit: {unit: second, requests_per_unit: 2}}`, ""},
		{"another key", Options{}, `
  - {key: k, value: "*", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: j, value: "a*", rate_limit: {unit: second, requests_per_unit: 2}}`, ""},
		{"another level", Options{}, `
  - {key: k, value: "*", rate_limit: {unit: second, requests_per_unit: 1}}
  - key: p
    descriptors:
      - {key: k, value: "a*", rate_limit: {unit: second, requests_per_unit: 2}}`, ""},
		{"trailing: narrower after broader", Options{Wildcards: WildcardsTrailing}, `
  - {key: k, value: "a*", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: k, value: "a*b*", rate_limit: {unit: second, requests_per_unit: 2}}`,
			`descriptors[1].value: wildcard "a*b*" never matches: every value it matches is matched first by "a*"`},
		{"trailing: a middle '*' is literal", Options{Wildcards: WildcardsTrailing}, `
  - {key: k, value: "a*", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: k, value: "a*b", rate_limit: {unit: second, requests_per_unit: 2}}`, ""},
		{"default after a match-all wildcard", Options{}, `
  - {key: k, value: "*", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: k, rate_limit: {unit: second, requests_per_unit: 2}}`,
			`t.yaml:5: descriptors[1].key: descriptor "k" with no value never matches: the wildcard value "*" (line 4) matches every value of "k" first`},
		{"match-all wildcard after a default", Options{}, `
  - {key: k, rate_limit: {unit: second, requests_per_unit: 2}}
  - {key: k, value: "**", rate_limit: {unit: second, requests_per_unit: 1}}`,
			`t.yaml:5: descriptors[1].value: wildcard "**" matches every value of "k", so the descriptor "k" with no value (line 4) never matches`},
		{"a wildcard beside a default", Options{}, `
  - {key: k, rate_limit: {unit: second, requests_per_unit: 2}}
  - {key: k, value: "a*", rate_limit: {unit: second, requests_per_unit: 1}}`, ""},
		{"too many wildcards", Options{}, `
  - {key: k, value: "` + strings.Repeat("*a", 17) + `", rate_limit: {unit: second, requests_per_unit: 1}}`,
			`t.yaml:4: descriptors[0].value: 17 wildcards ('*') in one value: at most 16`},
		{"a wildcard too long", Options{}, `
  - {key: k, value: "` + strings.Repeat("a", 1024) + `*", rate_limit: {unit: second, requests_per_unit: 1}}`,
			`t.yaml:4: descriptors[0].value: a wildcard value of 1025 bytes: at most 1024`},
		{"a long literal", Options{Wildcards: WildcardsTrailing}, `
  - {key: k, value: "` + strings.Repeat("*", 2000) + `a", rate_limit: {unit: second, requests_per_unit: 1}}`, ""},
		{"a limit deeper than a request reaches", Options{}, nest(17, "rate_limit: {unit: second, requests_per_unit: 1}"),
			"t.yaml:37: descriptors[0]" + strings.Repeat(".descriptors[0]", 16) + ".rate_limit: a limit 17 levels deep never applies: a request descriptor has at most 16 entries (--max-descriptor-entries)"},
		{"a limit as deep as a request reaches", Options{}, nest(16, "rate_limit: {unit: second, requests_per_unit: 1}"), ""},
		{"rate_limits deeper than a request reaches", Options{MaxEntries: 3}, nest(4, "rate_limits: [{unit: second, requests_per_unit: 1}]"),
			".rate_limits: a limit 4 levels deep never applies: a request descriptor has at most 3 entries"},
		{"a deeper bound", Options{MaxEntries: 17}, nest(17, "rate_limit: {unit: second, requests_per_unit: 1}"), ""},
		{"deep descriptors without a limit", Options{}, nest(30, "rate_limit: ~"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.opts.Parse("t.yaml", []byte("# never\ndomain: d\ndescriptors:"+tt.yaml+"\n"))
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Parse = %v, want it to load", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Parse = %v, want an error with\n%s", err, tt.want)
			}
		})
	}
}

// nest is descriptors nested n deep, in block style from line 4, with
// leaf's key on the deepest.
func nest(n int, leaf string) string {
	var b strings.Builder
	for i := range n {
		ind := strings.Repeat("  ", i+1)
		fmt.Fprintf(&b, "\n%s- key: k%d", ind, i)
		if i < n-1 {
			fmt.Fprintf(&b, "\n%s  descriptors:", ind)
		} else {
			fmt.Fprintf(&b, "\n%s  %s", ind, leaf)
		}
	}
	return b.String()
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestMergeDomains checks MergeDomains: the first level of a domain takes
// the descriptors of every file, in file order (which decides the order of
// wildcards); a duplicate across files names both places; a wildcard of a
// later file shadowed by an earlier file's is an error; the children of
// two descriptors never merge.
func TestMergeDomains(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"a.yaml": "domain: d\ndescriptors:\n  - {key: path, value: \"/api/v1*\", rate_limit: {unit: minute, requests_per_unit: 1}}\n  - {key: user, rate_limit: {unit: minute, requests_per_unit: 2}}\n",
		"b.yaml": "domain: d\ndescriptors:\n  - {key: path, value: \"/api*\", rate_limit: {unit: minute, requests_per_unit: 3}}\n  - {key: tenant, descriptors: [{key: user, rate_limit: {unit: hour, requests_per_unit: 4}}]}\n",
		"c.yaml": "domain: other\ndescriptors:\n  - {key: user, rate_limit: {unit: minute, requests_per_unit: 5}}\n",
	})
	c, err := Options{MergeDomains: true}.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		domain  string
		entries []Entry
		rate    int
	}{
		{"d", d("path", "/api/v1/x"), 1}, // a.yaml's wildcard first
		{"d", d("path", "/api/v2"), 3},
		{"d", d("user", "u"), 2},
		{"d", d("tenant", "t", "user", "u"), 4},
		{"other", d("user", "u"), 5},
	} {
		m, _ := c.Match(tt.domain, tt.entries)
		if len(m.Rules) != 1 || m.Rules[0].Limit.Rate != tt.rate {
			t.Errorf("Match(%s, %v) = %+v, want rate %d", tt.domain, tt.entries, m.Rules, tt.rate)
		}
	}
	if got := len(c.Rules()); got != 5 {
		t.Errorf("%d rules, want 5", got)
	}

	for _, tt := range []struct {
		name   string
		second string
		want   string
	}{
		{"duplicate default", "domain: d\ndescriptors:\n  - {key: user, rate_limit: {unit: hour, requests_per_unit: 9}}\n",
			`z.yaml:3: descriptors[0].key: duplicate descriptor "user" with no value at this level (d.user; first at ` + filepath.Join(dir, "a.yaml") + `:4)`},
		{"duplicate placeholder: children never merge", "domain: d\ndescriptors:\n  - {key: tenant, descriptors: [{key: plan, rate_limit: {unit: hour, requests_per_unit: 9}}]}\n",
			`z.yaml:3: descriptors[0].key: duplicate descriptor "tenant" with no value at this level (d.tenant; first at ` + filepath.Join(dir, "b.yaml") + `:4)`},
		{"shadowed across files", "domain: d\ndescriptors:\n  - {key: path, value: \"/api/v2*\", rate_limit: {unit: hour, requests_per_unit: 9}}\n",
			`z.yaml:3: descriptors[0].value: wildcard "/api/v2*" never matches: every value it matches is matched first by "/api*" (` + filepath.Join(dir, "b.yaml") + `:3)`},
	} {
		z := writeFiles(t, map[string]string{"z.yaml": tt.second})
		_, err := Options{MergeDomains: true}.Load(dir, z)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want\n%s", tt.name, err, tt.want)
		}
	}

	// Without MergeDomains, the second file of a domain is an error.
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `b.yaml:1: domain: duplicate domain "d" (already defined in `) {
		t.Errorf("Load without merging: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{{Wildcards: 7}, {MaxEntries: -1}} {
		if _, err := o.Parse("t.yaml", []byte("domain: a\n")); err == nil {
			t.Errorf("%+v.Parse: no error", o)
		}
		if _, err := o.Load("testdata/compat"); err == nil {
			t.Errorf("%+v.Load: no error", o)
		}
	}
	for _, s := range []string{"anywhere", "trailing"} {
		w, err := ParseWildcards(s)
		if err != nil || w.String() != s {
			t.Errorf("ParseWildcards(%q) = %v, %v", s, w, err)
		}
	}
	if _, err := ParseWildcards("middle"); err == nil {
		t.Errorf("ParseWildcards(middle): no error")
	}
}

// FuzzMerge loads two files, merged: never a panic, errors name their
// file, and a merge that loads holds every rule of both files.
func FuzzMerge(f *testing.F) {
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: k, value: \"a*\", rate_limit: {unit: second, requests_per_unit: 1}}\n"),
		[]byte("domain: d\ndescriptors:\n  - {key: k, value: \"*b\", rate_limit: {unit: second, requests_per_unit: 2}}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n"),
		[]byte("domain: d\ndescriptors:\n  - {key: k, value: \"*\"}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: t, descriptors: [{key: u, rate_limit: {unit: hour, requests_per_unit: 4}}]}\n"),
		[]byte("domain: e\n"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		for _, w := range bothWildcards {
			// Load's path without the files: each file added in turn.
			o := Options{MergeDomains: true, Wildcards: w}
			c := o.empty()
			var errs Errors
			c.add("a.yaml", a, &errs)
			c.add("b.yaml", b, &errs)
			if len(errs) > 0 {
				for _, e := range errs {
					if e.File != "a.yaml" && e.File != "b.yaml" {
						t.Fatalf("an error without its file: %q", e)
					}
				}
				continue
			}
			ca, erra := o.Parse("a.yaml", a)
			cb, errb := o.Parse("b.yaml", b)
			if erra != nil || errb != nil {
				t.Fatalf("the merge loads, the files alone do not: %v, %v", erra, errb)
			}
			if got, want := len(c.Rules()), len(ca.Rules())+len(cb.Rules()); got != want {
				t.Fatalf("merged: %d rules, want %d", got, want)
			}
		}
	})
}

// TestFromXDSOptions checks that an xDS update is read with the Options:
// two resources of one domain merge with MergeDomains, and a conflict names
// the other resource, with no line (a resource has none).
func TestFromXDSOptions(t *testing.T) {
	wild := func(name, value string, rpu uint32) *rlsconf.RateLimitConfig {
		return &rlsconf.RateLimitConfig{Name: name, Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "k", Value: value, RateLimit: xdsLimit(rlsconf.RateLimitUnit_MINUTE, rpu)},
		}}
	}
	if _, err := FromXDS([]*rlsconf.RateLimitConfig{wild("a", "x*y", 1), wild("b", "z*", 2)}); err == nil {
		t.Errorf("two resources of one domain, not merged: no error")
	}
	c, err := Options{MergeDomains: true}.FromXDS([]*rlsconf.RateLimitConfig{wild("b", "z*", 2), wild("a", "x*y", 1)})
	if err != nil {
		t.Fatal(err)
	}
	for v, rate := range map[string]int{"x1y": 1, "z1": 2} {
		if m, _ := c.Match("d", d("k", v)); len(m.Rules) != 1 || m.Rules[0].Limit.Rate != rate {
			t.Errorf("Match(k=%s) = %+v, want rate %d", v, m.Rules, rate)
		}
	}
	_, err = Options{MergeDomains: true}.FromXDS([]*rlsconf.RateLimitConfig{wild("a", "x*", 1), wild("b", "x*y", 2)})
	want := `xds resource "b": descriptors[0].value: wildcard "x*y" never matches: every value it matches is matched first by "x*" (xds resource "a"), an earlier wildcard of key "k"`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("shadowed across resources: %v, want %s", err, want)
	}
	_, err = FromXDS([]*rlsconf.RateLimitConfig{{Name: "a", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "k", Value: "x*", RateLimit: xdsLimit(rlsconf.RateLimitUnit_MINUTE, 1)},
		{Key: "k", Value: "xy*", RateLimit: xdsLimit(rlsconf.RateLimitUnit_MINUTE, 1)},
	}}})
	if want := `matched first by "x*", an earlier`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("shadowed in one resource: %v, want %s", err, want)
	}
}
