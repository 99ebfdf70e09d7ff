package config

import (
	"reflect"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// xdsGen builds RateLimitConfig resources from a fuzzer's bytes: each byte
// read chooses among a few strings (so that keys, values and names
// collide, and YAML's special words and characters appear), a unit, a
// number, a flag or the shape of the tree.
type xdsGen struct {
	b []byte
	i int
}

func (g *xdsGen) next() byte {
	if g.i >= len(g.b) {
		return 0
	}
	c := g.b[g.i]
	g.i++
	return c
}

// xdsStrings are strings a YAML rendering could get wrong: its special
// words and characters, blanks, quotes, control and non-ASCII characters.
var xdsStrings = []string{
	"", "k", "k2", "v", "v*", "*", "x", "a", "b",
	"yes", "no", "on", "true", "null", "~", "Null", "NULL", "1", "0x1f", "0o17", "1e3", "1.5", ".inf", "-.nan", "123456789012345678901234567890",
	"<<", "&a", "*a", "!t", "!!binary", "%x", "@x", "`x", "- x", "? x", ": x", "a: b", "#x", "a #x", "[x]", "{x}", "x,y",
	" k", "k ", "\tk", "k\n", "k\r\nv", "\"", "'", "\\", "a'b\"c",
	"\x00", "\x07", "\x7f", "\u0085", "\u00a0", "\u2028", "\ufeff", "ü", "日本", "🙂",
	"\xff", "a\xc3", // not UTF-8
	strings.Repeat("long", 40),
}

func (g *xdsGen) str() string { return xdsStrings[int(g.next())%len(xdsStrings)] }

func (g *xdsGen) rateLimit() *rlsconf.RateLimitPolicy {
	c := g.next()
	if c%4 == 0 {
		return nil
	}
	rates := []uint32{0, 1, 5, 1000, 1 << 31, 1<<32 - 1, 1000000000, 1000000001}
	rl := &rlsconf.RateLimitPolicy{
		Unit:            rlsconf.RateLimitUnit(int32(g.next()%9) - 1), // -1 to 7: unknown values too
		RequestsPerUnit: rates[int(g.next())%len(rates)],
		Unlimited:       c&8 != 0,
	}
	if c&16 != 0 {
		rl.Name = g.str()
	}
	for range int(c>>5) % 3 {
		rl.Replaces = append(rl.Replaces, &rlsconf.RateLimitReplace{Name: g.str()})
	}
	return rl
}

func (g *xdsGen) descriptors(depth int) []*rlsconf.RateLimitDescriptor {
	n := int(g.next() % 4)
	if depth > 3 {
		n = int(g.next() % 2) // deep chains, now and then past the bound
	}
	var ds []*rlsconf.RateLimitDescriptor
	for range n {
		if g.i >= len(g.b) {
			break
		}
		c := g.next()
		d := &rlsconf.RateLimitDescriptor{Key: g.str(), ShadowMode: c&1 != 0, DetailedMetric: c&2 != 0}
		if c&4 != 0 {
			d.Value = g.str()
		}
		d.RateLimit = g.rateLimit()
		if c&8 != 0 && depth <= maxDepth+1 {
			d.Descriptors = g.descriptors(depth + 1)
		}
		ds = append(ds, d)
	}
	return ds
}

func (g *xdsGen) resources() []*rlsconf.RateLimitConfig {
	var rs []*rlsconf.RateLimitConfig
	for range 1 + int(g.next()%3) {
		rs = append(rs, &rlsconf.RateLimitConfig{Name: g.str(), Domain: g.str(), Descriptors: g.descriptors(1)})
	}
	return rs
}

// sameConversion checks that FromXDS gives what the YAML route gives: the
// same configuration, or the same errors.
func sameConversion(t *testing.T, rs []*rlsconf.RateLimitConfig) {
	t.Helper()
	sameConversionWith(t, Options{}, rs)
}

// sameConversionWith is sameConversion read with o.
func sameConversionWith(t *testing.T, o Options, rs []*rlsconf.RateLimitConfig) {
	t.Helper()
	got, gerr := o.FromXDS(rs)
	want, werr := o.fromXDSYAML(rs)
	if invalidUTF8(rs) {
		// The YAML route fails without naming the field (the YAML encoder
		// refuses the string); the direct one names it. Both refuse.
		if gerr == nil || werr == nil {
			t.Fatalf("a string that is not UTF-8: FromXDS %v, the YAML route %v; want both to fail", gerr, werr)
		}
		return
	}
	switch {
	case gerr != nil || werr != nil:
		if gerr == nil || werr == nil || gerr.Error() != werr.Error() {
			t.Fatalf("FromXDS and the YAML route differ (%+v):\n direct: %v\n   yaml: %v\nresources: %v", o, gerr, werr, rs)
		}
	case !reflect.DeepEqual(got.domains, want.domains) || !reflect.DeepEqual(got.files, want.files):
		t.Fatalf("FromXDS and the YAML route differ (%+v):\n direct: %v\n   yaml: %v\nresources: %v", o, got.Rules(), want.Rules(), rs)
	}
}

func invalidUTF8(rs []*rlsconf.RateLimitConfig) bool {
	for _, r := range rs {
		if _, bad := xdsInvalidUTF8(r); bad && len(r.GetName()) <= MaxXDSNameBytes {
			if _, deep := xdsTooDeep(r.GetDescriptors(), nil); !deep {
				return true
			}
		}
	}
	return false
}

// FuzzFromXDSDifferential: FromXDS converts any resources as rendering
// them as YAML and parsing the text would (the reference's route): the
// same configuration, or the same errors. The input is read as the
// resources' shape (first byte even) or as a serialized RateLimitConfig
// (odd).
func FuzzFromXDSDifferential(f *testing.F) {
	for _, seed := range [][]byte{
		{2, 1, 1, 3, 9, 4, 5, 1, 2, 8, 3},
		{0, 0, 0, 2, 12, 1, 2, 4, 7, 2, 3, 15, 1, 3, 3, 200, 12},
		{2, 3, 3, 1, 31, 5, 6, 250, 40, 8, 60, 61, 62, 63, 64},
		{4, 2, 2, 2, 255, 9, 9, 9, 255, 9, 9, 9, 255, 9, 9, 9, 255, 9, 9},
	} {
		f.Add(seed)
	}
	named := xdsLimit(rlsconf.RateLimitUnit_HOUR, 100)
	named.Name, named.Replaces = "generic", []*rlsconf.RateLimitReplace{{Name: "other"}}
	b, _ := proto.Marshal(&rlsconf.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "k", Value: "v*", RateLimit: named, Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k2", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}}}},
	}})
	f.Add(append([]byte{1}, b...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		if b[0]%2 == 1 {
			var r rlsconf.RateLimitConfig
			if proto.Unmarshal(b[1:], &r) != nil {
				return
			}
			sameConversion(t, []*rlsconf.RateLimitConfig{&r})
			sameConversion(t, []*rlsconf.RateLimitConfig{&r, &r})
			return
		}
		g := &xdsGen{b: b[1:]}
		rs := g.resources()
		sameConversion(t, rs)
		// The options, from the first byte: wildcards trailing, domains
		// merged, a small MaxEntries.
		o := Options{MergeDomains: b[0]&4 != 0, MaxEntries: int(b[0]>>4) % 8}
		if b[0]&8 != 0 {
			o.Wildcards = WildcardsTrailing
		}
		sameConversionWith(t, o, rs)
	})
}

// TestFromXDSDifferentialCorners: shapes the fuzzer reaches rarely: a
// chain past the nesting bound, more errors than are reported, every unit.
func TestFromXDSDifferentialCorners(t *testing.T) {
	chain := func(n int) *rlsconf.RateLimitDescriptor {
		d := &rlsconf.RateLimitDescriptor{Key: "leaf", RateLimit: xdsLimit(rlsconf.RateLimitUnit_SECOND, 1)}
		for range n {
			d = &rlsconf.RateLimitDescriptor{Key: "k", Descriptors: []*rlsconf.RateLimitDescriptor{d}}
		}
		return d
	}
	var broken []*rlsconf.RateLimitDescriptor
	for range MaxErrors + 5 {
		broken = append(broken, &rlsconf.RateLimitDescriptor{RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 1}})
	}
	var units []*rlsconf.RateLimitDescriptor
	for u := range int32(9) {
		units = append(units, &rlsconf.RateLimitDescriptor{Key: "u", Value: string(rune('a' + u)), RateLimit: xdsLimit(rlsconf.RateLimitUnit(u-1), uint32(u))})
	}
	for _, rs := range [][]*rlsconf.RateLimitConfig{
		{{Name: "a", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{chain(maxDepth - 1)}}},
		{{Name: "a", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{chain(maxDepth)}}},
		{{Name: "a", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{chain(maxDepth + 1)}}},
		{{Name: "a", Domain: "d", Descriptors: broken}},
		{{Name: "a", Descriptors: broken}, {Name: "b", Descriptors: broken}},
		{{Name: "a", Domain: "d", Descriptors: broken[:MaxErrors-1]}, {Name: "b", Domain: "e", Descriptors: broken[:3]}},
		{{Name: "a", Domain: "d", Descriptors: units}},
		{{Name: "a", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{nil, {Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Replaces: []*rlsconf.RateLimitReplace{nil}}}}}},
	} {
		sameConversion(t, rs)
	}
	_, err := FromXDS([]*rlsconf.RateLimitConfig{{Name: "a", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "\xff"}}}}}})
	if want := `xds resource "a": descriptors[0].descriptors[0].key: not valid UTF-8`; err == nil || err.Error() != want {
		t.Fatalf("a key that is not UTF-8: %v, want %q", err, want)
	}
}
