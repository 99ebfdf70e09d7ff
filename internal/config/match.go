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

	exact     map[Descriptor]*node // children with a value, wildcard patterns included (looked up literally)
	wildcards []*node              // children whose value ends in '*', in config order
	defaults  map[string]*node     // key-only children
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
	e := Descriptor{c.key, c.value}
	if _, dup := n.exact[e]; dup {
		return fmt.Errorf("duplicate descriptor %q with value %q at this level (%s)", c.key, c.value, c.path)
	}
	if n.exact == nil {
		n.exact = map[Descriptor]*node{}
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
func (n *node) child(d Descriptor) (c *node, wildcard bool) {
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
func (c *Config) Match(domain string, entries []Descriptor) (Match, bool) {
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
	return Match{Rules: n.rules, Key: countingKey(domain, entries, steps), Metric: metricName(domain, entries, steps)}, true
}

type step struct {
	n        *node
	wildcard bool
}

// countingKey builds domain/key=value/key=value with '\', '/' and '='
// escaped, so that distinct (domain, path, values) never share a key. An
// entry matched by a share_threshold wildcard is written key*=pattern: every
// value matching the pattern shares the counter, and no literal value can
// collide with it.
func countingKey(domain string, entries []Descriptor, steps []step) string {
	var b strings.Builder
	b.Grow(len(domain) + 16*len(entries))
	escape(&b, domain)
	for i, e := range entries {
		b.WriteByte('/')
		escape(&b, e.Key)
		if steps[i].wildcard && steps[i].n.shareThreshold {
			b.WriteString("*=")
			escape(&b, steps[i].n.value)
			continue
		}
		b.WriteByte('=')
		escape(&b, e.Value)
	}
	return b.String()
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

// metricName is the stats name of a match: the matched node's path, where
// a detailed_metric node's key carries the request's value, and a
// value_to_metric node matched by wildcard or default carries the request's
// value instead of its pattern.
func metricName(domain string, entries []Descriptor, steps []step) string {
	last := steps[len(steps)-1].n
	detailed := false
	for _, s := range steps {
		if s.n.detailed || s.n.valueToMetric {
			detailed = true
			break
		}
	}
	if !detailed {
		return last.path
	}
	var b strings.Builder
	b.WriteString(domain)
	for i, s := range steps {
		b.WriteByte('.')
		b.WriteString(entries[i].Key)
		v := s.n.value
		if s.n.detailed || (s.n.valueToMetric && (s.wildcard || s.n.value == "")) {
			v = entries[i].Value
		}
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String()
}
