package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice"
)

// Bounds of a configuration received over xDS, checked before it is
// converted. A file has the same bounds of nesting and of errors; the size
// of the whole update is bounded by the xDS client's maximum message size.
const (
	// MaxXDSResources bounds the RateLimitConfig resources of one update:
	// one domain each.
	MaxXDSResources = 10000
	// MaxXDSNameBytes bounds a resource's name, which errors quote.
	MaxXDSNameBytes = 1024
	// XDSMemoryFactor and XDSMemorySlack bound the memory a resource's
	// configuration holds once converted: at most XDSMemoryFactor times the
	// resource's size (as protobuf) plus XDSMemorySlack, counted as the
	// conversion goes. A resource past it is an error. Measured on
	// resources of 256 KiB, a usual configuration (descriptors of a key, a
	// value and a limit) allocates 26 times its size converted, one-byte
	// keys without limits 41 times, chains nested as deep as allowed 102
	// times (docs/bounds.md has the figures).
	XDSMemoryFactor = 128
	XDSMemorySlack  = 1 << 20
)

// Bytes counted per descriptor and per rule, beyond their paths: at least
// what they hold (the node, 128 bytes, and its parent's map, up to some
// 250 bytes for a map of one entry; the Rule, 144 bytes, and its slice),
// so that what is counted bounds what is held. A path is counted twice:
// with a value, it is built in two steps.
const (
	xdsNodeBytes = 512
	xdsRuleBytes = 176
)

// FromXDS converts the RateLimitConfig resources of one xDS update (state of
// the world: every resource in force) into one Config, with the validation
// of a YAML file and its errors: each resource is one file whose name is
// the resource's, and a domain defined by two resources is an error. No
// resource gives a Config without domains, in which no request matches.
//
// The fields are the reference's: name, domain, descriptors (key, value,
// rate_limit {unit, requests_per_unit, unlimited, name, replaces},
// descriptors, shadow_mode, detailed_metric). The resources are converted
// directly, not rendered as YAML and parsed again as the reference does:
// the same configuration and the same errors (its tests hold it to that
// route), at a fraction of the memory, bounded by XDSMemoryFactor. An
// error is an Errors naming the resource and the field path, as in
//
//	xds resource "api": descriptors[0].rate_limit.requests_per_unit: ...
func FromXDS(resources []*rlsconf.RateLimitConfig) (*Config, error) {
	return Options{}.FromXDS(resources)
}

// FromXDS is the package's FromXDS, read with o: with o.MergeDomains, two
// resources of one domain merge, in name order.
func (o Options) FromXDS(resources []*rlsconf.RateLimitConfig) (*Config, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if len(resources) > MaxXDSResources {
		return nil, Errors{{File: "xds", Msg: fmt.Sprintf("%d resources: at most %d", len(resources), MaxXDSResources)}}
	}
	// In name order, so that an error names the same resource whatever
	// the order of the control plane's response.
	resources = slices.Clone(resources)
	slices.SortStableFunc(resources, func(a, b *rlsconf.RateLimitConfig) int { return strings.Compare(a.GetName(), b.GetName()) })
	c := o.empty()
	c.noLines = true
	c.places = map[*node]place{}
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
		if path, deep := xdsTooDeep(r.GetDescriptors(), nil); deep {
			errs = append(errs, &Error{File: file, Path: path, Msg: fmt.Sprintf("descriptors nested deeper than %d levels", maxDepth)})
			continue
		}
		if path, bad := xdsInvalidUTF8(r); bad {
			errs = append(errs, &Error{File: file, Path: path, Msg: "not valid UTF-8"})
			continue
		}
		x := &xdsConv{file: file, opts: o, places: c.places, max: MaxErrors - len(errs), budget: XDSMemoryFactor*int64(proto.Size(r)) + XDSMemorySlack}
		if o.MergeDomains {
			// A domain already converted takes this resource's
			// descriptors at its first level, as checked by its
			// addChild. A resource with an error leaves some of them
			// there: the Config is not used then.
			x.domainRoot = func(domain string) *node { return c.domains[domain] }
		}
		domain, root := x.resource(r)
		errs = append(errs, x.errs...)
		if x.stopped && len(errs) >= MaxErrors {
			errs = append(errs, &Error{File: file, Msg: fmt.Sprintf("stopped after %d errors: fix these and run again for the rest", MaxErrors)})
		}
		if root == nil {
			continue
		}
		if prev, ok := c.files[domain]; ok {
			if !o.MergeDomains {
				errs = append(errs, &Error{File: file, Path: "domain", Msg: fmt.Sprintf("duplicate domain %q (already defined in %s)", domain, prev)})
			}
			continue
		}
		c.domains[domain] = root
		c.files[domain] = file
	}
	if len(errs) > 0 {
		return nil, errs
	}
	c.places = nil
	return c, nil
}

// Empty returns a Config without domains: no request matches it.
func Empty() *Config {
	return &Config{domains: map[string]*node{}, files: map[string]string{}}
}

// descPath is the key path of the descriptor at the indices idx, one per
// level: descriptors[1].descriptors[0]. The conversion keeps the indices
// and builds the path only for an error.
func descPath(idx []int) string {
	var b strings.Builder
	for i, n := range idx {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString("descriptors[")
		b.WriteString(strconv.Itoa(n))
		b.WriteByte(']')
	}
	return b.String()
}

// xdsTooDeep finds, in depth-first order, a list of descriptors nested
// deeper than maxDepth, and returns its path.
func xdsTooDeep(ds []*rlsconf.RateLimitDescriptor, idx []int) (string, bool) {
	if len(idx) >= maxDepth {
		return descPath(idx) + ".descriptors", true
	}
	for i, d := range ds {
		if sub := d.GetDescriptors(); len(sub) > 0 {
			if p, deep := xdsTooDeep(sub, append(idx, i)); deep {
				return p, true
			}
		}
	}
	return "", false
}

// xdsInvalidUTF8 finds, in depth-first order, a string of r that is not
// valid UTF-8 (protobuf's decoding refuses them; a resource built in Go
// may hold one), and returns its path.
func xdsInvalidUTF8(r *rlsconf.RateLimitConfig) (string, bool) {
	if !utf8.ValidString(r.GetDomain()) {
		return "domain", true
	}
	return xdsInvalidUTF8In(r.GetDescriptors(), nil)
}

func xdsInvalidUTF8In(ds []*rlsconf.RateLimitDescriptor, idx []int) (string, bool) {
	for i, d := range ds {
		rl := d.GetRateLimit()
		field := ""
		switch {
		case !utf8.ValidString(d.GetKey()):
			field = "key"
		case !utf8.ValidString(d.GetValue()):
			field = "value"
		case !utf8.ValidString(rl.GetName()):
			field = "rate_limit.name"
		}
		for j, rp := range rl.GetReplaces() {
			if field == "" && !utf8.ValidString(rp.GetName()) {
				field = index("rate_limit.replaces", j) + ".name"
			}
		}
		if field != "" {
			return descPath(append(idx, i)) + "." + field, true
		}
		if p, bad := xdsInvalidUTF8In(d.GetDescriptors(), append(idx, i)); bad {
			return p, true
		}
	}
	return "", false
}

// xdsConv converts one resource, noting its errors as the parser of a file
// notes them: the conversion goes on past an error at the next
// descriptor or limit, up to max errors.
type xdsConv struct {
	file string
	opts Options
	// domainRoot, when set, returns the root of a domain already
	// converted, to which this resource's descriptors are added
	// (Options.MergeDomains); nil when there is none.
	domainRoot func(domain string) *node
	// places holds the resource of each descriptor converted so far, for
	// the errors of a later one that conflicts with it.
	places    map[*node]place
	idx       []int // the indices of the descriptor being converted, one per level
	errs      []*Error
	max       int   // note at most this many errors
	pathBytes int   // bytes of descriptor paths built so far
	held      int64 // bytes the converted configuration holds so far (estimated)
	budget    int64 // the most it may hold
	fatal     bool  // a bound is exceeded: the next error noted is the last
	stopped   bool  // no more converting: max errors, or a bound exceeded
}

// note records an error at field of the descriptor being converted (the
// path of field itself at the root) and reports whether converting must
// stop.
func (x *xdsConv) note(field, format string, args ...any) (stop bool) {
	if x.stopped {
		return true
	}
	path := field
	if len(x.idx) > 0 {
		path = descPath(x.idx) + "." + field
	}
	x.errs = append(x.errs, &Error{File: x.file, Path: path, Msg: fmt.Sprintf(format, args...)})
	if x.fatal || len(x.errs) >= x.max {
		x.stopped = true
	}
	return x.stopped
}

// where is the resource of a descriptor n converted before, "" for one of
// this resource (an xDS resource has no lines) or when unknown.
func (x *xdsConv) where(n *node) string {
	if w, ok := x.places[n]; ok && w.file != x.file {
		return w.file
	}
	return ""
}

// resource converts r into its domain's tree; root is nil when an error
// was noted.
func (x *xdsConv) resource(r *rlsconf.RateLimitConfig) (domain string, root *node) {
	domain = r.GetDomain()
	if domain == "" && x.note("domain", "missing or empty: a config file needs a domain") {
		return "", nil
	}
	root = &node{path: domain}
	if x.domainRoot != nil {
		if r := x.domainRoot(domain); r != nil {
			root = r
		}
	}
	x.descriptors(root, r.GetDescriptors())
	if len(x.errs) > 0 {
		return "", nil
	}
	return domain, root
}

func (x *xdsConv) descriptors(parent *node, ds []*rlsconf.RateLimitDescriptor) {
	x.idx = append(x.idx, 0)
	defer func() { x.idx = x.idx[:len(x.idx)-1] }()
	for i, d := range ds {
		x.idx[len(x.idx)-1] = i
		if x.descriptor(parent, d); x.stopped {
			return
		}
	}
}

// descriptor converts one descriptor into a child of parent. A descriptor
// with an error is not added, but its limit and children are still
// converted for their own errors.
func (x *xdsConv) descriptor(parent *node, d *rlsconf.RateLimitDescriptor) {
	errs := len(x.errs)
	key, value := d.GetKey(), d.GetValue()
	if key == "" && x.note("key", "missing or empty: a descriptor needs a key") {
		return
	}
	child := &node{key: key, value: value, path: parent.path + "." + key, detailed: d.GetDetailedMetric()}
	if value != "" {
		child.path += "_" + value
	}
	x.pathBytes += len(child.path)
	x.held += xdsNodeBytes + 2*int64(len(child.path))
	switch {
	case x.pathBytes > maxPathBytes:
		x.fatal = true
		x.note("key", "descriptor paths exceed %d MiB in all: keys too long or nested too deep", maxPathBytes>>20)
		return
	case x.held > x.budget:
		x.fatal = true
		x.note("key", "the resource would hold more than %d bytes converted (%d times its size, and %d): keys and values too long for their nesting", x.budget, XDSMemoryFactor, XDSMemorySlack)
		return
	}
	pat, err := compileWildcard(value, x.opts.Wildcards)
	if err != nil && x.note("value", "%v", err) {
		return
	}
	child.pat = pat
	if len(x.errs) == errs {
		if err := parent.addChild(child); err != nil {
			field, msg := "key", err.Error()
			if ce, ok := err.(*childError); ok {
				field, msg = ce.field, ce.describe(x.where)
			}
			if x.note(field, "%s", msg) {
				return
			}
		} else {
			x.places[child] = place{file: x.file}
		}
	}
	if rl := d.GetRateLimit(); rl != nil {
		flags := descFlags{shadow: d.GetShadowMode(), detailed: d.GetDetailedMetric()}
		if r := x.rateLimit(rl, child.path, flags); r != nil {
			x.held += xdsRuleBytes
			child.rules = []*Rule{r}
			if depth, max := len(x.idx), x.opts.maxEntries(); depth > max && x.note("rate_limit", "a limit %d levels deep never applies: a request descriptor has at most %d entries (--max-descriptor-entries)", depth, max) {
				return
			}
		}
	}
	if sub := d.GetDescriptors(); len(sub) > 0 && !x.stopped {
		x.descriptors(child, sub)
	}
}

// rateLimit converts one rate_limit into the rule called name (the
// generated one unless the limit names itself), or notes its error and
// returns nil. The checks are the file's (parser.rateLimitFields), on the
// fields the reference's conversion would write: unit unless UNKNOWN,
// requests_per_unit unless unlimited with 0, unlimited, name and replaces
// when set.
func (x *xdsConv) rateLimit(rl *rlsconf.RateLimitPolicy, name string, flags descFlags) *Rule {
	const path = "rate_limit"
	r := flags.rule(name)
	unit := ""
	if rl.GetUnit() != rlsconf.RateLimitUnit_UNKNOWN {
		unit = rl.GetUnit().String()
	}
	r.Unlimited = rl.GetUnlimited()
	if n := rl.GetName(); n != "" {
		r.Name, r.ConfiguredName = n, n
	}
	for i, rp := range rl.GetReplaces() {
		if rp.GetName() == "" {
			x.note(index(join(path, "replaces"), i)+".name", "missing or empty: a replaces entry names the rule it replaces")
			return nil
		}
		r.Replaces = append(r.Replaces, rp.GetName())
	}
	for _, rp := range r.Replaces {
		if r.ConfiguredName != "" && rp == r.ConfiguredName {
			x.note(join(path, "replaces"), "a rule must not replace itself (%q)", rp)
			return nil
		}
	}
	u, known := LookupUnit(unit)
	switch {
	case unit != "" && !known:
		x.note(join(path, "unit"), "unknown unit %q (want %s)", unit, unitList(" or "))
		return nil
	case r.Unlimited && unit != "":
		x.note(join(path, "unit"), "must not be set when unlimited")
		return nil
	case r.Unlimited:
		return r
	case unit == "":
		x.note(join(path, "unit"), "missing: want one of %s (or a window)", unitList(", "))
		return nil
	}
	r.Unit, r.Limit.Period = u.Name, u.Period
	r.Limit.Algorithm = sluice.FixedWindow
	r.Limit.Rate = int(rl.GetRequestsPerUnit())
	check := r.Limit
	if r.Limit.Rate == 0 {
		// requests_per_unit: 0 is the reference's block-all limit: check the
		// rest of the limit with a stand-in rate.
		check.Rate = 1
		r.Deny = true
	}
	if err := check.Validate(); err != nil {
		fp := path
		var le *sluice.LimitError
		if errors.As(err, &le) && le.Field == "Rate" {
			fp = join(path, "requests_per_unit")
		}
		x.note(fp, "%s", reason(err))
		return nil
	}
	return r
}
