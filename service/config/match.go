package config

import (
	"fmt"
	"slices"
	"strings"
)

// node is one descriptor of the configuration tree; a domain's root is a node
// with no key.
type node struct {
	key, value string
	path       string // stats path: "domain.key_value.key2"
	rules      []*Rule
	pat        *pattern // the value's wildcards; nil for an exact value

	detailed, valueToMetric, shareThreshold bool

	exact     map[Entry]*node    // children with a value, wildcard patterns included (looked up literally)
	wildcards map[string][]*node // children whose value has wildcards, by key, in config order
	defaults  map[string]*node   // key-only children
}

// childError is why a child cannot be added. field names its key ("key"
// or "value") that the error is about; other is the node it conflicts
// with, whose place fills the one %s of format: " (line 12)", or with dup
// "; first at line 12", or "" when unknown.
type childError struct {
	field, format string
	other         *node
	dup           bool
}

func (e *childError) Error() string { return fmt.Sprintf(e.format, "") }

// describe is e's message with the place of the node it conflicts with,
// found by where ("line 12", "other.yaml:12", "" when unknown).
func (e *childError) describe(where func(*node) string) string {
	w := where(e.other)
	switch {
	case w == "":
	case e.dup:
		w = "; first at " + w
	default:
		w = " (" + w + ")"
	}
	return fmt.Sprintf(e.format, w)
}

// addChild adds c below n. It rejects a second node with the same key and
// value (or the same key and no value) at one level, and a node that could
// never match: a wildcard whose every value an earlier wildcard of the same
// key matches first, a key-only default beside a wildcard that matches
// every value.
func (n *node) addChild(c *node) error {
	if c.value == "" {
		if prev, dup := n.defaults[c.key]; dup {
			return &childError{"key", fmt.Sprintf("duplicate descriptor %q with no value at this level (%s%%s)", c.key, c.path), prev, true}
		}
		for _, w := range n.wildcards[c.key] {
			if w.pat.all {
				return &childError{"key", fmt.Sprintf("descriptor %q with no value never matches: the wildcard value %q%%s matches every value of %q first", c.key, w.value, c.key), w, false}
			}
		}
		if n.defaults == nil {
			n.defaults = map[string]*node{}
		}
		n.defaults[c.key] = c
		return nil
	}
	e := Entry{c.key, c.value}
	if prev, dup := n.exact[e]; dup {
		return &childError{"key", fmt.Sprintf("duplicate descriptor %q with value %q at this level (%s%%s)", c.key, c.value, c.path), prev, true}
	}
	if c.pat != nil {
		if len(n.wildcards[c.key]) >= MaxKeyWildcards {
			return &childError{"value", fmt.Sprintf("more than %d wildcard values of key %q at this level%%s: each request's value is tried against each of them; use fewer, broader patterns", MaxKeyWildcards, c.key), nil, false}
		}
		for _, w := range n.wildcards[c.key] {
			if w.pat.covers(c.pat) {
				return &childError{"value", fmt.Sprintf("wildcard %q never matches: every value it matches is matched first by %q%%s, an earlier wildcard of key %q; put the narrower pattern first", c.value, w.value, c.key), w, false}
			}
		}
		if d, ok := n.defaults[c.key]; ok && c.pat.all {
			return &childError{"value", fmt.Sprintf("wildcard %q matches every value of %q, so the descriptor %q with no value%%s never matches", c.value, c.key, c.key), d, false}
		}
	}
	if n.exact == nil {
		n.exact = map[Entry]*node{}
	}
	n.exact[e] = c
	if c.pat != nil {
		if n.wildcards == nil {
			n.wildcards = map[string][]*node{}
		}
		n.wildcards[c.key] = append(n.wildcards[c.key], c)
	}
	return nil
}

// child finds the node matching one request entry: the exact key/value,
// else the first wildcard of the key, in config order, that the value
// matches, else the key-only default.
func (n *node) child(d Entry) (c *node, wildcard bool) {
	if c := n.exact[d]; c != nil {
		return c, false
	}
	for _, w := range n.wildcards[d.Key] {
		if w.pat.match(d.Value) {
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

// escape writes s with a backslash before each '\\', '/', '=' and '*', in
// one pass over its bytes (a string with none is one write).
func escape(b *strings.Builder, s string) {
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\', '/', '=', '*':
			b.WriteString(s[start:i])
			b.WriteByte('\\')
			start = i // s[i] goes out with what follows it
		}
	}
	b.WriteString(s[start:])
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

// FixedDescriptors calls f with each descriptor of the configuration that
// matches a limit with values written in full (a share_threshold wildcard
// included: every value it matches counts on one counter), so that its
// counters are known before any request: in the order of the domains'
// names, then of the entries' keys and values, until f returns false. A
// path with a key-only descriptor or another wildcard is left out: its
// counters are the requests' values. entries is f's to keep.
func (c *Config) FixedDescriptors(f func(domain string, entries []Entry) bool) {
	for _, d := range c.Domains() {
		if !c.domains[d].fixed(d, nil, f) {
			return
		}
	}
}

// fixed walks n's children of fixed values below path; false when f asked
// to stop.
func (n *node) fixed(domain string, path []Entry, f func(string, []Entry) bool) bool {
	keys := make([]Entry, 0, len(n.exact))
	for e, c := range n.exact {
		if c.pat == nil || c.shareThreshold {
			keys = append(keys, e)
		}
	}
	slices.SortFunc(keys, func(a, b Entry) int {
		if a.Key != b.Key {
			return strings.Compare(a.Key, b.Key)
		}
		return strings.Compare(a.Value, b.Value)
	})
	for _, e := range keys {
		c := n.exact[e]
		p := append(path[:len(path):len(path)], e)
		if len(c.rules) > 0 && !f(domain, slices.Clone(p)) {
			return false
		}
		if !c.fixed(domain, p, f) {
			return false
		}
	}
	return true
}
