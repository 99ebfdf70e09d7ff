package config

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func mustPattern(t testing.TB, v string, w Wildcards) *pattern {
	t.Helper()
	p, err := compileWildcard(v, w)
	if err != nil || p == nil {
		t.Fatalf("compileWildcard(%q, %v) = %v, %v; want a pattern", v, w, p, err)
	}
	return p
}

// globRegexp is the meaning of a pattern in WildcardsAnywhere, written
// independently of the matcher: each '*' is any run of bytes.
func globRegexp(v string) *regexp.Regexp {
	parts := strings.Split(v, "*")
	for i, s := range parts {
		parts[i] = regexp.QuoteMeta(s)
	}
	return regexp.MustCompile(`(?s)\A` + strings.Join(parts, ".*") + `\z`)
}

// globDP is the meaning of a pattern in WildcardsAnywhere on bytes, by
// dynamic programming: ok[j] says whether v[:i] matches pat[:j].
func globDP(pat, v string) bool {
	ok := make([]bool, len(pat)+1)
	ok[0] = true
	for j := 1; j <= len(pat) && pat[j-1] == '*'; j++ {
		ok[j] = true
	}
	for i := 1; i <= len(v); i++ {
		next := make([]bool, len(pat)+1)
		for j := 1; j <= len(pat); j++ {
			if pat[j-1] == '*' {
				next[j] = next[j-1] || ok[j]
			} else {
				next[j] = ok[j-1] && pat[j-1] == v[i-1]
			}
		}
		ok = next
	}
	return ok[len(pat)]
}

func TestWildcardMatch(t *testing.T) {
	tests := []struct {
		pattern string
		yes, no []string
	}{
		// The reference's test/config/wildcard.yaml cases.
		{"foo*", []string{"foo", "foo1", "foo2", "foo*"}, []string{"bar", "fo", "xfoo"}},
		{"bar*b", []string{"barab", "bar123b", "barb"}, []string{"bara", "xbarb", "bar", "ba*b"}},
		{"foo*bar*baz", []string{"foo123bar456baz", "foobarbaz", "foobarbarbaz"}, []string{"foo123baz", "bar456baz", "foobazbar", "foobarba"}},
		{"svc*ep*rpc", []string{"svcAepBrpc", "svcXXXepYYYrpc", "svceprpc"}, []string{"svcABCrpc", "svcep"}},
		{"/api*v1", []string{"/api/v1", "/api-beta-v1", "/apiXYZv1", "/apiv1"}, []string{"/api/v2", "/apiv"}},
		{"*", []string{"", "x", "any*thing"}, nil},
		{"**", []string{"", "x"}, nil},
		{"a**b", []string{"ab", "axxb"}, []string{"a", "ba"}},
		{"*a*a*", []string{"aa", "xaxax", "aaa"}, []string{"a", "", "xa"}},
		// Overlapping segments: a segment must not reuse the bytes of
		// the first or the last.
		{"ab*ba", []string{"abba", "abxba"}, []string{"aba", "ab", "ba", "abb"}},
		{"aa*aa", []string{"aaaa", "aaaaa"}, []string{"aaa", "aa", "a"}},
		// Knuth-Morris-Pratt on self-overlapping middle segments.
		{"x*aab*y", []string{"xaaaby", "xaaaaaby", "xaabaaby"}, []string{"xaaay", "xababy"}},
		{"x*abab*y", []string{"xabababy", "xaabababy"}, []string{"xabay", "xababy "}},
	}
	for _, tt := range tests {
		p := mustPattern(t, tt.pattern, WildcardsAnywhere)
		re := globRegexp(tt.pattern)
		for _, v := range tt.yes {
			if !p.match(v) || !re.MatchString(v) || !globDP(tt.pattern, v) {
				t.Errorf("%q: match(%q) = %v (regexp %v), want true", tt.pattern, v, p.match(v), re.MatchString(v))
			}
		}
		for _, v := range tt.no {
			if p.match(v) || re.MatchString(v) || globDP(tt.pattern, v) {
				t.Errorf("%q: match(%q) = %v (regexp %v), want false", tt.pattern, v, p.match(v), re.MatchString(v))
			}
		}
	}
}

func TestWildcardTrailing(t *testing.T) {
	for _, v := range []string{"bar*b", "foo*bar*baz", "*x", "a"} {
		if p, err := compileWildcard(v, WildcardsTrailing); p != nil || err != nil {
			t.Errorf("compileWildcard(%q, trailing) = %v, %v; want no pattern (a literal value)", v, p, err)
		}
	}
	p := mustPattern(t, "a*b*", WildcardsTrailing)
	for v, want := range map[string]bool{"a*b": true, "a*bc": true, "ab": false, "axb": false} {
		if got := p.match(v); got != want {
			t.Errorf("trailing %q: match(%q) = %v, want %v", "a*b*", v, got, want)
		}
	}
}

func TestWildcardBounds(t *testing.T) {
	ok := strings.Repeat("a*", MaxWildcardStars)
	if _, err := compileWildcard(ok, WildcardsAnywhere); err != nil {
		t.Errorf("%d wildcards: %v", MaxWildcardStars, err)
	}
	if _, err := compileWildcard(ok+"*", WildcardsAnywhere); err == nil || !strings.Contains(err.Error(), "at most 16") {
		t.Errorf("%d wildcards: %v, want an error", MaxWildcardStars+1, err)
	}
	// In trailing mode the other '*' are literal: only the length counts.
	if _, err := compileWildcard(ok+"*", WildcardsTrailing); err != nil {
		t.Errorf("trailing, %d '*': %v", MaxWildcardStars+1, err)
	}
	long := strings.Repeat("x", MaxWildcardBytes-1) + "*"
	if _, err := compileWildcard(long, WildcardsAnywhere); err != nil {
		t.Errorf("%d bytes: %v", len(long), err)
	}
	for _, w := range []Wildcards{WildcardsAnywhere, WildcardsTrailing} {
		if _, err := compileWildcard("x"+long, w); err == nil || !strings.Contains(err.Error(), "at most 1024") {
			t.Errorf("%v, %d bytes: %v, want an error", w, len(long)+1, err)
		}
	}
}

// TestWildcardLinear checks the work of a match: the bytes a match reads
// are bounded by a small multiple of the value's length, for patterns made
// to defeat a naive search (every middle segment almost found at every
// position).
func TestWildcardLinear(t *testing.T) {
	v := strings.Repeat("a", 1<<16)
	for _, pat := range []string{
		"*" + strings.Repeat("a", 500) + "b*",
		strings.Repeat("*aaaaaaab", 15) + "*",
		"a*" + strings.Repeat("a", 1000) + "c*a",
	} {
		p := mustPattern(t, pat, WildcardsAnywhere)
		if p.match(v) {
			t.Fatalf("%.20q... matches %d a's", pat, len(v))
		}
		// The reads of a failed search: count them through the same
		// steps as index.
		for i := range p.middle {
			if n := kmpSteps(&p.middle[i], v); n > 2*len(v) {
				t.Errorf("%.20q...: %d steps for a value of %d bytes", pat, n, len(v))
			}
		}
	}
}

// kmpSteps counts the comparisons index makes on t.
func kmpSteps(g *segment, t string) int {
	s, f := g.s, g.fail
	k, steps := int32(0), 0
	for i := 0; i < len(t); i++ {
		for k > 0 && t[i] != s[k] {
			k = f[k-1]
			steps++
		}
		steps++
		if t[i] == s[k] {
			k++
		}
		if int(k) == len(s) {
			return steps
		}
	}
	return steps
}

func TestWildcardCovers(t *testing.T) {
	tests := []struct {
		p, q string
		want bool
	}{
		{"a*", "ab*", true},
		{"ab*", "a*", false},
		{"*", "x*y*z", true},
		{"foo*", "foo*bar", true},
		{"foo*bar", "foo*", false},
		{"*a*", "x*a", true},  // the a of q's last segment
		{"*a*", "x*y", false}, // x?y need not hold an a
		{"a*b*c", "a*bc", true},
		{"a*b*c", "ab*c", true},
		{"a*b*c", "a*c", false},
		{"*ab*", "*a*b*", false},
		{"*a*b*", "*ab*", true},
		{"x*aa*y", "xa*ay", false}, // "xay" is not matched: the a's are apart
		{"x*a*a*y", "xa*ay", true},
		{"ab*ba", "aba*", false},
	}
	for _, tt := range tests {
		p, q := mustPattern(t, tt.p, WildcardsAnywhere), mustPattern(t, tt.q, WildcardsAnywhere)
		if got := p.covers(q); got != tt.want {
			t.Errorf("%q covers %q = %v, want %v", tt.p, tt.q, got, tt.want)
		}
		if got := p.covers(q); got != coversByWitness(p, tt.p, q, tt.q) {
			t.Errorf("%q covers %q = %v, but its witness says otherwise", tt.p, tt.q, got)
		}
	}
}

// coversByWitness decides whether p covers q by matching p against q with
// each wildcard replaced by a byte that p does not hold: p matches every
// value of q exactly when it matches that one.
func coversByWitness(p *pattern, ptext string, q *pattern, qtext string) bool {
	for b := 0; b < 256; b++ {
		if strings.IndexByte(ptext, byte(b)) < 0 {
			return p.match(strings.ReplaceAll(qtext, "*", string([]byte{byte(b)})))
		}
	}
	panic("no free byte")
}

func FuzzWildcardMatch(f *testing.F) {
	for _, s := range []struct{ p, v string }{
		{"foo*", "foo1"}, {"bar*b", "barab"}, {"bar*b", "bara"}, {"foo*bar*baz", "foo123bar456baz"},
		{"foo*bar*baz", "foo123baz"}, {"svc*ep*rpc", "svceprpc"}, {"/api*v1", "/api/v2"}, {"*", ""},
		{"ab*ba", "aba"}, {"x*aab*y", "xaaaby"}, {"*a*a*", "xa"}, {"t*prod", "t99prod"}, {"res*v2", "resBBBv2"},
	} {
		f.Add(s.p, s.v)
	}
	f.Fuzz(func(t *testing.T, pat, v string) {
		if len(pat) > MaxWildcardBytes || strings.Count(pat, "*") > MaxWildcardStars {
			return
		}
		p, err := compileWildcard(pat, WildcardsAnywhere)
		if err != nil {
			t.Fatalf("compileWildcard(%q) = %v", pat, err)
		}
		if p == nil {
			return
		}
		if got, want := p.match(v), globDP(pat, v); got != want {
			t.Fatalf("%q: match(%q) = %v, want %v", pat, v, got, want)
		}
		if utf8.ValidString(pat) && utf8.ValidString(v) {
			if got, want := p.match(v), globRegexp(pat).MatchString(v); got != want {
				t.Fatalf("%q: match(%q) = %v, want %v (regexp)", pat, v, got, want)
			}
		}
		if tp, _ := compileWildcard(pat, WildcardsTrailing); tp != nil {
			if got, want := tp.match(v), strings.HasPrefix(v, pat[:len(pat)-1]); got != want {
				t.Fatalf("trailing %q: match(%q) = %v, want %v", pat, v, got, want)
			}
		}
	})
}

func FuzzWildcardCovers(f *testing.F) {
	for _, s := range []struct{ p, q string }{
		{"a*", "ab*"}, {"foo*", "foo*bar"}, {"*a*", "x*a"}, {"a*b*c", "a*bc"}, {"x*aa*y", "xa*ay"},
		{"*ab*", "*a*b*"}, {"ab*ba", "aba*"}, {"*", "**"},
	} {
		f.Add(s.p, s.q)
	}
	f.Fuzz(func(t *testing.T, ptext, qtext string) {
		if len(ptext) > 64 || len(qtext) > 64 {
			return
		}
		p, _ := compileWildcard(ptext, WildcardsAnywhere)
		q, _ := compileWildcard(qtext, WildcardsAnywhere)
		if p == nil || q == nil {
			return
		}
		if got, want := p.covers(q), coversByWitness(p, ptext, q, qtext); got != want {
			t.Fatalf("%q covers %q = %v, want %v", ptext, qtext, got, want)
		}
		// q always covers itself, and "*" covers everything.
		if !q.covers(q) {
			t.Fatalf("%q does not cover itself", qtext)
		}
	})
}

// BenchmarkWildcardMatch is one match of a value against a pattern: a
// trailing wildcard, one in the middle, three; values of 16 and 1024 bytes,
// matching and not.
func BenchmarkWildcardMatch(b *testing.B) {
	for _, bb := range []struct{ name, pattern, value string }{
		{"trailing/16", "/api/*", "/api/v1/users/42"},
		{"middle/16", "/api/*/users", "/api/v1/x/users"},
		{"three/16", "/api*v1*u*s", "/api/v1/users/s"},
		{"three/1024/match", "/api*v1*u*s", "/api" + strings.Repeat("x", 1000) + "v1/users/s"},
		{"three/1024/miss", "/api*v1*u*s", "/api" + strings.Repeat("v", 1000) + "v2/users/s"},
	} {
		p := mustPattern(b, bb.pattern, WildcardsAnywhere)
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.match(bb.value)
			}
		})
	}
}

// TestMaxKeyWildcards: a key holds at most MaxKeyWildcards wildcard values
// at one level; one more is refused at load, naming the bound.
func TestMaxKeyWildcards(t *testing.T) {
	file := func(n int) []byte {
		var b strings.Builder
		b.WriteString("domain: d\ndescriptors:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - key: k\n    value: \"v%d-*\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n", i)
		}
		return []byte(b.String())
	}
	if _, err := Parse("max.yaml", file(MaxKeyWildcards)); err != nil {
		t.Fatalf("%d wildcards of one key: %v", MaxKeyWildcards, err)
	}
	_, err := Parse("max.yaml", file(MaxKeyWildcards+1))
	want := fmt.Sprintf("max.yaml:%d: descriptors[%d].value: more than %d wildcard values of key \"k\" at this level", 3*MaxKeyWildcards+4, MaxKeyWildcards, MaxKeyWildcards)
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("%d wildcards of one key: %v, want %s", MaxKeyWildcards+1, err, want)
	}
}
