package main

import (
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/service/config"
)

// configFlags are the configuration serve loads, and how it reloads it.
type configFlags struct {
	file           string
	reloadInterval time.Duration
	read           readFlags
}

func (g *configFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.file, "config", "", "configuration `FILE or DIR` (envoyproxy/ratelimit YAML); the built-in example when empty")
	fs.DurationVar(&g.reloadInterval, "reload-interval", time.Second, "how often to check the configuration files for changes; 0 reloads on SIGHUP only")
	g.read.register(fs)
}

// readFlags are how a configuration is read where its files leave a
// choice (config.Options); serve and check share them.
type readFlags struct {
	wildcards    string
	mergeDomains bool
	maxEntries   int // serve's --max-descriptor-entries (check's own flag)
}

func (g *readFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.wildcards, "wildcards", "anywhere", "which '*' of a descriptor value is a wildcard (`mode`): anywhere (any run of bytes, as envoyproxy/ratelimit's current versions) or trailing (only a '*' ending the value, as its earlier versions; any other '*' is literal)")
	fs.BoolVar(&g.mergeDomains, "merge-domains", false, "let several configuration files define one domain: their first-level descriptors merge (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)")
}

// options are the config.Options of the flags.
func (g *readFlags) options() (config.Options, error) {
	w, err := config.ParseWildcards(g.wildcards)
	if err != nil {
		return config.Options{}, fmt.Errorf("--%v", err)
	}
	return config.Options{Wildcards: w, MergeDomains: g.mergeDomains, MaxEntries: g.maxEntries}, nil
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

// paths are the files and directories the reloader watches: none for the
// built-in example.
func (g *configFlags) paths() []string {
	if g.file == "" {
		return nil
	}
	return []string{g.file}
}

// name is the configuration's name in the log.
func (g *configFlags) name() string {
	if g.file == "" {
		return "built-in example"
	}
	return g.file
}

// load loads the configuration and vets it with check. sum is the
// fingerprint of its files, taken before loading them so that a change in
// between is reloaded.
func (g *configFlags) load(check func(*config.Config) error) (c *config.Config, sum [32]byte, err error) {
	if g.file == "" {
		c, err = config.Parse(g.name(), config.DefaultExample())
	} else {
		sum, _ = fingerprint(g.paths())
		o, _ := g.read.options() // checked by validate
		c, err = o.Load(g.file)
	}
	if err == nil {
		err = check(c)
	}
	return c, sum, err
}

// info is the configuration's source and version in sluice_config_info.
func (g *configFlags) info(sum [32]byte) (source, version string) {
	if g.file == "" {
		return "builtin", "example"
	}
	return "file", fileVersion(sum)
}

// fileVersion is the version of a configuration loaded from files in
// sluice_config_info: the start of its fingerprint.
func fileVersion(sum [32]byte) string { return hex.EncodeToString(sum[:6]) }
