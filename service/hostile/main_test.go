package hostile

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// binary is the sluice command built once, with the hostiletest tag, for
// every test of the package, or the one HOSTILE_BINARY names.
var binary string

// foreignBinary is set when HOSTILE_BINARY names the binary under test (one
// built from another commit, say): the suite runs it instead of building
// ./cmd/sluice, leaves out the flags it does not know and judges it by the
// bounds of this tree's defaults (bound's fallbacks, which the suite holds
// equal to them).
var foreignBinary = os.Getenv("HOSTILE_BINARY") != ""

// helpText is the output of `sluice serve -h`: the flags the binary knows
// and their defaults.
var helpText string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-hostile-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sluice")
	if foreignBinary {
		binary = os.Getenv("HOSTILE_BINARY")
		fmt.Fprintf(os.Stderr, "hostile: HOSTILE_BINARY=%s: running it, without the flags it does not know, held to this tree's bounds\n", binary)
	} else {
		build := exec.Command("go", "build", "-tags", "hostiletest", "-o", binary, "./cmd/sluice")
		build.Dir = filepath.Join("..", "..")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build -tags hostiletest ./cmd/sluice: %v\n%s", err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	out, _ := exec.Command(binary, "serve", "-h").CombinedOutput()
	helpText = string(out)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// dropUnknownFlags is set by HOSTILE_DROP_UNKNOWN_FLAGS=1 (and by
// HOSTILE_BINARY): a flag the binary does not know is left out (and logged)
// instead of failing the test, to see how a build without some of the
// hardening fares.
var dropUnknownFlags = os.Getenv("HOSTILE_DROP_UNKNOWN_FLAGS") == "1" || foreignBinary

// knownFlags keeps the flags of flags that the binary knows (serve -h
// lists them). A flag it does not know fails the test, naming it, unless
// dropUnknownFlags, when it is left out and logged: the class then runs on
// the binary's behaviour without it, held to the same bounds.
func knownFlags(t *testing.T, flags []flagArg) []flagArg {
	t.Helper()
	var kept []flagArg
	for _, f := range flags {
		if _, ok := flagDefault(f.name); ok {
			kept = append(kept, f)
			continue
		}
		if !dropUnknownFlags {
			t.Fatalf("sluice serve does not know the flag --%s (not merged yet?); set HOSTILE_DROP_UNKNOWN_FLAGS=1 to run without it", f.name)
		}
		t.Logf("sluice serve has no --%s: running without it", f.name)
	}
	return kept
}

// flagDefault returns the default of serve's flag name as -h prints it
// (quotes removed), and whether the binary knows the flag. A known flag
// without a default returns "".
func flagDefault(name string) (string, bool) {
	re := regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(name) + `(?: [^\n]*)?\n((?:    [^\n]*\n?)*)`)
	m := re.FindStringSubmatch(helpText)
	if m == nil {
		return "", false
	}
	i := strings.LastIndex(m[1], "(default ")
	if i < 0 {
		return "", true
	}
	v := m[1][i+len("(default "):]
	v = v[:strings.LastIndexByte(v, ')')]
	return strings.Trim(v, `"`), true
}

// bound returns the default of a bound flag. A flag the binary does not
// know fails the test, naming it, unless HOSTILE_DROP_UNKNOWN_FLAGS=1, when
// fallback is used instead. fallback is this tree's default as serve -h
// prints it: on this tree's binary a fallback that differs fails the test,
// so that a foreign binary (HOSTILE_BINARY) is judged by today's bounds.
func bound(t *testing.T, name, fallback string) string {
	t.Helper()
	v, ok := flagDefault(name)
	if ok && !foreignBinary && v != fallback {
		t.Errorf("the suite's fallback for --%s is %q, its default %q: a binary without the flag would be judged by another bound", name, fallback, v)
	}
	switch {
	case !ok && dropUnknownFlags:
		t.Logf("sluice serve has no --%s; HOSTILE_DROP_UNKNOWN_FLAGS=1: assuming %s", name, fallback)
		return fallback
	case !ok:
		t.Fatalf("sluice serve has no flag --%s (its bound is what this class tests)", name)
	case v == "" || v == "0" || v == "0s":
		t.Fatalf("sluice serve --%s has no default (%q): the bound must have a production default", name, v)
	}
	return v
}
