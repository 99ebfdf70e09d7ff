package redisstore

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// The single scripts are AllowN's hot path: a Lua function defined in a
// script is a new closure, with its upvalues, at every run, and those
// allocations and their collection cost Redis more than a decision's math.
// So inline writes the functions that a single script calls into it as
// plain code, from the same Lua source the other scripts call as functions:
// the call
//
//	local a, b = f(x, y)
//
// of `local function f(p, q) ... return e1, e2 ... end` becomes
//
//	local a, b
//	do
//	  local r1, r2
//	  repeat
//	    local p, q = x, y
//	    ... r1, r2 = e1, e2 break ...
//	  until true
//	  a, b = r1, r2
//	end
//
// A function is inlined where a statement of its own line calls it (an
// assignment of its results, or a bare call), and when no loop in its body
// holds a return (which would then leave the loop, not the function; a
// loop without one is inlined as it is).
// Functions still called after inlining keep their definitions.

// luaFunc is a top-level `local function` of a script file.
type luaFunc struct {
	name   string
	params string
	body   []string
	def    string // the definition with the comment above it
	inline bool
}

var (
	funcLine   = regexp.MustCompile(`^local function ([A-Za-z_]\w*)\(([^)]*)\)(.*)$`)
	assignCall = regexp.MustCompile(`^(\s*)(local\s+)?([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*=\s*([A-Za-z_]\w*)\((.*)\)\s*$`)
	bareCall   = regexp.MustCompile(`^(\s*)([A-Za-z_]\w*)\((.*)\)\s*$`)
	returnStmt = regexp.MustCompile(`^(.*?)\breturn\b\s*(.*?)(\s*\bend)?\s*$`)
	wordRe     = regexp.MustCompile(`[A-Za-z_]\w*`)
	stringLit  = regexp.MustCompile(`'[^']*'|"[^"]*"`)
)

// returnInLoop reports whether a return of the function body lies within
// one of its loops, by following its blocks: while and for (whose do opens
// no block of its own) and repeat open a loop, if, do and function another
// block; end and until close one.
func returnInLoop(body []string) bool {
	var open []bool // the open blocks, innermost last: true for a loop
	loopDo := 0     // while and for headers whose do is still to come
	for _, l := range body {
		for _, w := range wordRe.FindAllString(stringLit.ReplaceAllString(code(l), "''"), -1) {
			switch w {
			case "while", "for":
				open = append(open, true)
				loopDo++
			case "repeat":
				open = append(open, true)
			case "do":
				if loopDo > 0 {
					loopDo--
				} else {
					open = append(open, false)
				}
			case "if", "function":
				open = append(open, false)
			case "end", "until":
				if len(open) > 0 {
					open = open[:len(open)-1]
				}
			case "return":
				if slices.Contains(open, true) {
					return true
				}
			}
		}
	}
	return false
}

// splitFuncs separates the top-level functions of src from its other code.
func splitFuncs(src string) (funcs []*luaFunc, rest string) {
	lines := strings.Split(src, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		m := funcLine.FindStringSubmatch(lines[i])
		if m == nil {
			out = append(out, lines[i])
			continue
		}
		// The comment lines just above belong to the definition.
		c := len(out)
		for c > 0 && strings.HasPrefix(out[c-1], "--") {
			c--
		}
		def := append(append([]string{}, out[c:]...), lines[i])
		out = out[:c]
		f := &luaFunc{name: m[1], params: m[2]}
		if tail := strings.TrimSpace(m[3]); tail != "" {
			body, ok := strings.CutSuffix(tail, " end")
			if !ok {
				panic("redisstore: Lua function " + f.name + ": a one-line function must end on its line")
			}
			f.body = []string{"  " + body}
		} else {
			for i++; i < len(lines) && lines[i] != "end"; i++ {
				f.body = append(f.body, lines[i])
				def = append(def, lines[i])
			}
			def = append(def, "end")
		}
		f.def = strings.Join(def, "\n") + "\n"
		f.inline = !returnInLoop(f.body)
		funcs = append(funcs, f)
	}
	return funcs, strings.Join(out, "\n")
}

// code is a line without its comment (the scripts hold no "--" in
// strings).
func code(l string) string {
	if i := strings.Index(l, "--"); i >= 0 {
		return l[:i]
	}
	return l
}

// codeOf is text without its comments.
func codeOf(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = code(l)
	}
	return strings.Join(lines, "\n")
}

// balanced reports whether s closes every parenthesis it opens, so that a
// call's argument list was matched whole.
func balanced(s string) bool {
	d := 0
	for _, c := range s {
		switch c {
		case '(':
			d++
		case ')':
			d--
			if d < 0 {
				return false
			}
		}
	}
	return d == 0
}

// inliner expands calls of its functions; alias maps a name the driver
// calls (STEP) to a function.
type inliner struct {
	funcs map[string]*luaFunc
	alias map[string]string
	n     int // results' names made so far
}

func (in *inliner) fn(name string) *luaFunc {
	if a, ok := in.alias[name]; ok {
		name = a
	}
	if f := in.funcs[name]; f != nil && f.inline {
		return f
	}
	return nil
}

// expand returns lines with every inlinable call written out.
func (in *inliner) expand(lines []string, depth int) []string {
	if depth > 20 {
		panic("redisstore: Lua functions call each other too deeply to inline")
	}
	var out []string
	for _, l := range lines {
		var ind, decl, outs, args string
		var f *luaFunc
		if m := assignCall.FindStringSubmatch(l); m != nil && balanced(m[5]) {
			ind, decl, outs, f, args = m[1], m[2], m[3], in.fn(m[4]), m[5]
		} else if m := bareCall.FindStringSubmatch(l); m != nil && balanced(m[3]) {
			ind, f, args = m[1], in.fn(m[2]), m[3]
		}
		if f == nil {
			out = append(out, l)
			continue
		}
		var res []string
		if outs != "" {
			for range strings.Split(outs, ",") {
				in.n++
				res = append(res, fmt.Sprintf("r%d_", in.n))
			}
		}
		var b []string
		if decl != "" {
			b = append(b, ind+"local "+outs)
		}
		b = append(b, ind+"do -- "+f.name)
		if len(res) > 0 {
			b = append(b, ind+"  local "+strings.Join(res, ", "))
		}
		b = append(b, ind+"  repeat")
		if strings.TrimSpace(f.params) != "" {
			bind := ind + "    local " + f.params
			if strings.TrimSpace(args) != "" {
				bind += " = " + args
			}
			b = append(b, bind)
		}
		for _, bl := range f.body {
			if strings.HasPrefix(strings.TrimSpace(bl), "--") {
				continue
			}
			if m := returnStmt.FindStringSubmatch(code(bl)); m != nil {
				r := "break"
				switch {
				case len(res) > 0 && m[2] != "":
					r = strings.Join(res, ", ") + " = " + m[2] + " break"
				case len(res) > 0:
					r = strings.Join(res, ", ") + " = nil break"
				}
				if m[3] != "" { // the end of a block the return closes: `then return end`
					r += " end"
				}
				bl = m[1] + r
			}
			b = append(b, ind+"  "+bl)
		}
		b = append(b, ind+"  until true")
		if len(res) > 0 {
			b = append(b, ind+"  "+outs+" = "+strings.Join(res, ", "))
		}
		b = append(b, ind+"end")
		// The body's own calls, written out in turn (binding the
		// parameters keeps the body's names apart from the caller's).
		out = append(out, in.expand(b, depth+1)...)
	}
	return out
}

// inlineScript assembles a single script: rest (the prologue's and the
// files' code outside functions), then the definitions of the functions
// the expanded driver still calls, then the driver with its calls of
// funcs (and of alias's names) written out.
func inlineScript(rest string, funcs []*luaFunc, alias map[string]string, driver string) string {
	in := &inliner{funcs: map[string]*luaFunc{}, alias: alias}
	for _, f := range funcs {
		in.funcs[f.name] = f
	}
	body := strings.Join(in.expand(strings.Split(driver, "\n"), 0), "\n")
	// Definitions still needed: called by name from the code kept, or by a
	// definition kept.
	need := map[string]bool{}
	var mark func(text string)
	mark = func(text string) {
		for _, w := range wordRe.FindAllString(codeOf(text), -1) {
			if f := in.funcs[w]; f != nil && !need[w] {
				need[w] = true
				mark(f.def)
			}
		}
	}
	var aliases []string
	for _, name := range slices.Sorted(maps.Keys(alias)) {
		if regexp.MustCompile(`\b` + name + `\b`).MatchString(codeOf(body)) {
			aliases = append(aliases, fmt.Sprintf("local %s = %s\n", name, alias[name]))
			mark(alias[name])
		}
	}
	mark(rest)
	mark(body)
	var b strings.Builder
	b.WriteString(rest)
	for _, f := range funcs {
		if need[f.name] {
			b.WriteString(f.def)
		}
	}
	for _, a := range aliases {
		b.WriteString(a)
	}
	b.WriteString(body)
	return b.String()
}
