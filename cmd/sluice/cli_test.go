package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/service/config"
)

// runCLI runs the command in process and returns its exit code and output.
func runCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestVersionLine(t *testing.T) {
	goVer := " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	tests := []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            string
	}{
		{"no build info", "", "", nil, "sluice devel" + goVer},
		{"go install of a tag", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "sluice v1.2.3" + goVer},
		{"checkout", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}},
			"sluice devel (commit 0123456789ab, modified)" + goVer},
		{"ldflags win", "v2.0.0", "fedcba9", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef"}}}, "sluice v2.0.0 (commit fedcba9)" + goVer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, c := version, commit
			version, commit = tt.version, tt.commit
			defer func() { version, commit = v, c }()
			if got := versionLine(tt.bi); got != tt.want {
				t.Errorf("versionLine = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCLI(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - {key: j, colour: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mergeDir := t.TempDir()
	for name, body := range map[string]string{
		"a.yaml": "domain: d\ndescriptors:\n  - {key: k, value: \"bar*b\", share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 1}}\n",
		"b.yaml": "domain: d\ndescriptors:\n  - {key: j, rate_limit: {unit: minute, requests_per_unit: 2}}\n",
	} {
		if err := os.WriteFile(filepath.Join(mergeDir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deep := filepath.Join(dir, "deep.yaml")
	if err := os.WriteFile(deep, []byte("domain: x\ndescriptors: [{key: a, descriptors: [{key: b, descriptors: [{key: c, rate_limit: {unit: second, requests_per_unit: 1}}]}]}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string // a part of it
		stderr     string // all of it, when not empty
		stderrPart string
	}{
		{"version", []string{"version"}, 0, "sluice ", "", ""},
		{"--version", []string{"--version"}, 0, "sluice ", "", ""},
		{"config example", []string{"config", "example"}, 0, "domain: example\n", "", ""},
		{"config alone", []string{"config"}, 2, "", "sluice config: want the subcommand example (see sluice config -h)\n", ""},
		{"bad flag: one line", []string{"serve", "--bogus"}, 2, "", "sluice serve: flag provided but not defined: -bogus (see sluice serve -h)\n", ""},
		{"bad value: one line", []string{"serve", "--replicas", "x"}, 2, "", "sluice serve: invalid value \"x\" for flag -replicas: parse error (see sluice serve -h)\n", ""},
		{"check bad flag", []string{"check", "-x"}, 2, "", "sluice check: flag provided but not defined: -x (see sluice check -h)\n", ""},
		{"check nothing", []string{"check"}, 2, "", "sluice check: no files given (see sluice check -h)\n", ""},
		{"missing config: no repeated prefix", []string{"serve", "--config", filepath.Join(dir, "nope.yaml")}, 1, "",
			"sluice serve: invalid configuration: " + filepath.Join(dir, "nope.yaml") + ": no such file or directory\n", ""},
		{"every error of a file", []string{"check", bad}, 1, "", bad + `:4: descriptors[0].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)` + "\n" +
			bad + ":5: descriptors[1].colour: unknown key (want one of key, value, rate_limit, rate_limits, descriptors, shadow_mode, detailed_metric, quota_mode, value_to_metric, share_threshold, metadata)\n", ""},
		{"serve lists them too", []string{"serve", "--config", bad}, 1, "", "", "sluice serve: invalid configuration:\n" + bad + ":4: descriptors[0]"},
		{"help", []string{"serve", "-h"}, 0, "", "", "Usage: sluice serve"},
		{"check: a domain in two files", []string{"check", mergeDir}, 1, "", "", `b.yaml:1: domain: duplicate domain "d"`},
		{"check --merge-domains", []string{"check", "--merge-domains", mergeDir}, 0, "ok: 1 domain(s): d", "", ""},
		{"check --wildcards trailing", []string{"check", "--merge-domains", "--wildcards", "trailing", mergeDir}, 1, "", "",
			`a.yaml:3: descriptors[0].share_threshold: can only be used with a wildcard value (ending in '*'), not "bar*b"`},
		{"check --wildcards bad", []string{"check", "--wildcards", "middle", mergeDir}, 2, "", "sluice check: --wildcards: want anywhere or trailing, got \"middle\"\n", ""},
		{"check --max-descriptor-entries", []string{"check", "--max-descriptor-entries", "2", deep}, 1, "", "",
			"descriptors[0].descriptors[0].descriptors[0].rate_limit: a limit 3 levels deep never applies: a request descriptor has at most 2 entries"},
		{"serve --max-descriptor-entries", []string{"serve", "--max-descriptor-entries", "2", "--config", deep}, 1, "", "", "a limit 3 levels deep never applies"},
		{"serve --wildcards bad", []string{"serve", "--wildcards", "x"}, 2, "", "sluice serve: --wildcards: want anywhere or trailing, got \"x\"\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(tt.args...)
			if code != tt.code || !strings.Contains(stdout, tt.stdout) || tt.stderr != "" && stderr != tt.stderr || !strings.Contains(stderr, tt.stderrPart) {
				t.Errorf("sluice %v = %d\nstdout %q\nstderr %q\nwant %d, stdout with %q, stderr %q / with %q", tt.args, code, stdout, stderr, tt.code, tt.stdout, tt.stderr, tt.stderrPart)
			}
		})
	}
}

// TestConfigExample checks that sluice config example prints a
// configuration that loads.
func TestConfigExample(t *testing.T) {
	_, out, _ := runCLI("config", "example")
	if out != string(config.DefaultExample()) {
		t.Errorf("config example printed %q", out)
	}
	f := filepath.Join(t.TempDir(), "ratelimit.yaml")
	if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runCLI("check", f); code != 0 || stdout != "ok: 1 domain(s): example\n" {
		t.Errorf("check of the example = %d %q %q", code, stdout, stderr)
	}
}

// TestCheckWarnsOfLargeLogs: sluice check loads a sliding log of 100,000
// an hour and warns of what its keys may cost, on stderr.
func TestCheckWarnsOfLargeLogs(t *testing.T) {
	f := filepath.Join(t.TempDir(), "ratelimit.yaml")
	yaml := "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {algorithm: sliding_log, unit: hour, requests_per_unit: 100000}\n"
	if err := os.WriteFile(f, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI("check", f)
	if code != 0 || stdout != "ok: 1 domain(s): api\n" || !strings.HasPrefix(stderr, "warning: rule api.api_key: a sliding_log of 100000 per 1h0m0s keeps up to 100000 entries per key") {
		t.Errorf("check = %d %q %q, want 0, ok and a warning naming the rule", code, stdout, stderr)
	}
}

// TestHelpWraps checks that the about texts of the commands' help have no
// line cut short: a line of an about text that ends a sentence early in a
// paragraph reads as broken ("Exits 0" then "when they are valid").
func TestHelpWraps(t *testing.T) {
	for _, cmd := range [][]string{{"check", "-h"}, {"serve", "-h"}, {"version", "-h"}, {"config", "-h"}} {
		_, _, out := runCLI(cmd...)
		for _, w := range []string{"seed", "guide"} {
			if strings.Contains(strings.ToLower(out), w) {
				t.Errorf("sluice %v: the help speaks of %q", cmd, w)
			}
		}
		about, _, _ := strings.Cut(out, "\nFlags:")
		lines := strings.Split(strings.TrimSpace(about), "\n")
		for i, l := range lines {
			if len(l) > 80 {
				t.Errorf("sluice %v: line longer than 80 columns: %q", cmd, l)
			}
			if i+1 < len(lines) && lines[i+1] != "" && l != "" && len(l) < 50 && !strings.HasPrefix(l, "Usage:") {
				t.Errorf("sluice %v: line %q is cut short before %q", cmd, l, lines[i+1])
			}
		}
	}
}

// TestCheckFailureModes: sluice check accepts every failure_mode a rule
// may have, uncounted included, and names them all when one is wrong.
func TestCheckFailureModes(t *testing.T) {
	dir := t.TempDir()
	for _, m := range []string{"closed", "error", "open", "uncounted"} {
		p := filepath.Join(dir, m+".yaml")
		writeFile(t, p, "domain: "+m+"\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, failure_mode: "+m+"}\n")
		if code, out, errOut := runCLI("check", p); code != 0 || !strings.HasPrefix(out, "ok: 1 domain(s): "+m) {
			t.Errorf("check failure_mode: %s = %d, %q, %q; want 0, ok", m, code, out, errOut)
		}
	}
	p := filepath.Join(dir, "bad.yml")
	writeFile(t, p, "domain: bad\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, failure_mode: maybe}\n")
	want := p + `:4: descriptors[0].rate_limit.failure_mode: want closed, error, open or uncounted, got "maybe"`
	if code, _, errOut := runCLI("check", p); code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("check failure_mode: maybe = %d, %q; want 1 and %q", code, errOut, want)
	}
}
