package config

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

var descriptorKeys = []string{"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode", "detailed_metric", "quota_mode", "value_to_metric", "share_threshold", "metadata"}

// descFlags are the descriptor-level settings that apply to its rules.
type descFlags struct {
	shadow, detailed, quota, valueToMetric, shareThreshold bool
}

// descriptors parses a descriptors list into the children of parent; the
// errors are noted.
func (p *parser) descriptors(parent *node, n *yaml.Node, path string, depth int) {
	items, err := p.sequence(n, path)
	if err != nil {
		p.note(err)
		return
	}
	if depth > maxDepth && len(items) > 0 {
		p.note(p.errorf(n, path, "descriptors nested more than %d levels deep", maxDepth))
		return
	}
	for i, item := range items {
		if p.descriptor(parent, item, index(path, i), depth); p.stopped {
			return
		}
	}
}

// descriptor parses one descriptor into a child of parent; the errors are
// noted. A descriptor with an error is not added, but its limits and
// children are still read for their own errors.
func (p *parser) descriptor(parent *node, n *yaml.Node, path string, depth int) {
	fields, err := p.mapping(n, path)
	if err != nil {
		p.note(err)
		return
	}
	if fields == nil {
		n, _ = p.resolve(n, path)
		p.note(p.errorf(n, path, "want a descriptor mapping with a key, got %s", kind(n)))
		return
	}
	errs := len(p.errs)
	d, stop := p.readDescriptor(fields, path)
	if stop || p.checkDescriptor(d, fields, path) {
		return
	}
	child, stop := p.child(parent, d, path, len(p.errs) == errs)
	if stop {
		return
	}
	switch {
	case d.rl != nil && d.rls != nil:
		p.note(p.errorf(d.rls.k, join(path, "rate_limits"), "give rate_limit or rate_limits, not both"))
	case d.rl != nil:
		if r, _ := p.rateLimit(d.rl.v, join(path, "rate_limit"), child.path, d.flags); r != nil {
			child.rules = []*Rule{r}
		}
	case d.rls != nil:
		p.rateLimits(child, d.rls, join(path, "rate_limits"), d.flags)
	}
	if max := p.opts.maxEntries(); len(child.rules) > 0 && depth > max {
		f, key := d.rl, "rate_limit"
		if f == nil {
			f, key = d.rls, "rate_limits"
		}
		if p.note(p.errorf(f.k, join(path, key), "a limit %d levels deep never applies: a request descriptor has at most %d entries (--max-descriptor-entries)", depth, max)) {
			return
		}
	}
	if d.children != nil && !p.stopped {
		p.descriptors(child, d.children.v, join(path, "descriptors"), depth+1)
	}
}

// descKeys are the keys of one descriptor as read. A nil field is a key
// not given.
type descKeys struct {
	key, value        string
	keyNode, shareKey *yaml.Node
	valueNode         *yaml.Node
	keyBad            bool // key is given but is not a string
	flags             descFlags
	rl, rls, children *field
}

// readDescriptor reads the keys of a descriptor. It notes the error of each key
// and goes on to the next; stop reports that parsing must stop.
func (p *parser) readDescriptor(fields []field, path string) (_ *descKeys, stop bool) {
	d := &descKeys{}
	stop = p.eachKey(fields, path, func(f *field, fp string) (err error) {
		switch f.key {
		case "key":
			d.key, err = p.str(f.v, fp)
			d.keyNode, d.keyBad = f.k, err != nil
		case "value":
			d.value, err = p.str(f.v, fp)
			d.valueNode = f.v
		case "rate_limit":
			d.rl = f
		case "rate_limits":
			d.rls = f
		case "descriptors":
			d.children = f
		case "shadow_mode":
			d.flags.shadow, err = p.boolean(f.v, fp)
		case "detailed_metric":
			d.flags.detailed, err = p.boolean(f.v, fp)
		case "quota_mode":
			d.flags.quota, err = p.boolean(f.v, fp)
		case "value_to_metric":
			d.flags.valueToMetric, err = p.boolean(f.v, fp)
		case "share_threshold":
			d.flags.shareThreshold, err = p.boolean(f.v, fp)
			d.shareKey = f.k
		case "metadata":
			// Free-form data for operators, ignored. (The reference's
			// list of keys lacks it: a file using it loads in sluice only.)
		default:
			err = p.unknown(f, path, descriptorKeys)
		}
		return err
	})
	return d, stop
}

// checkDescriptor notes a missing key and a share_threshold on a value that
// is no wildcard; it reports whether parsing must stop.
func (p *parser) checkDescriptor(d *descKeys, fields []field, path string) (stop bool) {
	if d.key == "" && !d.keyBad {
		at := d.keyNode
		if at == nil {
			at = fields[0].k
		}
		if p.note(p.errorf(at, join(path, "key"), "missing or empty: a descriptor needs a key")) {
			return true
		}
	}
	if !d.flags.shareThreshold {
		return false
	}
	switch {
	case p.opts.Wildcards == WildcardsTrailing && !strings.HasSuffix(d.value, "*"):
		return p.note(p.errorf(d.shareKey, join(path, "share_threshold"), "can only be used with a wildcard value (ending in '*'), not %q", d.value))
	case !strings.Contains(d.value, "*"):
		return p.note(p.errorf(d.shareKey, join(path, "share_threshold"), "can only be used with a wildcard value (one with a '*'), not %q", d.value))
	}
	return false
}

// child returns the node of descriptor d, added to parent when add is set
// (the descriptor has no error); stop reports that parsing must stop.
func (p *parser) child(parent *node, d *descKeys, path string, add bool) (_ *node, stop bool) {
	child := &node{key: d.key, value: d.value, path: parent.path + "." + d.key}
	if d.value != "" {
		child.path += "_" + d.value
	}
	p.pathBytes += len(child.path)
	if p.pathBytes > maxPathBytes {
		p.fatal = true
		p.note(p.errorf(d.keyNode, join(path, "key"), "descriptor paths exceed %d MiB in all: keys too long or nested too deep", maxPathBytes>>20))
		return nil, true
	}
	child.shareThreshold = d.flags.shareThreshold
	child.valueToMetric = d.flags.valueToMetric
	child.detailed = d.flags.detailed
	pat, err := compileWildcard(d.value, p.opts.Wildcards)
	if err != nil {
		add = false
		if p.note(p.errorf(d.valueNode, join(path, "value"), "%v", err)) {
			return nil, true
		}
	}
	child.pat = pat
	if add {
		if err := parent.addChild(child); err != nil {
			at, field, msg := d.keyNode, "key", err.Error()
			if ce, ok := err.(*childError); ok {
				msg = ce.describe(p.where)
				if ce.field == "value" {
					at, field = d.valueNode, "value"
				}
			}
			if p.note(p.errorf(at, join(path, field), "%s", msg)) {
				return nil, true
			}
		}
		if p.places != nil && d.keyNode != nil {
			p.places[child] = place{p.file, d.keyNode.Line}
		}
	}
	return child, false
}
