package redisstore

import (
	"regexp"
	"strings"
	"testing"
)

// TestSingleScriptsFlat: AllowN's single scripts define no Lua function
// (each would be a closure made at every run), and hold their algorithm's
// step, written inline.
func TestSingleScriptsFlat(t *testing.T) {
	fn := regexp.MustCompile(`\bfunction\b`)
	for k, sc := range singleScripts {
		if sc == nil {
			continue
		}
		if m := fn.FindString(codeOf(sc.src)); m != "" {
			t.Errorf("%s: the single script defines a function", sc.name)
		}
		step := algFiles[baseKind(k)].prefix + "_step"
		switch {
		case isLog(k):
			step = algFiles[k].prefix + "_decide"
		case isCharge(k):
			step = algFiles[baseKind(k)].prefix + "_charge"
		}
		if !strings.Contains(sc.src, "do -- "+step) {
			t.Errorf("%s: the single script does not hold %s inline", sc.name, step)
		}
	}
}

// TestInline: a call of a function on a line of its own becomes its body,
// with its parameters bound and its returns assigned to the call's results.
func TestInline(t *testing.T) {
	funcs, rest := splitFuncs("local x = 1\n-- f doubles a.\nlocal function f(a)\n  if a == 0 then return 0, 'zero' end\n  if a < 0 then return end\n  return 2 * a, 'two'\nend\nlocal function g(b) return b + 1 end\n")
	if rest != "local x = 1\n" {
		t.Errorf("rest = %q, want the code outside functions", rest)
	}
	got := inlineScript(rest, funcs, map[string]string{"F": "f"}, "local y, s = F(x)\nlocal z = g(y) + 1\n")
	want := `local x = 1
local function g(b) return b + 1 end
local y, s
do -- f
  local r1_, r2_
  repeat
    local a = x
    if a == 0 then r1_, r2_ = 0, 'zero' break end
    if a < 0 then r1_, r2_ = nil break end
    r1_, r2_ = 2 * a, 'two' break
  until true
  y, s = r1_, r2_
end
local z = g(y) + 1
`
	if got != want {
		t.Errorf("inlineScript =\n%s\nwant\n%s", got, want)
	}
}
