package config

import (
	"bytes"
	"encoding/base64"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// yamlLine matches a syntax error of the YAML decoder, which gives the
// line only in its text.
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
	n, err := p.collection(n, path, yaml.MappingNode, "a mapping")
	if n == nil {
		return nil, err
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
	n, err := p.collection(n, path, yaml.SequenceNode, "a list")
	if n == nil {
		return nil, err
	}
	return n.Content, nil
}

// collection resolves n, a node of kind k (what names it in errors): nil
// and no error for a null node.
func (p *parser) collection(n *yaml.Node, path string, k yaml.Kind, what string) (*yaml.Node, error) {
	n, err := p.present(n, path)
	if n == nil {
		return nil, err
	}
	if n.Kind != k {
		return nil, p.errorf(n, path, "want %s, got %s", what, kind(n))
	}
	return n, nil
}

// present resolves n: nil, and no error, for a null node.
func (p *parser) present(n *yaml.Node, path string) (*yaml.Node, error) {
	n, err := p.resolve(n, path)
	if err != nil || isNull(n) {
		return nil, err
	}
	return n, nil
}

// str reads a scalar as a string, as the reference's YAML decoder does for
// string fields: 123 is "123", null is "".
func (p *parser) str(n *yaml.Node, path string) (string, error) {
	n, err := p.present(n, path)
	if n == nil {
		return "", err
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
	n, err := p.present(n, path)
	if n == nil {
		return false, err
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
	n, err := p.present(n, path)
	if n == nil {
		return 0, err
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
