package config

import (
	"fmt"
	"strings"
)

// node is one descriptor of the configuration tree; a domain's root is a node
// with no key.
type node struct {
	key, value string
	path       string // stats path: "domain.key_value.key2"
	rules      []*Rule

	detailed, valueToMetric, shareThreshold bool

	exact     map[Entry]*node  // children with a value, wildcard patterns included (looked up literally)
	wildcards []*node          // children whose value ends in '*', in config order
	defaults  map[string]*node // key-only children
}

// addChild adds c below n, rejecting a second node with the same key and
// value (or the same key and no value) at one level.
func (n *node) addChild(c *node) error {
	if c.value == "" {
		if _, dup := n.defaults[c.key]; dup {
			return fmt.Errorf("duplicate descriptor %q with no value at this level (%s)", c.key, c.path)
		}
		if n.defaults == nil {
			n.defaults = map[string]*node{}
		}
		n.defaults[c.key] = c
		return nil
	}
	e := Entry{c.key, c.value}
	if _, dup := n.exact[e]; dup {
		return fmt.Errorf("duplicate descriptor %q with value %q at this level (%s)", c.key, c.value, c.path)
	}
	if n.exact == nil {
		n.exact = map[Entry]*node{}
	}
	n.exact[e] = c
	if strings.HasSuffix(c.value, "*") {
		n.wildcards = append(n.wildcards, c)
	}
	return nil
}

// child finds the node matching one request entry: the exact key/value,
// else the first wildcard in config order whose prefix the value has, else
// the key-only default.
func (n *node) child(d Entry) (c *node, wildcard bool) {
	if c := n.exact[d]; c != nil {
		return c, false
	}
	for _, w := range n.wildcards {
		if w.key == d.Key && strings.HasPrefix(d.Value, w.value[:len(w.value)-1]) {
			return w, true
		}
	}
	return n.defaults[d.Key], false
}

// Match finds the limits that apply to one request descriptor in domain. It
// returns false when the domain is not configured. A descriptor that matches
// no node, or whose last entry's node has no limit, gives a Match with no
// Rules.
func (c *Config) Match(domain string, entries []Entry) (Match, bool) {
	n, ok := c.domains[domain]
	if !ok {
		return Match{}, false
	}
	if len(entries) == 0 {
		return Match{}, true
	}
	// Remember, per entry, the node matched and whether by wildcard; no
	// allocation unless the path ends in a limit.
	var small [8]step
	steps := small[:0]
	for _, e := range entries {
		next, wild := n.child(e)
		if next == nil {
			return Match{}, true
		}
		steps = append(steps, step{next, wild})
		n = next
	}
	if len(n.rules) == 0 {
		return Match{}, true
	}
	metric, detailed := metricName(domain, entries, steps)
	return Match{Rules: n.rules, Key: countingKey(domain, entries, steps), Metric: metric, Detailed: detailed}, true
}

type step struct {
	n        *node
	wildcard bool
}

// CountingKey is the key that counts a descriptor's entries in domain as
// written, with no share_threshold pattern: the counter of a descriptor
// that matched a node by exact values, and of a request's own limit
// override (the reference counts an override and the configured limit of
// the same entries and unit on one counter).
func CountingKey(domain string, entries []Entry) string {
	var small [8]step
	steps := small[:0]
	for range entries {
		steps = append(steps, step{})
	}
	return countingKey(domain, entries, steps)
}

// countingKey builds domain/key=value/key=value with '\', '/', '=' and '*'
// escaped, so that distinct (domain, path, values) never share a key. An
// entry matched by a share_threshold wildcard is written key=pattern: every
// value matching the pattern shares the counter, and so does the pattern
// itself sent as a value (as in the reference, whose key is the same
// string).
func countingKey(domain string, entries []Entry, steps []step) string {
	n := escapedLen(domain)
	for i, e := range entries {
		n += 2 + escapedLen(e.Key)
		n += escapedLen(keyValue(e, steps[i]))
	}
	var b strings.Builder
	b.Grow(n)
	escape(&b, domain)
	for i, e := range entries {
		b.WriteByte('/')
		escape(&b, e.Key)
		b.WriteByte('=')
		escape(&b, keyValue(e, steps[i]))
	}
	return b.String()
}

// keyValue is the value that counts entry e matched at step st: the
// pattern of a share_threshold wildcard, else e's own.
func keyValue(e Entry, st step) string {
	if st.n != nil && st.n.shareThreshold {
		return st.n.value
	}
	return e.Value
}

func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\', '/', '=', '*':
			n++
		}
	}
	return n
}

func escape(b *strings.Builder, s string) {
	if !strings.ContainsAny(s, `\/=*`) {
		b.WriteString(s)
		return
	}
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\', '/', '=', '*':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
}

// metricName is the stats name of a match, following the reference: the
// matched path, with each entry written key_value where value is the
// configured value (the pattern, with its '*', for a wildcard match; nothing
// for a key-only default), except that the request's value is written for
// value_to_metric nodes and, when the matched node has detailed_metric, for
// every entry. A share_threshold wildcard match always writes its pattern,
// like its counter. detailed reports that the name carries request values
// (a detailed_metric or value_to_metric node on the path).
func metricName(domain string, entries []Entry, steps []step) (name string, detailed bool) {
	last := steps[len(steps)-1].n
	plain := !last.detailed
	for _, s := range steps {
		if s.n.valueToMetric || s.n.detailed {
			plain = false
			break
		}
	}
	if plain {
		return last.path, false
	}
	var b strings.Builder
	b.WriteString(domain)
	for i, s := range steps {
		b.WriteByte('.')
		b.WriteString(entries[i].Key)
		v := s.n.value
		switch {
		case s.wildcard && s.n.shareThreshold:
		case last.detailed || s.n.detailed || s.n.valueToMetric:
			v = entries[i].Value
		}
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String(), true
}
