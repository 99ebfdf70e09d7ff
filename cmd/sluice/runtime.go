package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
)

// defaultGCHeapFloor is the default of --gc-heap-floor. At GOGC=100 the
// memory store's live heap of a few MB was collected dozens of times a second
// under load in bench/loadgen (12% of the CPU in GC mark workers); a floor
// costs at most about this much heap, and nothing once the live heap is large.
const defaultGCHeapFloor = 64 << 20

// runtimeFlags are the process's log, its garbage collector, and whether
// envoyproxy/ratelimit's environment variables configure it.
type runtimeFlags struct {
	logLevel    string
	level       slog.Level // logLevel, parsed by validate
	logFormat   string
	gcHeapFloor byteSize
	refEnv      refMode
}

func (g *runtimeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.StringVar(&g.logFormat, "log-format", "text", "log `format`: text (key=value) or json (one object a line)")
	fs.Var(&g.refEnv, "reference-env", "read envoyproxy/ratelimit's environment variables (CONFIG_TYPE, RUNTIME_ROOT, REDIS_URL, ...) with their meaning and defaults, below flags and SLUICE_* variables: `auto` (when one of its distinctive variables, such as CONFIG_TYPE, RUNTIME_ROOT, REDIS_SOCKET_TYPE or USE_STATSD, is set), on or off; see docs/reference-env.md")
	g.gcHeapFloor = defaultGCHeapFloor
	fs.Var(&g.gcHeapFloor, "gc-heap-floor", "let the heap grow to this `size` (64MiB, 256MB, bytes) before the garbage collector runs: GOGC is raised while the live heap is small and returns to its base (GOGC's, or 100) once the live heap is large; 0 disables it, as does GOGC=off; a GOMEMLIMIT still wins")
}

func (g *runtimeFlags) validate() error {
	if g.gcHeapFloor > 0 && g.gcHeapFloor < 1<<20 {
		return fmt.Errorf("--gc-heap-floor %d: want 0 (off) or at least 1MiB; a plain number is bytes", uint64(g.gcHeapFloor))
	}
	if err := g.level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	if g.logFormat != "text" && g.logFormat != "json" {
		return fmt.Errorf("--log-format %q: want text or json", g.logFormat)
	}
	return nil
}

// logger is serve's log, written to w.
func (g *runtimeFlags) logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: g.level}
	if g.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
