// Command sluice is the sluice rate-limit service.
//
//	sluice serve [flags]     serve Envoy's rate-limit protocol (gRPC), /json,
//	                         /v1/check, /v1/auth, probes and metrics
//	sluice check FILE|DIR…   validate configuration files
//	sluice version           print the version
//
// Every flag of serve can also be set from the environment: --failure-mode
// is SLUICE_FAILURE_MODE, and so on; a flag on the command line wins.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `sluice: a distributed rate limiter, and a drop-in Envoy rate-limit service.

Usage:
  sluice serve [flags]       serve gRPC ShouldRateLimit and the HTTP API
  sluice check FILE|DIR...   validate envoyproxy/ratelimit configuration files
  sluice version             print the version

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
	case "version":
		return printVersion(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func printVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", "sluice version", "Print the version of sluice and of the Go toolchain that built it.", stderr)
	if code, done := parse(fs, args); done {
		return code
	}
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	fmt.Fprintf(stdout, "sluice %s %s %s/%s\n", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}
