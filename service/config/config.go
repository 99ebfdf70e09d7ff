package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/livefile"
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
	// Rate (requests_per_unit), Period (unit or window), Burst and
	// FailureMode (failure_mode: FailClosed, FailError, FailOpen or FailUncounted, or FailDefault, the
	// process's default, when unset) and Counting (counting: CountAdmitted
	// or CountAll; see CountingSet). It is the zero Limit when Unlimited.
	Limit sluice.Limit
	// CountingSet says that the rule sets its counting (`counting:`);
	// otherwise the service's default applies (sluice serve --counting),
	// except to a sliding_log rule, which counts what it admits.
	CountingSet bool
	// Unit is the Name of the rule's Unit ("SECOND", "MINUTE", "HOUR",
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

	// Replaces lists the ConfiguredNames of the rules this rule replaces when
	// both apply to one request.
	Replaces []string
}

// Entry is one key and value of a request descriptor.
type Entry struct{ Key, Value string }

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
	// Detailed reports that Metric carries the request's values: a node of
	// the path has detailed_metric or value_to_metric.
	Detailed bool
}

// Config is a loaded, validated configuration: a set of domains. It is
// immutable and safe for concurrent use.
type Config struct {
	domains map[string]*node
	files   map[string]string // domain -> file it came from (the first, when merged)
	opts    Options
	places  map[*node]place // where each descriptor is written, while loading; nil after
	noLines bool            // the files' lines mean nothing to their authors (xDS resources)
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

// MaxErrors bounds the errors reported for one configuration: past it, the
// files are not read further and a last Error says so.
const MaxErrors = 20

// MaxFileSize bounds a configuration file, in bytes. A path that is not a
// regular file (a named pipe, a device) is an error, found without
// blocking.
const MaxFileSize = 64 << 20

// Parse parses one YAML document, holding one domain, read from the file
// called name (used in error messages only). An error is an Errors listing
// every problem found, in file order, at most MaxErrors. It reads with the
// zero Options.
func Parse(name string, data []byte) (*Config, error) { return Options{}.Parse(name, data) }

// Parse is the package's Parse, read with o.
func (o Options) Parse(name string, data []byte) (*Config, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	c := o.empty()
	var errs Errors
	c.add(name, data, &errs)
	if len(errs) > 0 {
		return nil, errs
	}
	c.places = nil
	return c, nil
}

// Load reads every path: a file, or a directory whose *.yaml and *.yml
// files, subdirectories included, are read as Files lists them. All the
// domains are merged into one Config; a domain defined twice is an error
// (see Options.MergeDomains). An error is an Errors listing the problems of
// every file, in order, at most MaxErrors; a file that cannot be read is an
// Error naming it. It reads with the zero Options.
func Load(paths ...string) (*Config, error) { return Options{}.Load(paths...) }

// Load is the package's Load, read with o.
func (o Options) Load(paths ...string) (*Config, error) {
	if len(paths) == 0 {
		return nil, errors.New("no configuration files given")
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	c := o.empty()
	files, err := o.Files(paths...)
	if err != nil {
		return nil, err
	}
	var errs Errors
	for _, f := range files {
		if len(errs) >= MaxErrors {
			break
		}
		data, err := livefile.Read(f, MaxFileSize)
		if err != nil {
			errs = append(errs, fileError(f, err))
			continue
		}
		c.add(f, data, &errs)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	c.places = nil
	return c, nil
}

// fileError is an error of the file system as an *Error naming the file:
// "ratelimit.yaml: no such file or directory".
func fileError(path string, err error) *Error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &Error{File: pe.Path, Msg: pe.Err.Error()}
	}
	return &Error{File: path, Msg: err.Error()}
}

// Files lists the configuration files that paths name, in the order Load
// reads them: a file as it is; for a directory, its *.yaml and *.yml files
// and those of its subdirectories, as the reference loads every file below
// its runtime directory, in name order. Names starting with "." are skipped
// (editor swap files, Kubernetes' ..data); a file named twice is listed
// once. A directory with no such file is an error.
func Files(paths ...string) ([]string, error) { return Options{}.Files(paths...) }

// Files lists the configuration files that paths name, as the function
// Files does, with o's DotFiles.
func (o Options) Files(paths ...string) ([]string, error) {
	var files []string
	seen := map[string]bool{}
	for _, p := range paths {
		fs, err := expand(p, o.DotFiles)
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
func expand(path string, dots bool) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, Errors{fileError(path, err)}
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	var files []string
	if err := walkDir(path, dots, map[string]bool{}, &files); err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, Errors{{File: path, Msg: "no *.yaml or *.yml files in this directory"}}
	}
	return files, nil
}

// walkDir appends the config files below dir; seen holds the directories
// walked, by their real path, so that a symlink loop ends. dots reads the
// names starting with "." (Options.DotFiles).
func walkDir(dir string, dots bool, seen map[string]bool, files *[]string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return Errors{fileError(dir, err)}
	}
	if seen[real] {
		return nil
	}
	seen[real] = true
	entries, err := os.ReadDir(dir)
	if err != nil {
		return Errors{fileError(dir, err)}
	}
	for _, e := range entries { // sorted by name
		n := e.Name()
		dot := strings.HasPrefix(n, ".")
		if dot && !dots || strings.HasPrefix(n, "..") {
			// Editor swap files; and, even with dots, the names of
			// Kubernetes' atomic writer (..data, ..2026_12_02_...), which
			// hold a second copy of every file of a ConfigMap volume.
			continue
		}
		f := filepath.Join(dir, n)
		st, err := os.Stat(f) // follow symlinks (Kubernetes ConfigMap mounts)
		if err != nil {
			return Errors{fileError(f, err)}
		}
		if dot && st.IsDir() && e.Type()&fs.ModeSymlink != 0 {
			continue // as envoyproxy/ratelimit's walk, which does not follow it
		}
		switch ext := filepath.Ext(n); {
		case st.IsDir():
			if err := walkDir(f, dots, seen, files); err != nil {
				return err
			}
		case st.Mode().IsRegular() && (ext == ".yaml" || ext == ".yml"):
			*files = append(*files, f)
		}
	}
	return nil
}

// add parses one file and adds its domain, or appends its errors to errs
// (up to MaxErrors in all).
func (c *Config) add(name string, data []byte, errs *Errors) {
	if c.places == nil {
		c.places = map[*node]place{}
	}
	p := &parser{file: name, max: MaxErrors - len(*errs), opts: c.opts, places: c.places, noLines: c.noLines}
	if c.opts.MergeDomains {
		// A domain already read takes this file's descriptors at its
		// first level, as checked by its addChild. A file with an error
		// leaves some of them there: the Config is not used then.
		p.domainRoot = func(domain string) *node { return c.domains[domain] }
	}
	domain, root, line := p.parseFile(data)
	*errs = append(*errs, p.errs...)
	if p.stopped && len(*errs) >= MaxErrors {
		*errs = append(*errs, &Error{File: name, Msg: fmt.Sprintf("stopped after %d errors: fix these and run again for the rest", MaxErrors)})
	}
	if root == nil {
		return
	}
	if prev, ok := c.files[domain]; ok {
		if c.opts.MergeDomains {
			return // merged into the domain's root as it was parsed
		}
		*errs = append(*errs, &Error{File: name, Line: line, Path: "domain", Msg: fmt.Sprintf("duplicate domain %q (already defined in %s)", domain, prev)})
		return
	}
	c.domains[domain] = root
	c.files[domain] = name
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

// Errors is every problem found in a configuration, in file order, one
// *Error a line.
type Errors []*Error

func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the errors, for errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
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
