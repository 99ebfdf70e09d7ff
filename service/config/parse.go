package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"
)

var rootKeys = []string{"domain", "descriptors"}

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
	file string
	opts Options
	// domainRoot, when set, returns the root of a domain already read,
	// to which this file's descriptors are added (Options.MergeDomains);
	// nil when there is none.
	domainRoot func(domain string) *node
	// places holds where each descriptor read so far is written, for the
	// errors of a later one that conflicts with it; nil: not kept.
	places    map[*node]place
	noLines   bool // places name files, not lines (xDS resources)
	nodes     int  // nodes visited so far
	maxNodes  int  // the budget for nodes
	pathBytes int  // bytes of descriptor paths built so far

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

// place is where a descriptor is written.
type place struct {
	file string
	line int
}

// where is "line 12" for a descriptor n of this file, "other.yaml:12" for
// one of another file, "" when unknown.
func (p *parser) where(n *node) string {
	w, ok := p.places[n]
	switch {
	case !ok || p.noLines && w.file == p.file:
		return ""
	case p.noLines:
		return w.file
	case w.file != p.file:
		return fmt.Sprintf("%s:%d", w.file, w.line)
	}
	return fmt.Sprintf("line %d", w.line)
}

func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &Error{File: p.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)}
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
	stop := p.eachKey(fields, "", func(f *field, fp string) (err error) {
		switch f.key {
		case "domain":
			domain, err = p.str(f.v, fp)
			domainBad = err != nil
			line = f.k.Line
		case "descriptors":
			descs = f
		default:
			err = p.unknown(f, "", rootKeys)
		}
		return err
	})
	if stop {
		return "", nil, 0
	}
	if domain == "" && !domainBad && p.note(p.errorf(top, "domain", "missing or empty: a config file needs a domain")) {
		return "", nil, 0
	}
	root = &node{path: domain}
	if p.domainRoot != nil {
		if r := p.domainRoot(domain); r != nil {
			root = r
		}
	}
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

// eachKey calls read for each field of a mapping, with the field's key
// path, and notes its error: one run reports the errors of every key. It
// reports whether parsing must stop.
func (p *parser) eachKey(fields []field, path string, read func(f *field, fp string) error) (stop bool) {
	for i := range fields {
		f := &fields[i]
		if p.note(read(f, join(path, f.key))) {
			return true
		}
	}
	return false
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }
