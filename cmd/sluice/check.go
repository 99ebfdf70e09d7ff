package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
)

func check(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", "sluice check FILE|DIR...",
		`Validate envoyproxy/ratelimit configuration files, or directories of
*.yaml and *.yml files (subdirectories included), as sluice serve --config
would load them together. Exits 0 when they are valid (printing a warning
for each rule whose keys may each cost much memory: a sliding_log above
10000 per period); otherwise prints every problem found, up to 20, one a
line as file:line: key: problem, and exits 1.`, stderr)
	var read readFlags
	read.register(fs)
	fs.IntVar(&read.maxEntries, "max-descriptor-entries", engine.DefaultBounds.MaxDescriptorEntries, "most entries in one descriptor, as sluice serve's: a limit deeper in the tree never applies and is an error")
	withEnv(fs)
	if code, done := parse(fs, args); done {
		return code
	}
	o, err := read.options()
	if err == nil && read.maxEntries < 1 {
		err = fmt.Errorf("--max-descriptor-entries %d: must be >= 1", read.maxEntries)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice check: %v\n", err)
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "sluice check: no files given (see sluice check -h)")
		return 2
	}
	c, err := o.Load(fs.Args()...)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	for _, w := range c.Warnings() {
		fmt.Fprintln(stderr, "warning:", w)
	}
	ds := c.Domains()
	fmt.Fprintf(stdout, "ok: %d domain(s): %s\n", len(ds), strings.Join(ds, ", "))
	return 0
}

// configError is serve's message for a configuration that does not load:
// one line for one error, else a line for each.
func configError(err error) string {
	var es config.Errors
	if errors.As(err, &es) && len(es) > 1 {
		return "sluice serve: invalid configuration:\n" + err.Error()
	}
	return "sluice serve: invalid configuration: " + err.Error()
}
