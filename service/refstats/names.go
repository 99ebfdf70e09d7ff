package refstats

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Tags are the tags of every statistic (the reference's EXTRA_TAGS),
// serialized at the end of each name as lyft/gostats does:
// ".__key=value" for each, by key, with '.', ':' and '|' in a value
// replaced by '_'. A DogStatsD sink takes them back out into tags; the
// other sinks keep them in the name.
type Tags struct {
	suffix string
}

// MaxTags bounds the tags; MaxTagBytes bounds a key or a value.
const (
	MaxTags     = 32
	MaxTagBytes = 256
)

// ParseTags parses "key:value,key2:value2" (EXTRA_TAGS' form). A pair
// with an empty key or value is left out, as the reference leaves it out;
// a pair without ':' is an error.
func ParseTags(s string) (Tags, error) {
	m := map[string]string{}
	if strings.TrimSpace(s) != "" {
		for pair := range strings.SplitSeq(s, ",") {
			k, v, ok := strings.Cut(pair, ":")
			if !ok {
				return Tags{}, fmt.Errorf("tag %q: want key:value", pair)
			}
			if len(k) > MaxTagBytes || len(v) > MaxTagBytes {
				return Tags{}, fmt.Errorf("tag %q: a key or value longer than %d bytes", pair, MaxTagBytes)
			}
			m[k] = v
		}
	}
	if len(m) > MaxTags {
		return Tags{}, fmt.Errorf("%d tags, want at most %d", len(m), MaxTags)
	}
	return NewTags(m), nil
}

// NewTags returns the tags of m; an empty key or value is left out.
func NewTags(m map[string]string) Tags {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if k != "" && v != "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(".__")
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strings.NewReplacer(".", "_", ":", "_", "|", "_").Replace(m[k]))
	}
	return Tags{suffix: b.String()}
}

// Name is name with the tags serialized at its end.
func (t Tags) Name(name string) string { return name + t.suffix }

// ipv4 is a dotted IPv4 address in a statistic's key, whose dots the
// reference turns into '_'.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// sanitize cleans a key that goes into a statistic's name as the reference
// does: ':' and '|' (the statsd separators) become '_', and so do the dots
// of an IPv4 address.
func sanitize(s string) string {
	s = strings.NewReplacer(":", "_", "|", "_").Replace(s)
	if !strings.Contains(s, ".") {
		return s
	}
	return ipv4.ReplaceAllStringFunc(s, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}
