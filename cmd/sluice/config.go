package main

import (
	"errors"
	"flag"
	"time"

	"github.com/sluicehq/sluice/service/source"
)

// configFlags are the configuration serve loads, and how it reloads it.
type configFlags struct {
	file           string
	reloadInterval time.Duration
}

func (g *configFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.file, "config", "", "configuration `FILE or DIR` (envoyproxy/ratelimit YAML); the built-in example when empty")
	fs.DurationVar(&g.reloadInterval, "reload-interval", time.Second, "how often to check the configuration files for changes; 0 reloads on SIGHUP only")
}

// errDurations is the one message for the durations of the process's life,
// which configFlags and shutdownFlags check.
var errDurations = errors.New("--reload-interval and --drain-delay must be >= 0, --shutdown-timeout > 0")

func (g *configFlags) validate() error {
	if g.reloadInterval < 0 {
		return errDurations
	}
	return nil
}

// files is the configuration's source with these flags: the files of
// --config, reloaded every --reload-interval when they change, or the
// built-in example.
func (g *configFlags) files() *source.Files {
	f := &source.Files{Interval: g.reloadInterval}
	if g.file != "" {
		f.Paths = []string{g.file}
	}
	return f
}

// name is the configuration's name in the log.
func (g *configFlags) name() string {
	if g.file == "" {
		return "built-in example"
	}
	return g.file
}
