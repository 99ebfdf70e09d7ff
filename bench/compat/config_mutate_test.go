package compat

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// mutationBases are the valid corpus files the generated part mutates
// (block style, two-space indentation, which the line-based mutations
// below understand); valid-all-keys, the richest, three times as often.
var mutationBases = []string{
	"valid-all-keys", "valid-all-keys", "valid-all-keys",
	"valid-minimal", "valid-yaml11", "valid-anchors", "dup-same-key-other-values", "name-duplicate",
}

// mutant is one generated configuration: base with one change.
type mutant struct {
	name, base, what string
	data             []byte
}

// yamlLine is one line of a block-style YAML file.
type yamlLine struct {
	text   string
	blank  bool   // empty, a comment or a document marker
	indent int    // leading spaces
	item   bool   // a list item ("- " after the indentation)
	col    int    // column of what follows the "- " (indent for a non-item)
	key    string // the mapping key on the line, "" if none
	value  string // what follows "key:", "" for a nested block
}

var keyLineRE = regexp.MustCompile(`^( *)(- +)?([A-Za-z_<][A-Za-z0-9_<]*):(?: +(.*?))?\s*$`)
var itemLineRE = regexp.MustCompile(`^( *)(- +)`)

func parseLines(data string) []yamlLine {
	var out []yamlLine
	for _, text := range strings.Split(strings.TrimSuffix(data, "\n"), "\n") {
		l := yamlLine{text: text}
		trimmed := strings.TrimSpace(text)
		l.indent = len(text) - len(strings.TrimLeft(text, " "))
		l.col = l.indent
		switch {
		case trimmed == "" || strings.HasPrefix(trimmed, "#") || trimmed == "---" || trimmed == "...":
			l.blank = true
		default:
			if m := keyLineRE.FindStringSubmatch(text); m != nil {
				l.item = m[2] != ""
				l.col += len(m[2])
				l.key, l.value = m[3], m[4]
			} else if m := itemLineRE.FindStringSubmatch(text); m != nil {
				l.item = true
				l.col += len(m[2])
			}
		}
		out = append(out, l)
	}
	return out
}

// blockEnd returns the index after line i's block: the lines after it that
// are indented more than col.
func blockEnd(lines []yamlLine, i, col int) int {
	j := i + 1
	for j < len(lines) && (lines[j].blank || lines[j].indent > col) {
		j++
	}
	// Leave trailing comments and blank lines outside the block.
	for j > i+1 && lines[j-1].blank {
		j--
	}
	return j
}

func texts(lines []yamlLine) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.text
	}
	return out
}

// renames are the names a key may be renamed to: the reference's keys,
// sluice's, an unknown one, and spellings of the key itself.
func renames(key string) []string {
	out := append(slices.Clone(referenceKeys), extensionKeys...)
	out = append(out, "bogus", strings.ToUpper(key[:1])+key[1:], key+"s")
	if i := strings.Index(key, "_"); i > 0 && i+1 < len(key) {
		out = append(out, key[:i]+strings.ToUpper(key[i+1:i+2])+key[i+2:]) // camelCase
	}
	return out
}

// retypes are the scalars a value may become: the same text quoted or
// tagged as a string, numbers (negative, fractional, beyond uint32, in
// exponent form, hexadecimal), booleans as YAML 1.1 reads them and as
// strings, null, empty, a list, a mapping, the value in upper case.
func retypes(value string) []string {
	quoted := `"` + value + `"`
	if unq, ok := strings.CutPrefix(value, `"`); ok {
		quoted = strings.TrimSuffix(unq, `"`)
	}
	return []string{quoted, "!!str " + value, "7", "-3", "2.5", "4294967296", "1e3", "0x10", "true", "no", `"yes"`,
		"~", `""`, "[a]", "{a: b}", strings.ToUpper(value)}
}

// mutate applies one random change to data and describes it; ok is false
// when the drawn change does not apply.
func mutate(r *rand.Rand, data string) (out, op, what string, ok bool) {
	lines := parseLines(data)
	var keyed, items []int
	for i, l := range lines {
		if l.key != "" {
			keyed = append(keyed, i)
		}
		if l.item {
			items = append(items, i)
		}
	}
	pick := func(s []int) int { return s[r.IntN(len(s))] }
	switch op = []string{"delete", "rename", "duplicate", "retype"}[r.IntN(4)]; op {
	case "delete":
		// Delete a key and its block. An item's first key: the next key
		// of the item takes its "- "; an item left empty becomes {}.
		i := pick(keyed)
		l := lines[i]
		j := blockEnd(lines, i, l.col)
		var repl []yamlLine
		if l.item {
			if j < len(lines) && !lines[j].blank && lines[j].indent == l.col && !lines[j].item {
				lines[j].text = strings.Repeat(" ", l.indent) + "- " + strings.TrimLeft(lines[j].text, " ")
			} else {
				repl = []yamlLine{{text: strings.Repeat(" ", l.indent) + "- {}"}}
			}
		}
		what = fmt.Sprintf("line %d: delete %q and the %d lines below it", i+1, strings.TrimSpace(l.text), j-i-1)
		lines = slices.Replace(lines, i, j, repl...)
	case "rename":
		i := pick(keyed)
		l := lines[i]
		names := renames(l.key)
		name := names[r.IntN(len(names))]
		if name == l.key {
			return "", "", "", false
		}
		k := strings.Index(l.text, l.key+":")
		lines[i].text = l.text[:k] + name + l.text[k+len(l.key):]
		what = fmt.Sprintf("line %d: rename %q to %q", i+1, l.key, name)
	case "duplicate":
		i := pick(items)
		j := blockEnd(lines, i, lines[i].indent)
		what = fmt.Sprintf("line %d: duplicate the list item %q (%d lines)", i+1, strings.TrimSpace(lines[i].text), j-i)
		lines = slices.Insert(lines, j, slices.Clone(lines[i:j])...)
	case "retype":
		var scalars []int
		for _, i := range keyed {
			if lines[i].value != "" {
				scalars = append(scalars, i)
			}
		}
		i := pick(scalars)
		l := lines[i]
		values := retypes(l.value)
		v := values[r.IntN(len(values))]
		if v == l.value {
			return "", "", "", false
		}
		k := strings.Index(l.text, l.key+":") + len(l.key) + 1
		lines[i].text = l.text[:k] + " " + v
		what = fmt.Sprintf("line %d: %s: %s becomes %s", i+1, l.key, l.value, v)
	}
	return strings.Join(texts(lines), "\n") + "\n", op, what, true
}

// mutants draws n distinct single mutations of the mutation bases.
func mutants(t *testing.T, r *rand.Rand, n int) []mutant {
	t.Helper()
	bases := map[string]string{}
	for _, b := range mutationBases {
		data, err := os.ReadFile(filepath.Join("testdata", "configs", b+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		bases[b] = string(data)
	}
	seen := map[string]bool{}
	for _, d := range bases {
		seen[d] = true
	}
	var out []mutant
	for tries := 0; len(out) < n && tries < 100*n; tries++ {
		base := mutationBases[r.IntN(len(mutationBases))]
		data, op, what, ok := mutate(r, bases[base])
		if !ok || seen[data] {
			continue
		}
		seen[data] = true
		out = append(out, mutant{
			name: fmt.Sprintf("%03d-%s-%s", len(out), base, op),
			base: base, what: what, data: []byte(data),
		})
	}
	return out
}
