package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// newFlagSet returns a FlagSet whose -h prints synopsis, about and the
// flags with their environment variables.
func newFlagSet(name, synopsis, about string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: %s\n\n%s\n", synopsis, about)
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintf(out, "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// envName is the environment variable of a flag: --failure-mode is
// SLUICE_FAILURE_MODE.
func envName(flagName string) string {
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// withEnv appends the environment variable to every flag's usage; call it
// after defining the flags and before parse.
func withEnv(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) { f.Usage += " (env " + envName(f.Name) + ")" })
}

// parse sets the flags from the environment, then from args. It returns
// done with the exit code when the command must stop (-h, a bad flag).
func parse(fs *flag.FlagSet, args []string) (code int, done bool) {
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		v, ok := os.LookupEnv(name)
		if !ok || envErr != nil {
			return
		}
		if err := f.Value.Set(v); err != nil {
			envErr = fmt.Errorf("invalid value %q for %s: %v", v, name, err)
		}
	})
	if envErr != nil {
		fmt.Fprintf(fs.Output(), "sluice %s: %v\n", fs.Name(), envErr)
		return 2, true
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	return 0, false
}
