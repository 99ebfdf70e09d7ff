package config

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"go.yaml.in/yaml/v3"
)

// units maps the reference's unit names (its protobuf enum names; the
// reference upper-cases the configured unit before the lookup) to periods.
var units = map[string]time.Duration{
	"SECOND": time.Second,
	"MINUTE": time.Minute,
	"HOUR":   time.Hour,
	"DAY":    24 * time.Hour,
	"WEEK":   7 * 24 * time.Hour,
	"MONTH":  30 * 24 * time.Hour,
	"YEAR":   365 * 24 * time.Hour,
}

var (
	rootKeys       = []string{"domain", "descriptors"}
	descriptorKeys = []string{"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode", "detailed_metric", "quota_mode", "value_to_metric", "share_threshold", "metadata"}
	rateLimitKeys  = []string{"unit", "unit_multiplier", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "window", "burst", "failure_mode"}
	replacesKeys   = []string{"name"}
)

// maxDepth bounds the nesting of descriptors: real configurations use a
// handful of levels, and each level costs memory for the path strings.
const maxDepth = 64

// Aliases may make the loader walk a node many times: a few hundred bytes
// can describe an exponential tree. The walk may visit at most
// aliasFactor times the nodes written in the file, plus aliasSlack, and
// the descriptor paths it builds (rule names) may hold at most maxPathBytes.
const (
	aliasFactor  = 8
	aliasSlack   = 1 << 12
	maxPathBytes = 64 << 20
)

type parser struct {
	file      string
	nodes     int // nodes visited so far
	maxNodes  int // the budget for nodes
	pathBytes int // bytes of descriptor paths built so far

	errs    []*Error // the errors found so far, in file order
	max     int      // report at most this many errors
	fatal   bool     // a budget is exceeded: the next error noted is the last
	stopped bool     // no more parsing: max errors, or a budget exceeded
}

// errStopped is returned where an error was already noted and the parse
// stops.
var errStopped = errors.New("config: parse stopped")

// note records err, an *Error of this parser, and reports whether parsing
// must stop: the bound of errors is reached, or err ended the file's parse.
// The parse goes on past an error at the next descriptor, limit or key, so
// that one run reports all the problems of a file.
func (p *parser) note(err error) (stop bool) {
	if err == nil || p.stopped || errors.Is(err, errStopped) {
		return p.stopped
	}
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{File: p.file, Msg: err.Error()}
	}
	p.errs = append(p.errs, e)
	if p.fatal || len(p.errs) >= p.max {
		p.stopped = true
	}
	return p.stopped
}

func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &Error{File: p.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)}
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parserProblems are the problems of the YAML decoder's parser, as opposed
// to its scanner and reader. The decoder reports a parser error at the
// 0-based line of the construct that failed (the flow mapping left open,
// the block collection), where a scanner error's line is 1-based; and it
// reports no line at all for line 1.
var parserProblems = map[string]bool{
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"did not find expected '-' indicator":    true,
	"did not find expected <document start>": true,
	"did not find expected <stream-start>":   true,
	"did not find expected key":              true,
	"did not find expected node content":     true,
	"found duplicate %TAG directive":         true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found undefined tag handle":             true,
}

// readerProblem reports a problem of the YAML decoder's reader (the
// encoding), which comes with no line.
func readerProblem(msg string) bool {
	for _, p := range []string{"control characters", "invalid ", "incomplete ", "input error", "expected low surrogate", "unexpected low surrogate"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// yamlChar reports whether YAML allows r in a stream (YAML 1.2's
// c-printable).
func yamlChar(r rune) bool {
	return r == '\t' || r == '\n' || r == '\r' || 0x20 <= r && r <= 0x7e || r == 0x85 ||
		0xa0 <= r && r <= 0xd7ff || 0xe000 <= r && r <= 0xfffd || 0x10000 <= r && r <= 0x10ffff
}

// yamlError turns a syntax error of the YAML decoder into an *Error on the
// 1-based line of the construct that failed.
func (p *parser) yamlError(err error, data []byte) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	switch {
	case readerProblem(msg):
		line = badByteLine(data)
	case parserProblems[msg]:
		line++
	case line == 0:
		line = 1
	}
	// A construct left open is reported at the end of the stream, which
	// the decoder counts as a line after the last.
	if n := bytes.Count(data, []byte("\n")) + 1; line > n {
		line = n
	}
	return &Error{File: p.file, Line: line, Msg: "invalid YAML: " + msg}
}

// badByteLine returns the line of the first byte the YAML reader refuses
// (invalid UTF-8, a control character), 0 if none is found.
func badByteLine(data []byte) int {
	line := 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 || !yamlChar(r) {
			return line
		}
		if r == '\n' {
			line++
		}
		i += size
	}
	return 0
}

// parseFile parses one file into its domain's tree. line is the line of the
// domain key, for duplicate-domain errors. The errors found are in p.errs;
// root is nil when there is any.
func (p *parser) parseFile(data []byte) (domain string, root *node, line int) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		p.note(p.yamlError(err, data))
		return "", nil, 0
	}
	for {
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			p.note(p.yamlError(err, data))
			return "", nil, 0
		}
		if len(extra.Content) > 0 && !isNull(extra.Content[0]) {
			p.note(p.errorf(extra.Content[0], "", "a second YAML document: put one domain per file"))
			return "", nil, 0
		}
	}
	p.maxNodes = aliasFactor*countNodes(&doc) + aliasSlack
	var top *yaml.Node
	if len(doc.Content) > 0 {
		top = doc.Content[0]
	}
	fields, err := p.mapping(top, "")
	if p.note(err) || err != nil {
		return "", nil, 0
	}
	var descs *field
	domainBad := false
	for i := range fields {
		f := &fields[i]
		switch f.key {
		case "domain":
			domain, err = p.str(f.v, f.key)
			domainBad = err != nil
			line = f.k.Line
		case "descriptors":
			descs = f
		default:
			err = p.unknown(f, "", rootKeys)
		}
		if p.note(err) {
			return "", nil, 0
		}
	}
	if domain == "" && !domainBad && p.note(p.errorf(top, "domain", "missing or empty: a config file needs a domain")) {
		return "", nil, 0
	}
	root = &node{path: domain}
	if descs != nil {
		p.descriptors(root, descs.v, "descriptors", 1)
	}
	if len(p.errs) > 0 {
		// In file order: the root's keys were read before its descriptors.
		slices.SortStableFunc(p.errs, func(a, b *Error) int { return cmp.Compare(a.Line, b.Line) })
		return "", nil, 0
	}
	return domain, root, line
}

type field struct {
	key  string
	k, v *yaml.Node
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// resolve follows aliases and counts the node against the budget.
func (p *parser) resolve(n *yaml.Node, path string) (*yaml.Node, error) {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	p.nodes++
	if p.nodes > p.maxNodes {
		p.fatal = true
		return nil, p.errorf(n, path, "aliases expand the file beyond %d YAML nodes (%d written)", p.maxNodes, (p.maxNodes-aliasSlack)/aliasFactor)
	}
	return n, nil
}

// countNodes counts the nodes written in a document, not following aliases.
func countNodes(n *yaml.Node) int {
	c := 1
	for _, k := range n.Content {
		c += countNodes(k)
	}
	return c
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func kind(n *yaml.Node) string {
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case isNull(n):
		return "null"
	case n.Kind == yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "an unexpected node"
}

// mapping returns the fields of a mapping node in order, with YAML merge keys
// (<<) expanded; a null node is an empty mapping. Keys given twice are an
// error; keys given explicitly override merged ones.
func (p *parser) mapping(n *yaml.Node, path string) ([]field, error) {
	n, err := p.resolve(n, path)
	if err != nil {
		return nil, err
	}
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errorf(n, path, "want a mapping, got %s", kind(n))
	}
	var fields, merged []field
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := p.resolve(n.Content[i], path)
		if err != nil {
			return nil, err
		}
		v := n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			if p.note(p.errorf(k, path, "a key must be a string, got %s", kind(k))) {
				return nil, errStopped
			}
			continue
		}
		if k.Tag == "!!merge" {
			ms, err := p.merge(v, path)
			if err != nil {
				return nil, err
			}
			merged = append(merged, ms...)
			continue
		}
		if seen[k.Value] {
			if p.note(p.errorf(k, join(path, k.Value), "key given twice")) {
				return nil, errStopped
			}
			continue
		}
		seen[k.Value] = true
		fields = append(fields, field{key: k.Value, k: k, v: v})
	}
	for _, f := range merged {
		if !seen[f.key] {
			seen[f.key] = true
			fields = append(fields, f)
		}
	}
	return fields, nil
}

// merge expands the value of a merge key: a mapping or a list of mappings,
// the earlier taking precedence.
func (p *parser) merge(v *yaml.Node, path string) ([]field, error) {
	v, err := p.resolve(v, path)
	if err != nil {
		return nil, err
	}
	if v.Kind != yaml.SequenceNode {
		return p.mapping(v, path)
	}
	var out []field
	for _, m := range v.Content {
		fs, err := p.mapping(m, path)
		if err != nil {
			return nil, err
		}
		out = append(out, fs...)
	}
	return out, nil
}

func (p *parser) unknown(f *field, path string, allowed []string) error {
	return p.errorf(f.k, join(path, f.key), "unknown key (want one of %s)", strings.Join(allowed, ", "))
}

// sequence returns the items of a list; a null node is an empty list.
func (p *parser) sequence(n *yaml.Node, path string) ([]*yaml.Node, error) {
	n, err := p.resolve(n, path)
	if err != nil {
		return nil, err
	}
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errorf(n, path, "want a list, got %s", kind(n))
	}
	return n.Content, nil
}

// str reads a scalar as a string, as the reference's YAML decoder does for
// string fields: 123 is "123", null is "".
func (p *parser) str(n *yaml.Node, path string) (string, error) {
	n, err := p.resolve(n, path)
	if err != nil {
		return "", err
	}
	if isNull(n) {
		return "", nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", p.errorf(n, path, "want a string, got %s", kind(n))
	}
	switch n.Tag {
	case "!!float":
		// The reference's check of a file's values rejects floats
		// ("error checking config").
		return "", p.errorf(n, path, "%s is a YAML float, which envoyproxy/ratelimit rejects: quote it (%q) to mean the string", n.Value, n.Value)
	case "!!int":
		if _, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err != nil {
			return "", p.errorf(n, path, "%s is a YAML integer beyond 64 bits, which envoyproxy/ratelimit rejects: quote it (%q) to mean the string", n.Value, n.Value)
		}
	case "!!binary":
		b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(n.Value), ""))
		if err != nil {
			return "", p.errorf(n, path, "!!binary: %v", err)
		}
		return string(b), nil
	}
	return n.Value, nil
}

// quoted reports a scalar written as a string: quoted, a block scalar, or
// tagged !!str. The reference's decoder (yaml.v2) refuses such a scalar
// where it wants a number or a boolean.
func quoted(n *yaml.Node) bool {
	return n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 || n.Tag == "!!str" && n.Style&yaml.TaggedStyle != 0
}

// boolean reads a YAML 1.1 boolean, as the reference's decoder (yaml.v2)
// accepts: true/false, yes/no, on/off, y/n in their usual cases.
func (p *parser) boolean(n *yaml.Node, path string) (bool, error) {
	n, err := p.resolve(n, path)
	if err != nil {
		return false, err
	}
	if isNull(n) {
		return false, nil
	}
	if n.Kind == yaml.ScalarNode {
		var v, ok bool
		switch n.Value {
		case "true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "y", "Y":
			v, ok = true, true
		case "false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "n", "N":
			ok = true
		}
		switch {
		case ok && quoted(n):
			return false, p.errorf(n, path, "want true or false, got the string %q (write it unquoted)", n.Value)
		case ok:
			return v, nil
		}
	}
	return false, p.errorf(n, path, "want true or false, got %s", kind(n))
}

// integer reads a whole number in [lo, hi].
func (p *parser) integer(n *yaml.Node, path string, lo, hi int64) (int64, error) {
	n, err := p.resolve(n, path)
	if err != nil {
		return 0, err
	}
	if isNull(n) {
		return 0, nil
	}
	if n.Kind != yaml.ScalarNode {
		return 0, p.errorf(n, path, "want a whole number, got %s", kind(n))
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil {
		return 0, p.errorf(n, path, "want a whole number, got %s", kind(n))
	}
	if quoted(n) {
		return 0, p.errorf(n, path, "want a whole number, got the string %q (write it unquoted)", n.Value)
	}
	if v < lo || v > hi {
		return 0, p.errorf(n, path, "%d is out of range [%d, %d]", v, lo, hi)
	}
	return v, nil
}

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
	var (
		key, value        string
		keyNode, shareKey *yaml.Node
		flags             descFlags
		rl, rls, children *field
		keyBad            bool
	)
	errs := len(p.errs)
	for i := range fields {
		f := &fields[i]
		fp := join(path, f.key)
		switch f.key {
		case "key":
			key, err = p.str(f.v, fp)
			keyNode, keyBad = f.k, err != nil
		case "value":
			value, err = p.str(f.v, fp)
		case "rate_limit":
			rl = f
		case "rate_limits":
			rls = f
		case "descriptors":
			children = f
		case "shadow_mode":
			flags.shadow, err = p.boolean(f.v, fp)
		case "detailed_metric":
			flags.detailed, err = p.boolean(f.v, fp)
		case "quota_mode":
			flags.quota, err = p.boolean(f.v, fp)
		case "value_to_metric":
			flags.valueToMetric, err = p.boolean(f.v, fp)
		case "share_threshold":
			flags.shareThreshold, err = p.boolean(f.v, fp)
			shareKey = f.k
		case "metadata":
			// Free-form data for operators, ignored. (The reference's
			// list of keys lacks it: a file using it loads in sluice only.)
		default:
			err = p.unknown(f, path, descriptorKeys)
		}
		if p.note(err) {
			return
		}
		err = nil
	}
	if key == "" && !keyBad {
		at := keyNode
		if at == nil {
			at = fields[0].k
		}
		if p.note(p.errorf(at, join(path, "key"), "missing or empty: a descriptor needs a key")) {
			return
		}
	}
	if flags.shareThreshold && !strings.HasSuffix(value, "*") {
		if p.note(p.errorf(shareKey, join(path, "share_threshold"), "can only be used with a wildcard value (ending in '*'), not %q", value)) {
			return
		}
	}
	child := &node{key: key, value: value, path: parent.path + "." + key}
	if value != "" {
		child.path += "_" + value
	}
	p.pathBytes += len(child.path)
	if p.pathBytes > maxPathBytes {
		p.fatal = true
		p.note(p.errorf(keyNode, join(path, "key"), "descriptor paths exceed %d MiB in all: keys too long or nested too deep", maxPathBytes>>20))
		return
	}
	child.shareThreshold = flags.shareThreshold
	child.valueToMetric = flags.valueToMetric
	child.detailed = flags.detailed
	if len(p.errs) == errs {
		if err := parent.addChild(child); err != nil && p.note(p.errorf(keyNode, join(path, "key"), "%v", err)) {
			return
		}
	}
	switch {
	case rl != nil && rls != nil:
		if p.note(p.errorf(rls.k, join(path, "rate_limits"), "give rate_limit or rate_limits, not both")) {
			return
		}
	case rl != nil:
		if r, _ := p.rateLimit(rl.v, join(path, "rate_limit"), child.path, flags); r != nil {
			child.rules = []*Rule{r}
		}
	case rls != nil:
		p.rateLimits(child, rls, join(path, "rate_limits"), flags)
	}
	if children != nil && !p.stopped {
		p.descriptors(child, children.v, join(path, "descriptors"), depth+1)
	}
}

// rateLimits parses a rate_limits list into child's rules; the errors are
// noted.
func (p *parser) rateLimits(child *node, f *field, path string, flags descFlags) {
	items, err := p.sequence(f.v, path)
	if err != nil {
		p.note(err)
		return
	}
	if len(items) == 0 {
		p.note(p.errorf(f.k, path, "empty list: give at least one limit or drop the key"))
		return
	}
	type id struct {
		a sluice.Algorithm
		p time.Duration
	}
	seen := map[id]int{}
	for i, item := range items {
		ip := index(path, i)
		r, ok := p.rateLimit(item, ip, child.path+"#"+strconv.Itoa(i), flags)
		if p.stopped {
			return
		}
		if !ok {
			continue
		}
		if r == nil {
			n, _ := p.resolve(item, ip)
			if p.note(p.errorf(n, ip, "empty limit")) {
				return
			}
			continue
		}
		if !r.Unlimited {
			k := id{r.Limit.Algorithm, r.Limit.Period}
			if j, ok := seen[k]; ok {
				n, _ := p.resolve(item, ip)
				if p.note(p.errorf(n, ip, "same algorithm and period (%v, %v) as %s: one key holds one state per algorithm and period; keep the stricter limit", k.a, k.p, index(path, j))) {
					return
				}
				continue
			}
			seen[k] = i
		}
		child.rules = append(child.rules, r)
	}
}

// rateLimit parses one rate_limit object. name is the generated rule name.
// A null rate_limit gives nil: no limit, as the reference. ok is false when
// an error was noted.
func (p *parser) rateLimit(n *yaml.Node, path, name string, flags descFlags) (_ *Rule, ok bool) {
	errs := len(p.errs)
	r, err := p.rateLimitFields(n, path, name, flags)
	p.note(err)
	if len(p.errs) > errs || p.stopped {
		return nil, false
	}
	return r, true
}

// rateLimitFields is rateLimit's parse. It notes the errors of single
// keys and goes on to the next key; it returns the first error of the
// limit as a whole.
func (p *parser) rateLimitFields(n *yaml.Node, path, name string, flags descFlags) (*Rule, error) {
	errs := len(p.errs)
	fields, err := p.mapping(n, path)
	if err != nil {
		return nil, err
	}
	if fields == nil {
		rn, _ := p.resolve(n, path)
		if rn.Kind == yaml.MappingNode { // {}: the reference rejects its empty unit
			return nil, p.errorf(rn, join(path, "unit"), "missing: want one of second, minute, hour, day, week, month, year (or a window)")
		}
		return nil, nil
	}
	r := &Rule{
		Name:           name,
		ShadowMode:     flags.shadow,
		QuotaMode:      flags.quota,
		DetailedMetric: flags.detailed,
		ValueToMetric:  flags.valueToMetric,
		ShareThreshold: flags.shareThreshold,
	}
	var (
		rate                       int64
		unit, window, alg          *field
		burst, failure, rateNode   *field
		extension                  []*field
		unitName, windowS, algName string
		burstV                     int64
		configured                 string
		mult                       *field
		multV                      int64
	)
	for i := range fields {
		f := &fields[i]
		fp := join(path, f.key)
		switch f.key {
		case "unit":
			unit = f
			unitName, err = p.str(f.v, fp)
		case "unit_multiplier":
			mult = f
			multV, err = p.integer(f.v, fp, 0, math.MaxUint32)
		case "requests_per_unit":
			rateNode = f
			rate, err = p.integer(f.v, fp, 0, math.MaxUint32)
		case "unlimited":
			r.Unlimited, err = p.boolean(f.v, fp)
		case "name":
			if configured, err = p.str(f.v, fp); err == nil && configured != "" {
				r.Name = configured
				r.ConfiguredName = configured
			}
		case "replaces":
			r.Replaces, err = p.replaces(f.v, fp)
		case "algorithm":
			alg = f
			extension = append(extension, f)
			algName, err = p.str(f.v, fp)
		case "window":
			window = f
			extension = append(extension, f)
			windowS, err = p.str(f.v, fp)
		case "burst":
			burst = f
			extension = append(extension, f)
			burstV, err = p.integer(f.v, fp, 0, math.MaxInt32)
		case "failure_mode":
			failure = f
			extension = append(extension, f)
			r.FailureMode, err = p.str(f.v, fp)
		default:
			err = p.unknown(f, path, rateLimitKeys)
		}
		if p.note(err) {
			return nil, errStopped
		}
		err = nil
	}
	if len(p.errs) > errs {
		return nil, errStopped // noted
	}
	for _, rp := range r.Replaces {
		if configured != "" && rp == configured {
			return nil, p.errorf(fieldNode(fields, "replaces"), join(path, "replaces"), "a rule must not replace itself (%q)", rp)
		}
	}
	if unit != nil && unitName != "" {
		if _, ok := units[strings.ToUpper(unitName)]; !ok {
			return nil, p.errorf(unit.v, join(path, "unit"), "unknown unit %q (want second, minute, hour, day, week, month or year)", unitName)
		}
	}
	if r.Unlimited {
		if unit != nil && unitName != "" {
			return nil, p.errorf(unit.k, join(path, "unit"), "must not be set when unlimited")
		}
		if mult != nil {
			extension = append(extension, mult)
		}
		if len(extension) > 0 {
			f := extension[0]
			return nil, p.errorf(f.k, join(path, f.key), "must not be set when unlimited")
		}
		return r, nil
	}
	switch {
	case window != nil && unit != nil:
		return nil, p.errorf(window.k, join(path, "window"), "give unit or window, not both")
	case window != nil && mult != nil:
		return nil, p.errorf(mult.k, join(path, "unit_multiplier"), "applies to unit, not to window")
	case window != nil:
		d, err := time.ParseDuration(windowS)
		if err != nil || d <= 0 {
			return nil, p.errorf(window.v, join(path, "window"), "want a positive duration such as 30s or 5m, got %q", windowS)
		}
		r.Limit.Period = d
	case unit == nil || unitName == "":
		at := n
		if unit != nil {
			at = unit.v
		}
		return nil, p.errorf(at, join(path, "unit"), "missing: want one of second, minute, hour, day, week, month, year (or a window)")
	default:
		r.Unit = strings.ToUpper(unitName)
		r.Limit.Period = units[r.Unit]
		if mult != nil {
			if multV < 1 {
				return nil, p.errorf(mult.v, join(path, "unit_multiplier"), "must be >= 1, got %d", multV)
			}
			if multV > int64(math.MaxInt64/r.Limit.Period) {
				return nil, p.errorf(mult.v, join(path, "unit_multiplier"), "%d %s is too long", multV, strings.ToLower(r.Unit)+"s")
			}
			r.Limit.Period *= time.Duration(multV)
		}
	}
	r.Limit.Algorithm = sluice.FixedWindow
	if alg != nil {
		a, err := sluice.ParseAlgorithm(algName)
		if err != nil {
			return nil, p.errorf(alg.v, join(path, "algorithm"), "unknown algorithm %q (want fixed_window, sliding_log, sliding_window, token_bucket or gcra)", algName)
		}
		r.Limit.Algorithm = a
	}
	r.Limit.Rate = int(rate)
	r.Limit.Burst = int(burstV)
	if failure != nil {
		switch r.FailureMode {
		case "", "open", "closed":
		default:
			return nil, p.errorf(failure.v, join(path, "failure_mode"), "want open or closed, got %q", r.FailureMode)
		}
	}
	check := r.Limit
	if rate == 0 {
		// requests_per_unit: 0 is the reference's block-all limit: check the
		// rest of the limit with a stand-in rate.
		check.Rate = 1
		r.Deny = true
	}
	if err := check.Validate(); err != nil {
		at, fp := n, path
		msg := err.Error()
		switch {
		case burst != nil && strings.Contains(msg, "Burst"):
			at, fp = burst.v, join(path, "burst")
		case window != nil && strings.Contains(msg, "Period"):
			at, fp = window.v, join(path, "window")
		case rateNode != nil && strings.Contains(msg, "Rate"):
			at, fp = rateNode.v, join(path, "requests_per_unit")
		}
		return nil, p.errorf(at, fp, "%s", strings.TrimPrefix(msg, sluice.ErrInvalidLimit.Error()+": "))
	}
	return r, nil
}

func fieldNode(fields []field, key string) *yaml.Node {
	for _, f := range fields {
		if f.key == key {
			return f.k
		}
	}
	return nil
}

// replaces parses a replaces list: mappings with a non-empty name.
func (p *parser) replaces(n *yaml.Node, path string) ([]string, error) {
	items, err := p.sequence(n, path)
	if err != nil {
		return nil, err
	}
	var names []string
	for i, item := range items {
		ip := index(path, i)
		fields, err := p.mapping(item, ip)
		if err != nil {
			return nil, err
		}
		name := ""
		for j := range fields {
			f := &fields[j]
			if f.key != "name" {
				return nil, p.unknown(f, ip, replacesKeys)
			}
			if name, err = p.str(f.v, join(ip, "name")); err != nil {
				return nil, err
			}
		}
		if name == "" {
			in, _ := p.resolve(item, ip)
			return nil, p.errorf(in, join(ip, "name"), "missing or empty: a replaces entry names the rule it replaces")
		}
		names = append(names, name)
	}
	return names, nil
}
