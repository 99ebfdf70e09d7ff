package config

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluicehq/sluice"
)

// Rule is one configured limit, resolved and validated.
type Rule struct {
	// Name is the rate_limit's `name` when set, else a stable name built from
	// the domain and the descriptor path, as the reference's stats keys:
	// "domain.key_value.key2" (with "#i" appended for the i-th entry of a
	// rate_limits list). Use it as the metrics label.
	Name string
	// ConfiguredName is the rate_limit's own `name`, "" when unset: what
	// other rules' Replaces refer to, and what the reference reports in an
	// RLS answer's current_limit.name.
	ConfiguredName string
	// Limit is the algorithm (FixedWindow unless `algorithm` says otherwise),
	// Rate (requests_per_unit), Period (unit or window) and Burst. It is the
	// zero Limit when Unlimited.
	Limit sluice.Limit
	// Unit is the reference's unit in upper case ("SECOND", "MINUTE", "HOUR",
	// "DAY", "WEEK", "MONTH", "YEAR"), or "" when the period came from the
	// `window` extension or the rule is unlimited. RLS answers report it in
	// current_limit. With the reference's unit_multiplier, Limit.Period is
	// the unit times the multiplier.
	Unit string
	// Deny is set for requests_per_unit: 0, the reference's way to block a
	// descriptor (its README's "black list IP" example): every request is
	// over the limit. Limit then has Rate 0, which no store accepts: answer
	// OVER_LIMIT (remaining 0, reset at the end of the fixed window) without
	// calling the store.
	Deny bool
	// Override marks the rule of a request's own limit (an RLS descriptor's
	// RateLimitOverride), made per request, never configured.
	Override bool

	Unlimited      bool // unlimited: true: always admitted, never counted
	ShadowMode     bool // shadow_mode: counted and reported, never denied
	QuotaMode      bool // quota_mode: over-limit does not make the overall code OVER_LIMIT
	DetailedMetric bool // detailed_metric: metrics carry the request's values
	ValueToMetric  bool // value_to_metric: metrics carry the value matched by a wildcard/default
	ShareThreshold bool // share_threshold: values matching a wildcard share one counter

	// FailureMode is the failure_mode extension: "" (the process default),
	// "open" or "closed".
	FailureMode string
	// Replaces lists the ConfiguredNames of the rules this rule replaces when
	// both apply to one request.
	Replaces []string
}

// Descriptor is one entry of a request descriptor.
type Descriptor struct{ Key, Value string }

// Match is the result of matching one request descriptor.
type Match struct {
	// Rules are all limits on the matched node: one, or several with the
	// rate_limits extension. Empty when nothing matched or the matched node
	// has no limit.
	Rules []*Rule
	// Key is the stable counting key of this match: the domain and every
	// entry of the request descriptor with the request's values (wildcard and
	// default matches count per actual value, as the reference does), except
	// that a share_threshold wildcard match uses the wildcard pattern so that
	// all matching values (and the pattern itself as a value) share one
	// counter. Distinct (domain, path, values) give distinct keys. Empty when
	// Rules is empty.
	Key string
	// Metric is the stats name of the match, as the reference builds it: the
	// rule's path name, extended with the request's values for
	// detailed_metric and value_to_metric nodes. Label metrics with the
	// Rule.Name unless the operator asked for these detailed names.
	Metric string
}

// Config is a loaded, validated configuration: a set of domains. It is
// immutable and safe for concurrent use.
type Config struct {
	domains map[string]*node
	files   map[string]string // domain -> file it came from
}

// Domains returns the configured domains, sorted.
func (c *Config) Domains() []string {
	ds := make([]string, 0, len(c.domains))
	for d := range c.domains {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds
}

// Parse parses one YAML document, holding one domain, read from the file
// called name (used in error messages only).
func Parse(name string, data []byte) (*Config, error) {
	c := &Config{domains: map[string]*node{}, files: map[string]string{}}
	if err := c.add(name, data); err != nil {
		return nil, err
	}
	return c, nil
}

// Load reads every path: a file, or a directory whose *.yaml and *.yml files
// (not its subdirectories or hidden files) are read in name order. All the
// domains are merged into one Config; a domain defined twice is an error.
func Load(paths ...string) (*Config, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("config: no files to load")
	}
	c := &Config{domains: map[string]*node{}, files: map[string]string{}}
	files, err := Files(paths...)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if err := c.add(f, data); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Files lists the configuration files that paths name, in the order Load
// reads them: a file as it is; for a directory, its *.yaml and *.yml files
// and those of its subdirectories, as the reference loads every file below
// its runtime directory, in name order. Names starting with "." are skipped
// (editor swap files, Kubernetes' ..data); a file named twice is listed
// once. A directory with no such file is an error.
func Files(paths ...string) ([]string, error) {
	var files []string
	seen := map[string]bool{}
	for _, p := range paths {
		fs, err := expand(p)
		if err != nil {
			return nil, err
		}
		for _, f := range fs {
			if f = filepath.Clean(f); !seen[f] { // a file named twice is read once
				seen[f] = true
				files = append(files, f)
			}
		}
	}
	return files, nil
}

// expand lists the config files of path.
func expand(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	var files []string
	if err := walkDir(path, map[string]bool{}, &files); err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("config: %s: no *.yaml or *.yml files", path)
	}
	return files, nil
}

// walkDir appends the config files below dir; seen holds the directories
// walked, by their real path, so that a symlink loop ends.
func walkDir(dir string, seen map[string]bool, files *[]string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if seen[real] {
		return nil
	}
	seen[real] = true
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	for _, e := range entries { // sorted by name
		n := e.Name()
		if strings.HasPrefix(n, ".") {
			continue // editor swap files, Kubernetes ..data
		}
		f := filepath.Join(dir, n)
		st, err := os.Stat(f) // follow symlinks (Kubernetes ConfigMap mounts)
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		switch ext := filepath.Ext(n); {
		case st.IsDir():
			if err := walkDir(f, seen, files); err != nil {
				return err
			}
		case st.Mode().IsRegular() && (ext == ".yaml" || ext == ".yml"):
			*files = append(*files, f)
		}
	}
	return nil
}

// add parses one file and adds its domain.
func (c *Config) add(name string, data []byte) error {
	p := &parser{file: name}
	domain, root, line, err := p.parseFile(data)
	if err != nil {
		return err
	}
	if prev, ok := c.files[domain]; ok {
		return &Error{File: name, Line: line, Path: "domain", Msg: fmt.Sprintf("duplicate domain %q (already defined in %s)", domain, prev)}
	}
	c.domains[domain] = root
	c.files[domain] = name
	return nil
}

// Error is a configuration error: the file, the line and the key path of the
// offending value, as in
//
//	config/foo.yaml:12: descriptors[0].rate_limit.unit: unknown unit "fortnight"
type Error struct {
	File string
	Line int    // 1-based; 0 when the error concerns the whole file
	Path string // key path such as descriptors[0].rate_limit.unit; "" for the whole file
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}
