package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
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
// A FlagSet with --reference-env (serve's) then takes the flags that
// neither set from envoyproxy/ratelimit's environment variables.
func parse(fs *flag.FlagSet, args []string) (code int, done bool) {
	return parseEnv(fs, args, os.LookupEnv)
}

// parseEnv is parse with the environment read through lookup.
func parseEnv(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) (code int, done bool) {
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		v, ok := lookup(name)
		if !ok || envErr != nil {
			return
		}
		if err := fs.Set(f.Name, v); err != nil { // fs.Set: Visit sees it as set
			envErr = fmt.Errorf("invalid value %q for %s: %v", v, name, err)
		}
	})
	if envErr != nil {
		fmt.Fprintf(fs.Output(), "sluice %s: %v (see sluice %s -h)\n", fs.Name(), envErr, fs.Name())
		return 2, true
	}
	// The flag package prints a bad flag's error and then the whole help;
	// print one line that points at the help instead.
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return 0, true
	case err != nil:
		fmt.Fprintf(out, "sluice %s: %v (see sluice %s -h)\n", fs.Name(), err, fs.Name())
		return 2, true
	}
	if f := fs.Lookup("reference-env"); f != nil {
		if m, ok := f.Value.(*refMode); ok {
			set := map[string]bool{}
			fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
			if err := m.apply(fs, set, lookup); err != nil {
				fmt.Fprintf(out, "sluice %s: %v\n", fs.Name(), err)
				return 2, true
			}
		}
	}
	return 0, false
}

// byteSize is a flag.Value of bytes written as a plain number or with a unit:
// 64MiB, 256MB, 1GiB, 65536.
type byteSize uint64

var byteUnits = []struct {
	name string
	n    uint64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
}

func (b *byteSize) Set(s string) error {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	num, unit := s[:i], strings.TrimSpace(s[i:])
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return errors.New("want bytes, e.g. 64MiB, 256MB or 1048576")
	}
	mult := uint64(1)
	if unit != "" {
		mult = 0
		for _, u := range byteUnits {
			if strings.EqualFold(unit, u.name) {
				mult = u.n
				break
			}
		}
		if mult == 0 {
			return fmt.Errorf("unknown unit %q, want B, KB, MB, GB, TB, KiB, MiB, GiB or TiB", unit)
		}
	}
	if n > math.MaxUint64/mult {
		return errors.New("too large")
	}
	*b = byteSize(n * mult)
	return nil
}

// String writes b with the unit that divides it into the smallest number.
func (b *byteSize) String() string {
	if b == nil || *b == 0 {
		return "0"
	}
	n, name := uint64(*b), "B"
	for _, u := range byteUnits {
		if uint64(*b)%u.n == 0 && uint64(*b)/u.n < n {
			n, name = uint64(*b)/u.n, u.name
		}
	}
	return strconv.FormatUint(n, 10) + name
}
