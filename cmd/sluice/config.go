package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/source"
)

// configFlags are the configuration serve loads, and how it reloads it.
type configFlags struct {
	file           string
	reloadInterval time.Duration
	readyNeeds     bool // --ready-needs-config
	read           readFlags
}

func (g *configFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.file, "config", "", "configuration `FILE or DIR` (envoyproxy/ratelimit YAML); the built-in example when empty")
	fs.DurationVar(&g.reloadInterval, "reload-interval", time.Second, "how often to check the configuration files for changes; 0 reloads on SIGHUP only")
	fs.BoolVar(&g.readyNeeds, "ready-needs-config", false, "report not ready (/readyz, /healthcheck and gRPC health) until a configuration with at least one domain is in force, and while one with none is (the reference's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)")
	g.read.register(fs)
}

// readFlags are how a configuration is read where its files leave a
// choice (config.Options); serve and check share them.
type readFlags struct {
	wildcards    string
	mergeDomains bool
	dotFiles     bool
	maxEntries   int // serve's --max-descriptor-entries (check's own flag)
}

func (g *readFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.wildcards, "wildcards", "anywhere", "which '*' of a descriptor value is a wildcard (`mode`): anywhere (any run of bytes, as envoyproxy/ratelimit's current versions) or trailing (only a '*' ending the value, as its earlier versions; any other '*' is literal)")
	fs.BoolVar(&g.dotFiles, "config-dot-files", false, "in a --config directory, read the files and directories whose names start with '.' too, but not a '.' symbolic link to a directory, nor names starting with '..' (Kubernetes' ConfigMap copies) (envoyproxy/ratelimit's RUNTIME_IGNOREDOTFILES=false)")
	fs.BoolVar(&g.mergeDomains, "merge-domains", false, "let several configuration files define one domain: their first-level descriptors merge (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)")
}

// options are the config.Options of the flags.
func (g *readFlags) options() (config.Options, error) {
	w, err := config.ParseWildcards(g.wildcards)
	if err != nil {
		return config.Options{}, fmt.Errorf("--%v", err)
	}
	return config.Options{Wildcards: w, MergeDomains: g.mergeDomains, MaxEntries: g.maxEntries, DotFiles: g.dotFiles}, nil
}

// errDurations is the one message for the durations of the process's life,
// which configFlags and shutdownFlags check.
var errDurations = errors.New("--reload-interval and --drain-delay must be >= 0, --shutdown-timeout > 0")

func (g *configFlags) validate() error {
	if g.reloadInterval < 0 {
		return errDurations
	}
	_, err := g.read.options()
	return err
}

// files is the configuration's source with these flags: the files of
// --config, reloaded every --reload-interval when they change, or the
// built-in example.
func (g *configFlags) files() *source.Files {
	o, _ := g.read.options() // checked by validate
	f := &source.Files{Interval: g.reloadInterval, Options: o}
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
