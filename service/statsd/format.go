package statsd

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// An Encoder appends one statistic to b as a line ending in '\n'. name is
// the statistic's full name, its tags (if any) serialized in it as
// ".__key=value" by the caller.
type Encoder interface {
	Counter(b []byte, name string, v uint64) []byte
	Gauge(b []byte, name string, v uint64) []byte
	// Timer is a timing in milliseconds.
	Timer(b []byte, name string, ms float64) []byte
}

// Plain is the statsd format of lyft/gostats, envoyproxy/ratelimit's
// statistics library: "name:5|c", "name:5|g", "name:12|ms" (a timing that
// is not a whole number is written with six decimals). Tags stay in the
// name.
type Plain struct{}

var _ Encoder = Plain{}

// Counter implements Encoder.
func (Plain) Counter(b []byte, name string, v uint64) []byte { return appendUint(b, name, v, "|c\n") }

// Gauge implements Encoder.
func (Plain) Gauge(b []byte, name string, v uint64) []byte { return appendUint(b, name, v, "|g\n") }

// Timer implements Encoder.
func (Plain) Timer(b []byte, name string, ms float64) []byte {
	if ms >= 0 && ms < math.MaxUint64 && math.Trunc(ms) == ms {
		return appendUint(b, name, uint64(ms), "|ms\n")
	}
	b = append(append(b, name...), ':')
	b = strconv.AppendFloat(b, ms, 'f', 6, 64)
	return append(b, "|ms\n"...)
}

func appendUint(b []byte, name string, v uint64, suffix string) []byte {
	b = append(append(b, name...), ':')
	b = strconv.AppendUint(b, v, 10)
	return append(b, suffix...)
}

// Dog is the DogStatsD format of DataDog's Go client as
// envoyproxy/ratelimit uses it: the tags serialized in the name
// (".__key=value") become "|#key:value" tags, then the first Mogrifier
// whose pattern matches the name rewrites it and adds its tags. A counter
// is "name:5|c", a gauge "name:5|g", a timing "name:12.000000|ms" (whole
// milliseconds).
type Dog struct {
	Mogrifiers []Mogrifier
}

var _ Encoder = Dog{}

// Counter implements Encoder.
func (d Dog) Counter(b []byte, name string, v uint64) []byte {
	name, tags := d.split(name)
	b = append(append(b, name...), ':')
	b = strconv.AppendInt(b, int64(v), 10) //nolint:gosec // as the client writes it
	return appendTags(append(b, "|c"...), tags)
}

// Gauge implements Encoder.
func (d Dog) Gauge(b []byte, name string, v uint64) []byte {
	name, tags := d.split(name)
	b = append(append(b, name...), ':')
	b = strconv.AppendFloat(b, float64(v), 'f', -1, 64)
	return appendTags(append(b, "|g"...), tags)
}

// Timer implements Encoder.
func (d Dog) Timer(b []byte, name string, ms float64) []byte {
	name, tags := d.split(name)
	b = append(append(b, name...), ':')
	// The reference converts to a time.Duration of whole milliseconds,
	// and the client back to milliseconds.
	dur := time.Duration(ms) * time.Millisecond
	b = strconv.AppendFloat(b, dur.Seconds()*1000, 'f', 6, 64)
	return appendTags(append(b, "|ms"...), tags)
}

func appendTags(b []byte, tags []string) []byte {
	for i, t := range tags {
		if i == 0 {
			b = append(b, "|#"...)
		} else {
			b = append(b, ',')
		}
		for j := 0; j < len(t); j++ {
			if t[j] != '\n' {
				b = append(b, t[j])
			}
		}
	}
	return append(b, '\n')
}

// split takes the tags out of a serialized name and applies the
// mogrifiers.
func (d Dog) split(name string) (string, []string) {
	name, tags := separateTags(name)
	for i := range d.Mogrifiers {
		if n, t, ok := d.Mogrifiers[i].apply(name); ok {
			return n, append(tags, t...)
		}
	}
	return name, tags
}

// separateTags splits "name.__k=v.__k2=v2" into "name" and ["k:v",
// "k2:v2"]; a pair without '=' is left out.
func separateTags(name string) (string, []string) {
	const prefix = ".__"
	short, rest, ok := strings.Cut(name, prefix)
	if !ok {
		return name, nil
	}
	var tags []string
	for pair := range strings.SplitSeq(rest, prefix) {
		if k, v, ok := strings.Cut(pair, "="); ok {
			tags = append(tags, k+":"+v)
		}
	}
	return short, tags
}

// A Mogrifier rewrites the names that its pattern matches into a name and
// tags, whose templates refer to the match's groups as $0, $1, ...
// (DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS of
// envoyproxy/ratelimit).
type Mogrifier struct {
	pattern *regexp.Regexp
	name    string
	tags    [][2]string // key, value template; sorted by key
}

// NewMogrifier compiles a mogrifier: pattern and name are required, and
// every tag has a key and a value.
func NewMogrifier(pattern, name string, tags map[string]string) (Mogrifier, error) {
	if pattern == "" {
		return Mogrifier{}, fmt.Errorf("mogrifier: no pattern")
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return Mogrifier{}, fmt.Errorf("mogrifier: pattern %q: %v", pattern, err)
	}
	if name == "" {
		return Mogrifier{}, fmt.Errorf("mogrifier %q: no name", pattern)
	}
	m := Mogrifier{pattern: re, name: name}
	for k, v := range tags {
		if k == "" || v == "" {
			return Mogrifier{}, fmt.Errorf("mogrifier %q: tag %q: want a key and a value", pattern, k+":"+v)
		}
		m.tags = append(m.tags, [2]string{k, v})
	}
	slices.SortFunc(m.tags, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return m, nil
}

var groupRef = regexp.MustCompile(`\$\d+`)

// apply rewrites name when the pattern matches it.
func (m *Mogrifier) apply(name string) (string, []string, bool) {
	groups := m.pattern.FindStringSubmatch(name)
	if len(groups) == 0 {
		return "", nil, false
	}
	expand := func(tmpl string) string {
		return groupRef.ReplaceAllStringFunc(tmpl, func(ref string) string {
			i, err := strconv.Atoi(ref[1:])
			if err != nil || i >= len(groups) {
				return ref
			}
			return groups[i]
		})
	}
	tags := make([]string, len(m.tags))
	for i, t := range m.tags {
		tags[i] = t[0] + ":" + expand(t[1])
	}
	return expand(m.name), tags, true
}
