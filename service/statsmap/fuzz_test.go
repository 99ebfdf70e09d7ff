package statsmap

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

// FuzzParse parses arbitrary mapping files: an error or a Mapper within
// the bounds, never a panic; and every mapping Parse accepts makes the
// counter, gauge, histogram and summary its statistics may go to without
// a panic of Prometheus's.
func FuzzParse(f *testing.F) {
	f.Add(DefaultMapping)
	f.Add([]byte(""))
	f.Add([]byte("mappings:\n  - match: a.*.c\n    name: x_$1\n    labels: {lab: $1}\n"))
	f.Add([]byte("defaults:\n  observer_type: summary\n  summary_options: {max_age: 1m, age_buckets: 3, buf_cap: 10, quantiles: [{quantile: 0.5, error: 0.1}]}\n" +
		"mappings:\n  - match: '(.*)'\n    match_type: regex\n    name: r_$1\n    labels: {le: x}\n"))
	f.Add([]byte("defaults:\n  buckets: [1, 2, 3]\n  histogram_options: {native_histogram_bucket_factor: 2, native_histogram_max_buckets: 10}\n" +
		"mappings:\n  - match: a\n    name: h\n    observer_type: histogram\n    buckets: [3, 2]\n"))
	f.Add([]byte("mappings:\n  - match: a\n    name: s\n    observer_type: summary\n    labels: {quantile: q}\n"))
	f.Add([]byte("mappings:\n  - match: a\n    name: s\n    labels: {ab: x, ab: y}\n"))
	f.Add([]byte("mappings:\n  - match: '(((a{1000}){1000}){1000})'\n    match_type: regex\n    name: x\n"))
	f.Add([]byte("mappings:\n  - match: a\n    name: s\n    observer_type: summary\n    summary_options: {max_age: -1s, buf_cap: 4294967295}\n"))
	f.Add([]byte("defaults:\n  glob_disable_ordering: true\n  ttl: 1m\nmappings:\n  - match: '*.b'\n    name: x\n    action: drop\n    scale: .5\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			if m != nil {
				t.Fatalf("Parse: a Mapper and the error %v", err)
			}
			return
		}
		if n := len(m.globs) + len(m.regexes); n > MaxMappings {
			t.Fatalf("Parse: %d mappings, more than %d", n, MaxMappings)
		}
		for _, mp := range slices.Concat(m.globs, m.regexes) {
			if len(mp.labels) > MaxLabels || len(mp.hist.buckets) > MaxBuckets || len(mp.quant) > MaxQuantiles {
				t.Fatalf("mapping %q: %d labels, %d buckets, %d quantiles: beyond the bounds", mp.match, len(mp.labels), len(mp.hist.buckets), len(mp.quant))
			}
		}
		exercise(t, m)
	})
}

// exercise makes, for each mapping of m, each kind of metric a statistic
// it maps may go to, and updates it once.
func exercise(t *testing.T, m *Mapper) {
	e := NewExporter(m)
	for i, mp := range slices.Concat(m.globs, m.regexes) {
		labels := prometheus.Labels{}
		for _, l := range mp.labels {
			labels[l[0]] = "v"
		}
		for k := kindCounter; k <= kindSummary; k++ {
			if k == kindHistogram && mp.observer != "histogram" || k == kindSummary && mp.observer == "histogram" {
				continue // a timer of this mapping makes the other
			}
			if (k == kindHistogram || k == kindSummary) && mp.mtype != "" && mp.mtype != Observer {
				continue // no timer reaches this mapping
			}
			name := "m" + strings.Repeat("_", i%3) + string(rune('a'+k)) + strings.Repeat("x", i)
			s := e.get(name, k, labels, "h", mp)
			if s == nil {
				t.Fatalf("mapping %q: no %s for labels %v", mp.match, kindNames[k], labels)
			}
			switch {
			case s.counter != nil:
				s.counter.Add(1)
			case s.gauge != nil:
				s.gauge.Set(1)
			default:
				s.obs.Observe(1)
			}
		}
	}
	// An unmapped timer: the defaults' observer.
	if s := e.get("unmapped_h", kindHistogram, prometheus.Labels{}, "h", nil); s == nil {
		t.Fatal("no histogram of the defaults")
	} else {
		s.obs.Observe(1)
	}
	if s := e.get("unmapped_s", kindSummary, prometheus.Labels{}, "h", nil); s == nil {
		t.Fatal("no summary of the defaults")
	} else {
		s.obs.Observe(1)
	}
	if _, err := e.Gather(); err != nil {
		t.Fatalf("Gather: %v", err)
	}
}

// FuzzMatch builds a mapping file of a glob and a regex from the fuzzer's
// strings and maps arbitrary statistic names with it: never a panic, the
// same result each time and from a second Parse of the same file, the
// mapping's label names in its order, and a glob's result made of the
// name's parts.
func FuzzMatch(f *testing.F) {
	f.Add("a.*.c", `a\.(.*)\.c`, "x_$1", "${1}_v", "a.b.c", false, byte(0))
	f.Add("*.*", `^(\w+)\.(\w+)$`, "two_${2}_$1", "$2$1$3", "p.q", true, byte(2))
	f.Add("ratelimit.service.rate_limit.*.*.total_hits", `ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)\.total_hits`,
		"ratelimit_service_rate_limit_total_hits", "$1", "ratelimit.service.rate_limit.dom.k1.total_hits", false, byte(1))
	f.Add("*", "", "n", "", "", false, byte(0))
	f.Add("a.b", "(?i)Ä+", "$0$${1}", "$$", "ää.ÄÄ", true, byte(1))
	f.Add("x.*", "(a*)*", "kept_$1_total", "${9}", "x.\xff\xfe", false, byte(0))
	f.Fuzz(func(t *testing.T, glob, re, name, label, metric string, unordered bool, typ byte) {
		var maps []map[string]any
		for _, mp := range []map[string]any{
			{"match": glob, "name": name, "labels": map[string]string{"glob_label": label, "second": "$1"}},
			{"match": re, "match_type": "regex", "name": name, "labels": map[string]string{"re_label": label}},
			{"match": glob, "name": "typed", "match_metric_type": "gauge"},
		} {
			// Keep the mappings that Parse takes alone, so that one bad
			// string leaves the others to match.
			one, err := yaml.Marshal(map[string]any{"mappings": []map[string]any{mp}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Parse(one); err == nil {
				maps = append(maps, mp)
			}
		}
		file, err := yaml.Marshal(map[string]any{"defaults": map[string]any{"glob_disable_ordering": unordered}, "mappings": maps})
		if err != nil {
			t.Fatal(err)
		}
		m, err := Parse(file)
		if err != nil {
			t.Fatalf("Parse of mappings it took one by one: %v\n%s", err, file)
		}
		m2, err := Parse(file)
		if err != nil {
			t.Fatal(err)
		}
		types := []Type{Counter, Gauge, Observer}
		t0 := types[int(typ)%len(types)]
		names := []string{metric}
		// The glob with its '*' filled from the metric's parts, so that
		// it matches.
		if g := strings.Split(glob, "."); len(g) > 0 {
			parts := strings.Split(metric, ".")
			for i := range g {
				if g[i] == "*" {
					g[i] = parts[i%len(parts)]
				}
			}
			names = append(names, strings.Join(g, "."))
		}
		for _, n := range names {
			for _, typ := range []Type{t0, Counter, Gauge, Observer} {
				r, ok := m.Map(n, typ)
				again, okAgain := m.Map(n, typ)
				other, okOther := m2.Map(n, typ)
				if ok != okAgain || ok != okOther || !sameResult(r, again) || !sameResult(r, other) {
					t.Fatalf("Map(%q, %s): %v %v, again %v %v, from a second Parse %v %v", n, typ, r, ok, again, okAgain, other, okOther)
				}
				if !ok {
					if r.Name != "" || r.Labels != nil || r.mp != nil {
						t.Fatalf("Map(%q, %s): no match but %+v", n, typ, r)
					}
					continue
				}
				checkResult(t, n, typ, r)
			}
		}
	})
}

func sameResult(a, b Result) bool {
	return a.Name == b.Name && slices.Equal(a.Labels, b.Labels) && (a.mp == nil) == (b.mp == nil) && (a.mp == nil || a.mp.match == b.mp.match)
}

// checkResult checks a match: its mapping takes statistics of type typ,
// its labels are the mapping's in order, and a glob's name and label
// values are its templates' text with parts of the name.
func checkResult(t *testing.T, name string, typ Type, r Result) {
	mp := r.mp
	if mp.mtype != "" && mp.mtype != typ {
		t.Fatalf("Map(%q, %s): mapping %q for %s", name, typ, mp.match, mp.mtype)
	}
	if len(r.Labels) != len(mp.labels) {
		t.Fatalf("Map(%q, %s): labels %v, mapping's %v", name, typ, r.Labels, mp.labels)
	}
	for i, l := range r.Labels {
		if l[0] != mp.labels[i][0] || !labelRE.MatchString(l[0]) {
			t.Fatalf("Map(%q, %s): label %d %q, mapping's %q", name, typ, i, l[0], mp.labels[i][0])
		}
	}
	if mp.re != nil {
		if !mp.re.MatchString(name) {
			t.Fatalf("Map(%q, %s): regex %q, which does not match", name, typ, mp.match)
		}
		return
	}
	parts := strings.Split(name, ".")
	caps, ok := matchGlob(mp.glob, parts)
	if !ok {
		t.Fatalf("Map(%q, %s): glob %q, which does not match", name, typ, mp.match)
	}
	if len(caps) != mp.captures {
		t.Fatalf("Map(%q, %s): glob %q captured %d, has %d '*'", name, typ, mp.match, len(caps), mp.captures)
	}
	// Without its references, a template is what remains of it.
	if !strings.Contains(mp.name, "$") && r.Name != mp.name {
		t.Fatalf("Map(%q, %s): name %q, template %q", name, typ, r.Name, mp.name)
	}
	// With its captures' values removed, the result is the template
	// without its references.
	stripped := globCaptures.ReplaceAllString(mp.name, "")
	if len(r.Name) < len(stripped) {
		t.Fatalf("Map(%q, %s): name %q shorter than its template's text %q", name, typ, r.Name, stripped)
	}
}
