package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FixedDescriptors lists the descriptors whose counters are known before
// any request: values written in full at every level (a share_threshold
// pattern included), ending at a limit; not a key-only descriptor, not
// another wildcard, nor what lies below them. In order of domain, key and
// value, and it stops when asked to.
func TestFixedDescriptors(t *testing.T) {
	const yml = `
domain: b
descriptors:
  - key: plan
    value: gold
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: route
        value: /pay
        rate_limit: {unit: second, requests_per_unit: 2}
      - key: user
        rate_limit: {unit: second, requests_per_unit: 3}
  - key: plan
    value: free
    descriptors:
      - key: route
        value: /pay
        rate_limit: {unit: second, requests_per_unit: 4}
  - key: plan
    value: "s*"
    rate_limit: {unit: second, requests_per_unit: 5}
    descriptors:
      - key: route
        value: /x
        rate_limit: {unit: second, requests_per_unit: 6}
  - key: files
    value: "files/*"
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 7}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 8}
    descriptors:
      - key: route
        value: /y
        rate_limit: {unit: second, requests_per_unit: 9}
`
	const ymlA = `
domain: a
descriptors:
  - key: k
    value: v
    rate_limit: {unit: minute, requests_per_unit: 10}
`
	dir := t.TempDir()
	for name, text := range map[string]string{"b.yaml": yml, "a.yaml": ymlA} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Load(filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	c.FixedDescriptors(func(domain string, entries []Entry) bool {
		got = append(got, fmt.Sprint(domain, entries))
		return true
	})
	want := []string{
		"a[{k v}]",
		"b[{files files/*}]",
		"b[{plan free} {route /pay}]",
		"b[{plan gold}]",
		"b[{plan gold} {route /pay}]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("FixedDescriptors:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	n := 0
	c.FixedDescriptors(func(string, []Entry) bool { n++; return n < 2 })
	if n != 2 {
		t.Errorf("FixedDescriptors called f %d times after it returned false on the 2nd, want 2", n)
	}
	// Every one matches its limits, on the counter a request of those
	// values counts on.
	m, _ := c.Match("b", []Entry{{Key: "files", Value: "files/a.pdf"}})
	if f, _ := c.Match("b", []Entry{{Key: "files", Value: "files/*"}}); f.Key != m.Key || len(f.Rules) != 1 {
		t.Errorf("the share_threshold pattern's counter %q, a request's %q; want one", f.Key, m.Key)
	}
}
