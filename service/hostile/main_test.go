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
// every test of the package.
var binary string

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
	build := exec.Command("go", "build", "-tags", "hostiletest", "-o", binary, "./cmd/sluice")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build -tags hostiletest ./cmd/sluice: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	out, _ := exec.Command(binary, "serve", "-h").CombinedOutput()
	helpText = string(out)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// dropUnknownFlags is set by HOSTILE_DROP_UNKNOWN_FLAGS=1: a flag the
// binary does not know is left out (and logged) instead of failing the test,
// to see how a build without some of the hardening fares.
var dropUnknownFlags = os.Getenv("HOSTILE_DROP_UNKNOWN_FLAGS") == "1"

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
// fallback is used instead.
func bound(t *testing.T, name, fallback string) string {
	t.Helper()
	v, ok := flagDefault(name)
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
