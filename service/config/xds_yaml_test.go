package config

// The YAML route of an xDS update, the reference of FromXDS's tests.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
)

// xdsError is an error found before parsing: a key path and a message.
type xdsError struct{ path, msg string }

// xdsRoot is the YAML document of one resource, as the reference's
// conversion (ConfigXdsProtoToYaml) writes it.
func xdsRoot(r *rlsconf.RateLimitConfig) (*yaml.Node, *xdsError) {
	m := xdsMapping()
	if r.GetDomain() != "" {
		m.add("domain", xdsStr(r.GetDomain()))
	}
	if ds := r.GetDescriptors(); len(ds) > 0 {
		seq, err := xdsDescriptors(ds, "descriptors", 1)
		if err != nil {
			return nil, err
		}
		m.add("descriptors", seq)
	}
	return m.Node, nil
}

func xdsDescriptors(ds []*rlsconf.RateLimitDescriptor, path string, depth int) (*yaml.Node, *xdsError) {
	if depth > maxDepth {
		return nil, &xdsError{path, fmt.Sprintf("descriptors nested deeper than %d levels", maxDepth)}
	}
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for i, d := range ds {
		dp := index(path, i)
		m := xdsMapping()
		m.add("key", xdsStr(d.GetKey()))
		if d.GetValue() != "" {
			m.add("value", xdsStr(d.GetValue()))
		}
		if rl := d.GetRateLimit(); rl != nil {
			m.add("rate_limit", xdsRateLimit(rl))
		}
		if sub := d.GetDescriptors(); len(sub) > 0 {
			s, err := xdsDescriptors(sub, dp+".descriptors", depth+1)
			if err != nil {
				return nil, err
			}
			m.add("descriptors", s)
		}
		if d.GetShadowMode() {
			m.add("shadow_mode", xdsBool(true))
		}
		if d.GetDetailedMetric() {
			m.add("detailed_metric", xdsBool(true))
		}
		seq.Content = append(seq.Content, m.Node)
	}
	return seq, nil
}

func xdsRateLimit(rl *rlsconf.RateLimitPolicy) *yaml.Node {
	m := xdsMapping()
	if rl.GetUnit() != rlsconf.RateLimitUnit_UNKNOWN {
		m.add("unit", xdsStr(rl.GetUnit().String()))
	}
	if !rl.GetUnlimited() || rl.GetRequestsPerUnit() != 0 {
		m.add("requests_per_unit", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(uint64(rl.GetRequestsPerUnit()), 10)})
	}
	if rl.GetUnlimited() {
		m.add("unlimited", xdsBool(true))
	}
	if rl.GetName() != "" {
		m.add("name", xdsStr(rl.GetName()))
	}
	if rs := rl.GetReplaces(); len(rs) > 0 {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, r := range rs {
			rm := xdsMapping()
			rm.add("name", xdsStr(r.GetName()))
			seq.Content = append(seq.Content, rm.Node)
		}
		m.add("replaces", seq)
	}
	return m.Node
}

type xdsMap struct{ *yaml.Node }

func xdsMapping() xdsMap { return xdsMap{&yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}} }

func (m xdsMap) add(key string, v *yaml.Node) { m.Content = append(m.Content, xdsStr(key), v) }

func xdsStr(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func xdsBool(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}

// fromXDSYAML is the conversion of the resources as the reference makes
// it (ConfigXdsProtoToYaml): each resource rendered as YAML text and
// parsed as a file. FromXDS converts them directly; the differential tests
// hold it to this.
func fromXDSYAML(resources []*rlsconf.RateLimitConfig) (*Config, error) {
	return Options{}.fromXDSYAML(resources)
}

// fromXDSYAML is the package's fromXDSYAML, read with o.
func (o Options) fromXDSYAML(resources []*rlsconf.RateLimitConfig) (*Config, error) {
	if len(resources) > MaxXDSResources {
		return nil, Errors{{File: "xds", Msg: fmt.Sprintf("%d resources: at most %d", len(resources), MaxXDSResources)}}
	}
	// In name order, so that an error names the same resource whatever
	// the order of the control plane's response.
	resources = slices.Clone(resources)
	slices.SortStableFunc(resources, func(a, b *rlsconf.RateLimitConfig) int { return strings.Compare(a.GetName(), b.GetName()) })
	c := o.empty()
	c.noLines = true
	var errs Errors
	for i, r := range resources {
		if len(errs) >= MaxErrors {
			break
		}
		name := r.GetName()
		if len(name) > MaxXDSNameBytes {
			errs = append(errs, &Error{File: fmt.Sprintf("xds resource #%d", i), Path: "name", Msg: fmt.Sprintf("%d bytes: at most %d", len(name), MaxXDSNameBytes)})
			continue
		}
		file := "xds resource " + strconv.Quote(name)
		root, err := xdsRoot(r)
		if err != nil {
			errs = append(errs, &Error{File: file, Path: err.path, Msg: err.msg})
			continue
		}
		data, merr := yaml.Marshal(root)
		if merr != nil {
			errs = append(errs, &Error{File: file, Msg: merr.Error()})
			continue
		}
		n := len(errs)
		c.add(file, data, &errs)
		for _, e := range errs[n:] {
			e.Line = 0 // lines of the YAML made from the resource mean nothing to its author
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}
