package config

import (
	"fmt"
	"strings"
)

// Wildcards says which '*' of a descriptor value is a wildcard.
type Wildcards int

const (
	// WildcardsAnywhere makes every '*' of a value a wildcard matching any
	// run of bytes, the empty one included: "bar*b" matches "barb" and
	// "bar123b", "foo*bar*baz" matches "foo1bar2baz". This is the matching
	// of envoyproxy/ratelimit's main branch since 2026, and the default.
	WildcardsAnywhere Wildcards = iota
	// WildcardsTrailing makes only a value's last '*' a wildcard, and only
	// when it ends the value: "foo*" matches every value starting with
	// "foo", and any other '*' is a literal byte ("bar*b" matches the value
	// "bar*b" only). This is the matching of envoyproxy/ratelimit's earlier
	// versions (its v1.4 releases and its main branch before March 2026).
	WildcardsTrailing
)

// String returns the name ParseWildcards reads: "anywhere" or "trailing".
func (w Wildcards) String() string {
	switch w {
	case WildcardsAnywhere:
		return "anywhere"
	case WildcardsTrailing:
		return "trailing"
	}
	return fmt.Sprintf("Wildcards(%d)", int(w))
}

// ParseWildcards reads "anywhere" or "trailing" ("" is anywhere).
func ParseWildcards(s string) (Wildcards, error) {
	switch s {
	case "anywhere", "":
		return WildcardsAnywhere, nil
	case "trailing":
		return WildcardsTrailing, nil
	}
	return 0, fmt.Errorf("wildcards: want anywhere or trailing, got %q", s)
}

// Bounds of a wildcard value, checked when the configuration loads. A
// request's value is matched against a pattern in time linear in the
// value's length plus the pattern's, whatever the pattern.
const (
	// MaxWildcardBytes bounds a value holding a wildcard: a share_threshold
	// pattern is part of a counting key, which is at most 1 KiB.
	MaxWildcardBytes = 1024
	// MaxWildcardStars bounds the wildcards of one value.
	MaxWildcardStars = 16
	// MaxKeyWildcards bounds the wildcard values of one key at one level
	// of a domain's tree: a request's entry is tried against each of them
	// in order, and each new one is checked against every earlier one when
	// the configuration loads (4,000 of them took 0.7 s to load, 16,000
	// took 5 s).
	MaxKeyWildcards = 1000
)

// pattern is a value with wildcards, compiled: the literal segments around
// its wildcards, first and last apart. A value with k wildcards matches
// when it starts with first, ends with last, and holds the middle segments
// in order, apart, in between. Matching takes no allocation.
type pattern struct {
	first, last string
	middle      []segment // the non-empty segments between the first and the last wildcard
	fixed       int       // the bytes every match has: the segments' total
	all         bool      // every segment is empty: the pattern matches every value
}

// segment is a literal segment of a pattern with its Knuth-Morris-Pratt
// table: fail[i] is the length of the longest proper border of s[:i+1].
type segment struct {
	s    string
	fail []int32
}

// compileWildcard compiles a descriptor value read with the wildcards w:
// nil when the value has none. An error says why the value cannot be a
// pattern (beyond a bound).
func compileWildcard(value string, w Wildcards) (*pattern, error) {
	var segs []string
	switch w {
	case WildcardsTrailing:
		if !strings.HasSuffix(value, "*") {
			return nil, nil
		}
		segs = []string{value[:len(value)-1], ""}
	default:
		if !strings.Contains(value, "*") {
			return nil, nil
		}
		if n := strings.Count(value, "*"); n > MaxWildcardStars {
			return nil, fmt.Errorf("%d wildcards ('*') in one value: at most %d", n, MaxWildcardStars)
		}
		segs = strings.Split(value, "*")
	}
	if len(value) > MaxWildcardBytes {
		return nil, fmt.Errorf("a wildcard value of %d bytes: at most %d", len(value), MaxWildcardBytes)
	}
	return newPattern(segs), nil
}

// newPattern compiles the literal segments of a pattern (at least two: the
// text around its wildcards, in order).
func newPattern(segs []string) *pattern {
	p := &pattern{first: segs[0], last: segs[len(segs)-1], all: true}
	for i, s := range segs {
		p.fixed += len(s)
		if s != "" {
			p.all = false
		}
		if i > 0 && i < len(segs)-1 && s != "" {
			p.middle = append(p.middle, segment{s: s, fail: kmpTable(s)})
		}
	}
	return p
}

// kmpTable is the failure function of s.
func kmpTable(s string) []int32 {
	f := make([]int32, len(s))
	k := int32(0)
	for i := 1; i < len(s); i++ {
		for k > 0 && s[i] != s[k] {
			k = f[k-1]
		}
		if s[i] == s[k] {
			k++
		}
		f[i] = k
	}
	return f
}

// match reports whether v matches the pattern. Each byte of v is read a
// bounded number of times: the middle segments are found, leftmost first,
// by one pass of Knuth-Morris-Pratt over what lies between the first and
// the last segment, so the time is linear in len(v) plus the pattern's
// length, whatever the number of wildcards.
func (p *pattern) match(v string) bool {
	if len(v) < p.fixed || !strings.HasPrefix(v, p.first) || !strings.HasSuffix(v, p.last) {
		return false
	}
	rest := v[len(p.first) : len(v)-len(p.last)]
	for i := range p.middle {
		at := p.middle[i].index(rest)
		if at < 0 {
			return false
		}
		rest = rest[at+len(p.middle[i].s):]
	}
	return true
}

// index returns the index of the first occurrence of g.s in t, or -1. It
// reads each byte of t at most twice.
func (g *segment) index(t string) int {
	s, f := g.s, g.fail
	k := int32(0)
	for i := 0; i < len(t); i++ {
		if k == 0 && t[i] != s[0] {
			// Skip to the next byte that can start a match.
			j := strings.IndexByte(t[i:], s[0])
			if j < 0 {
				return -1
			}
			i += j
		}
		for k > 0 && t[i] != s[k] {
			k = f[k-1]
		}
		if t[i] == s[k] {
			k++
		}
		if int(k) == len(s) {
			return i - len(s) + 1
		}
	}
	return -1
}

// covers reports whether p matches every value that q matches (both are
// patterns). It does so when p matches q with each wildcard of q read as a
// byte that p's literal segments never hold: every literal segment of p
// then lies inside one literal segment of q, the first at the start of q's
// first, the last at the end of q's last, and the others in order, apart,
// in between (found leftmost first, which is optimal). Conversely, when
// p matches every value of q it matches q with its wildcards replaced by
// such a byte, so the test is exact.
func (p *pattern) covers(q *pattern) bool {
	if !strings.HasPrefix(q.first, p.first) || !strings.HasSuffix(q.last, p.last) {
		return false
	}
	// The regions of q where p's middle segments may lie: q's segments
	// less what p's first and last take. q has at least one wildcard, so
	// p's first and last lie in different segments of q.
	regions := make([]string, 0, len(q.middle)+2)
	regions = append(regions, q.first[len(p.first):])
	for _, m := range q.middle {
		regions = append(regions, m.s)
	}
	regions = append(regions, q.last[:len(q.last)-len(p.last)])
	i := 0
	for _, r := range regions {
		for i < len(p.middle) {
			at := strings.Index(r, p.middle[i].s)
			if at < 0 {
				break
			}
			r = r[at+len(p.middle[i].s):]
			i++
		}
	}
	return i == len(p.middle)
}
