package config

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// xdsShapes are resources of about size bytes, of the shapes that cost the
// most memory per byte: flat descriptors with a limit (a usual
// configuration), descriptors of a one-byte key and no limit (the most
// descriptors per byte), chains as deep as allowed (the longest paths per
// byte), long values, and a long domain (which every path repeats).
func xdsShapes(size int) map[string]*rlsconf.RateLimitConfig {
	// fill appends descriptors made by mk until the list's encoding holds
	// size bytes (each item: its size, a tag and a length).
	fill := func(ds *[]*rlsconf.RateLimitDescriptor, size int, mk func(i int) *rlsconf.RateLimitDescriptor) {
		for i, n := 0, 0; n < size; i++ {
			d := mk(i)
			*ds = append(*ds, d)
			n += proto.Size(d) + 4
		}
	}
	flat := &rlsconf.RateLimitConfig{Name: "flat", Domain: "edge"}
	fill(&flat.Descriptors, size, func(i int) *rlsconf.RateLimitDescriptor {
		return &rlsconf.RateLimitDescriptor{Key: "user", Value: fmt.Sprint("u", i), RateLimit: xdsLimit(rlsconf.RateLimitUnit_MINUTE, 100)}
	})
	// Distinct nodes of the smallest size: one-byte keys, and short values
	// under them.
	tiny := &rlsconf.RateLimitConfig{Name: "tiny", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k"}}}
	fill(&tiny.Descriptors[0].Descriptors, size, func(i int) *rlsconf.RateLimitDescriptor {
		return &rlsconf.RateLimitDescriptor{Key: string(rune('a' + i%26)), Value: fmt.Sprint(i / 26)}
	})
	deep := &rlsconf.RateLimitConfig{Name: "deep", Domain: "d"}
	fill(&deep.Descriptors, size, func(i int) *rlsconf.RateLimitDescriptor {
		d := &rlsconf.RateLimitDescriptor{Key: "l", RateLimit: xdsLimit(rlsconf.RateLimitUnit_SECOND, 1)}
		for range maxDepth - 1 {
			d = &rlsconf.RateLimitDescriptor{Key: "k", Descriptors: []*rlsconf.RateLimitDescriptor{d}}
		}
		d.Value = fmt.Sprint(i)
		return d
	})
	long := &rlsconf.RateLimitConfig{Name: "long", Domain: "d"}
	fill(&long.Descriptors, size, func(i int) *rlsconf.RateLimitDescriptor {
		return &rlsconf.RateLimitDescriptor{Key: "k", Value: fmt.Sprint(i, strings.Repeat("v", 1000)), RateLimit: xdsLimit(rlsconf.RateLimitUnit_SECOND, 1)}
	})
	domain := &rlsconf.RateLimitConfig{Name: "domain", Domain: strings.Repeat("d", size/2)}
	fill(&domain.Descriptors, size/2, func(i int) *rlsconf.RateLimitDescriptor {
		return &rlsconf.RateLimitDescriptor{Key: fmt.Sprint(i)}
	})
	return map[string]*rlsconf.RateLimitConfig{"flat": flat, "tiny": tiny, "deep": deep, "long values": long, "long domain": domain}
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestFromXDSMemory: converting a resource allocates at most
// XDSMemoryFactor times its size plus XDSMemorySlack, whatever its shape;
// a shape that would hold more is refused. The figures (and what decoding
// the resource from protobuf allocates) are logged; BenchmarkFromXDS
// compares them with the YAML route.
func TestFromXDSMemory(t *testing.T) {
	const size = 256 << 10
	for name, r := range xdsShapes(size) {
		n := proto.Size(r)
		var err error
		// Limits as deep as the nesting allows load (the deep shape's).
		o := Options{MaxEntries: maxDepth}
		direct := allocated(func() { _, err = o.FromXDS([]*rlsconf.RateLimitConfig{r}) })
		if bound := uint64(XDSMemoryFactor*n + XDSMemorySlack); direct > bound {
			t.Errorf("%s: a resource of %d bytes allocated %d bytes converted, more than %d times its size and %d", name, n, direct, XDSMemoryFactor, XDSMemorySlack)
		}
		wire, _ := proto.Marshal(r)
		decode := allocated(func() { proto.Unmarshal(wire, new(rlsconf.RateLimitConfig)) })
		t.Logf("%-11s %7d bytes: decoded %5.1fx its size, converted %6.1fx (%v)", name, n, float64(decode)/float64(n), float64(direct)/float64(n), errSummary(err))
		switch {
		case name != "long domain" && err != nil:
			t.Errorf("%s: %v", name, err)
		case name == "long domain" && (err == nil || !strings.Contains(err.Error(), "would hold more than")):
			t.Errorf("a domain repeated by %d paths: %v, want refused for its memory", len(r.Descriptors), err)
		}
	}
}

func errSummary(err error) string {
	if err == nil {
		return "loaded"
	}
	s := err.Error()
	if i := strings.Index(s, ": "); i > 0 {
		s = s[i+2:]
	}
	return "refused: " + s[:min(len(s), 60)]
}

// BenchmarkFromXDS converts resources of 1 MiB of each shape, directly and
// by the YAML route; alloc/size is the bytes allocated per byte of the
// resource.
func BenchmarkFromXDS(b *testing.B) {
	for _, shape := range []string{"flat", "tiny", "deep", "long values", "long domain"} {
		r := xdsShapes(1 << 20)[shape]
		rs := []*rlsconf.RateLimitConfig{r}
		for _, route := range []struct {
			name    string
			convert func([]*rlsconf.RateLimitConfig) (*Config, error)
		}{{"direct", Options{MaxEntries: maxDepth}.FromXDS}, {"yaml", Options{MaxEntries: maxDepth}.fromXDSYAML}} {
			b.Run("shape="+strings.ReplaceAll(shape, " ", "_")+"/route="+route.name, func(b *testing.B) {
				b.ReportAllocs()
				var total uint64
				for b.Loop() {
					total += allocated(func() { route.convert(rs) })
				}
				b.ReportMetric(float64(total)/float64(b.N)/float64(proto.Size(r)), "alloc/size")
			})
		}
	}
}
