// Command sluice is the sluice rate-limit service.
//
//	sluice serve [flags]     serve Envoy's rate-limit protocol (gRPC), /json,
//	                         /v1/check, /v1/auth, probes and metrics
//	sluice check FILE|DIR…   validate configuration files
//	sluice config example    print the built-in example configuration
//	sluice top [--watch]     print the keys denied most, from a running serve
//	sluice version           print the version (also sluice --version)
//
// Every flag of serve can also be set from the environment: --failure-mode
// is SLUICE_FAILURE_MODE, and so on; a flag on the command line wins.
// envoyproxy/ratelimit's own variables configure serve too, below both
// (docs/reference-env.md); installed under that binary's name, ratelimit,
// the command is serve.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
)

// version and commit are set at build time by make binary (and so by make
// release and the Dockerfile):
//
//	-ldflags "-X main.version=v1.2.3 -X main.commit=0123abc"
//
// Without them, the version comes from the build information: the module's
// version for go install github.com/sluicehq/sluice/cmd/sluice@v1.2.3, and
// the VCS revision for a build in a checkout.
var (
	version = ""
	commit  = ""
)

func main() {
	args := os.Args[1:]
	if filepath.Base(os.Args[0]) == "ratelimit" {
		// Installed as envoyproxy/ratelimit's /bin/ratelimit, the command
		// that Envoy Gateway and Helm charts run: serve.
		args = append([]string{"serve"}, args...)
	}
	os.Exit(run(args, os.Stdout, os.Stderr))
}

const usage = `sluice: a distributed rate limiter, and a drop-in Envoy rate-limit service.

Usage:
  sluice serve [flags]       serve gRPC ShouldRateLimit and the HTTP API
  sluice check FILE|DIR...   validate envoyproxy/ratelimit configuration files
  sluice config example      print the built-in example configuration
  sluice top [--watch]       print the keys denied most, from a running serve
  sluice version             print the version (also sluice --version)

Run "sluice <command> -h" for the flags of a command.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "check":
		return check(args[1:], stdout, stderr)
	case "config":
		return configCmd(args[1:], stdout, stderr)
	case "top":
		return top(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		return printVersion(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func printVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", "sluice version",
		"Print the version of sluice, the commit it was built from, and the Go\ntoolchain and platform that built it.", stderr)
	if code, done := parse(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice version: unexpected arguments %q (see sluice version -h)\n", fs.Args())
		return 2
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(bi))
	return 0
}

// versionLine is what sluice version prints:
//
//	sluice v1.2.3 (commit 0123456789ab, modified) go1.26.0 linux/amd64
func versionLine(bi *debug.BuildInfo) string {
	v, c, modified := version, commit, false
	if bi != nil {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if c == "" {
					c = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	var extra []string
	if c != "" {
		extra = append(extra, "commit "+c[:min(len(c), 12)])
	}
	if modified {
		extra = append(extra, "modified")
	}
	line := "sluice " + v
	if len(extra) > 0 {
		line += " (" + strings.Join(extra, ", ") + ")"
	}
	return line + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}
