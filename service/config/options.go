package config

import "fmt"

// DefaultMaxEntries is Options.MaxEntries when unset: the most entries of
// one request descriptor that sluice serve accepts by default
// (--max-descriptor-entries).
const DefaultMaxEntries = 16

// Options are the choices in reading a configuration that its files leave
// open. The zero Options are sluice serve's defaults.
type Options struct {
	// Wildcards says which '*' of a descriptor value is a wildcard:
	// WildcardsAnywhere (the default, envoyproxy/ratelimit's current
	// matching) or WildcardsTrailing (its earlier matching, where only a
	// trailing '*' is one).
	Wildcards Wildcards
	// MergeDomains lets several files define one domain, as
	// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does: the descriptors of
	// a later file (in the order Files lists them) join the domain's first
	// level, after those already read. Only the first level merges: a
	// descriptor with the same key and value (or the same key and no
	// value) in two files is a duplicate, whatever their children. Without
	// it, a domain defined twice is an error.
	MergeDomains bool
	// MaxEntries is the most entries a request descriptor may have (sluice
	// serve's --max-descriptor-entries): a limit deeper in a domain's tree
	// could never apply, and is an error. 0 means DefaultMaxEntries.
	MaxEntries int
	// DotFiles reads, in a directory, the files and subdirectories whose
	// names start with "." too, as envoyproxy/ratelimit does with
	// RUNTIME_IGNOREDOTFILES=false: a dot file of *.yaml or *.yml is a
	// configuration file, a dot directory is walked; a dot name that is a
	// symbolic link to a directory is not, as that service's walk does not
	// follow it. Names starting with ".." (Kubernetes' atomic writer:
	// ..data and the timestamped directory it points to, a second copy
	// of every file of a ConfigMap volume) are always skipped, so that a
	// ConfigMap mount loads once. Without it, every name starting with
	// "." is skipped.
	DotFiles bool
}

func (o Options) validate() error {
	if o.Wildcards != WildcardsAnywhere && o.Wildcards != WildcardsTrailing {
		return fmt.Errorf("config: unknown %v", o.Wildcards)
	}
	if o.MaxEntries < 0 {
		return fmt.Errorf("config: MaxEntries %d: want 0 (the default, %d) or more", o.MaxEntries, DefaultMaxEntries)
	}
	return nil
}

func (o Options) maxEntries() int {
	if o.MaxEntries == 0 {
		return DefaultMaxEntries
	}
	return o.MaxEntries
}

// empty is a Config without domains, read with o.
func (o Options) empty() *Config {
	return &Config{domains: map[string]*node{}, files: map[string]string{}, opts: o}
}
