package config

import (
	"cmp"
	"slices"
)

// Rules returns every configured rule of every domain, sorted by Name.
func (c *Config) Rules() []*Rule {
	var rules []*Rule
	var walk func(n *node)
	walk = func(n *node) {
		rules = append(rules, n.rules...)
		for _, ch := range n.exact {
			walk(ch)
		}
		for _, ch := range n.defaults {
			walk(ch)
		}
	}
	for _, root := range c.domains {
		walk(root)
	}
	slices.SortFunc(rules, func(a, b *Rule) int { return cmp.Compare(a.Name, b.Name) })
	return rules
}
