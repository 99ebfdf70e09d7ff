package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/internal/config"
)

func check(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", "sluice check FILE|DIR...",
		`Validate envoyproxy/ratelimit configuration files (or directories of
*.yaml and *.yml files, subdirectories included) as sluice serve would load
them together. Exits 0
when they are valid; otherwise prints file:line: key: problem and exits 1.`, stderr)
	if code, done := parse(fs, args); done {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "sluice check: no files given")
		fs.Usage()
		return 2
	}
	c, err := config.Load(fs.Args()...)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	ds := c.Domains()
	fmt.Fprintf(stdout, "ok: %d domain(s): %s\n", len(ds), strings.Join(ds, ", "))
	return 0
}
