package main

import (
	"fmt"
	"io"

	"github.com/sluicehq/sluice/service/config"
)

// configCmd is sluice config: sluice config example prints the built-in
// example configuration, so that
//
//	sluice config example > ratelimit.yaml
//
// starts a configuration that sluice serve --config ratelimit.yaml loads.
func configCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("config", "sluice config example",
		"Print the built-in example configuration (the one sluice serve uses\nwithout --config), to start your own: sluice config example > ratelimit.yaml", stderr)
	if code, done := parse(fs, args); done {
		return code
	}
	if fs.NArg() != 1 || fs.Arg(0) != "example" {
		fmt.Fprintln(stderr, "sluice config: want the subcommand example (see sluice config -h)")
		return 2
	}
	if _, err := stdout.Write(config.DefaultExample()); err != nil {
		fmt.Fprintf(stderr, "sluice config example: %v\n", err)
		return 1
	}
	return 0
}
