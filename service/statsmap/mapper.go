package statsmap

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Type is the type of a statsd statistic, as a mapping's
// match_metric_type names it.
type Type string

const (
	Counter  Type = "counter"
	Gauge    Type = "gauge"
	Observer Type = "observer" // a timer
)

// The bounds of a mapping file, checked by Parse: each keeps what one file
// may cost at start and per statistic within reach of its size.
const (
	MaxMappingBytes = 1 << 20 // the file
	MaxMappings     = 1000    // its mappings; an unmapped statistic tries each
	MaxRegexBytes   = 1024    // a regex mapping's match
	MaxLabels       = 32      // a mapping's labels
	MaxBuckets      = 256     // a histogram's buckets, at the top or in histogram_options
	MaxQuantiles    = 32      // a summary's quantiles
	MaxNativeMax    = 4096    // native_histogram_max_buckets
	MaxAgeBuckets   = 64      // summary_options' age_buckets
	MaxBufCap       = 65536   // summary_options' buf_cap
)

var (
	// A glob's components: the first cannot start with a digit; '*' is a
	// whole component.
	globRE       = regexp.MustCompile(`^(\*|[a-zA-Z_]([a-zA-Z0-9_\-])*)(\.\*|\.[a-zA-Z0-9_]([a-zA-Z0-9_\-])*)*$`)
	nameRE       = regexp.MustCompile(`^([a-zA-Z_]|(\$\{?\d+\}?))([a-zA-Z0-9_]|(\$\{?\d+\}?))*$`)
	labelRE      = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]+$`)
	globCaptures = regexp.MustCompile(`\$\{?([a-zA-Z0-9_\$]+)\}?`)
)

// Mapper maps statsd names to Prometheus names and labels with
// statsd_exporter's mapping language (https://github.com/prometheus/statsd_exporter#metric-mapping-and-configuration):
// glob mappings are tried first, in file order (or, with
// glob_disable_ordering, the most specific from the left), then regex
// mappings in file order; the first that matches, with its
// match_metric_type, decides. It is immutable and safe for concurrent use.
type Mapper struct {
	defaults  defaults
	unordered bool
	globs     []*mapping
	regexes   []*mapping
}

// defaults are a file's defaults, completed.
type defaults struct {
	observer  string // histogram or summary
	buckets   []float64
	factor    float64
	maxNative uint32
	quantiles []Objective
	summary   summaryOpts
	ttl       time.Duration
}

// Objective is a summary's quantile and its error.
type Objective struct {
	Quantile float64 `yaml:"quantile"`
	Error    float64 `yaml:"error"`
}

type summaryOpts struct {
	maxAge     time.Duration
	ageBuckets uint32
	bufCap     uint32
}

// mapping is one mapping of the file, completed with the defaults.
type mapping struct {
	match    string
	glob     []string       // the glob's components
	captures int            // the glob's '*'
	re       *regexp.Regexp // a regex mapping's
	name     string
	labels   [][2]string // name, template; in file order
	mtype    Type        // "" for any
	drop     bool
	help     string
	ttl      time.Duration
	scale    float64 // with scaled: the factor of every value
	scaled   bool
	observer string // histogram or summary, "" for the default
	hist     histOpts
	quant    []Objective
	summary  summaryOpts
}

type histOpts struct {
	buckets   []float64
	factor    float64
	maxNative uint32
}

// The file's YAML. Unknown keys are refused.
type fileYAML struct {
	Defaults defaultsYAML  `yaml:"defaults"`
	Mappings []mappingYAML `yaml:"mappings"`
}

type defaultsYAML struct {
	ObserverType        string        `yaml:"observer_type"`
	TimerType           string        `yaml:"timer_type"`
	Buckets             []float64     `yaml:"buckets"`
	Quantiles           []Objective   `yaml:"quantiles"`
	MatchType           string        `yaml:"match_type"`
	GlobDisableOrdering bool          `yaml:"glob_disable_ordering"`
	TTL                 time.Duration `yaml:"ttl"`
	SummaryOptions      summaryYAML   `yaml:"summary_options"`
	HistogramOptions    histogramYAML `yaml:"histogram_options"`
}

type summaryYAML struct {
	Quantiles  []Objective   `yaml:"quantiles"`
	MaxAge     time.Duration `yaml:"max_age"`
	AgeBuckets uint32        `yaml:"age_buckets"`
	BufCap     uint32        `yaml:"buf_cap"`
}

type histogramYAML struct {
	Buckets      []float64 `yaml:"buckets"`
	NativeFactor float64   `yaml:"native_histogram_bucket_factor"`
	NativeMax    uint32    `yaml:"native_histogram_max_buckets"`
}

type mappingYAML struct {
	Match            string         `yaml:"match"`
	Name             string         `yaml:"name"`
	Labels           yaml.Node      `yaml:"labels"`
	HonorLabels      bool           `yaml:"honor_labels"`
	ObserverType     string         `yaml:"observer_type"`
	TimerType        string         `yaml:"timer_type"`
	Buckets          []float64      `yaml:"buckets"`
	Quantiles        []Objective    `yaml:"quantiles"`
	MatchType        string         `yaml:"match_type"`
	Help             string         `yaml:"help"`
	Action           string         `yaml:"action"`
	MatchMetricType  string         `yaml:"match_metric_type"`
	TTL              time.Duration  `yaml:"ttl"`
	SummaryOptions   *summaryYAML   `yaml:"summary_options"`
	HistogramOptions *histogramYAML `yaml:"histogram_options"`
	Scale            *float64       `yaml:"scale"`
}

// The defaults of statsd_exporter: Prometheus's default buckets, a native
// histogram factor of 1.1 with at most 256 buckets, the quantiles 0.5,
// 0.9 and 0.99.
var (
	defBuckets   = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	defQuantiles = []Objective{{0.5, 0.05}, {0.9, 0.01}, {0.99, 0.001}}
)

// Parse reads a mapping file. Keys that statsd_exporter does not know are
// refused, as are values it would refuse; the error names the mapping.
func Parse(data []byte) (*Mapper, error) { return parse(data, true) }

// ParseLenient reads a mapping file as statsd_exporter's own loader does:
// keys outside the mapping language are ignored (a misspelling is not
// told); values it would refuse are still errors.
func ParseLenient(data []byte) (*Mapper, error) { return parse(data, false) }

func parse(data []byte, strict bool) (*Mapper, error) {
	if len(data) > MaxMappingBytes {
		return nil, fmt.Errorf("mapping file of %d bytes, more than %d", len(data), MaxMappingBytes)
	}
	var f fileYAML
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(strict)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("mapping file: %v", err)
	}
	if len(f.Mappings) > MaxMappings {
		return nil, fmt.Errorf("mappings: %d, more than %d", len(f.Mappings), MaxMappings)
	}
	if err := checkDefaults(&f.Defaults); err != nil {
		return nil, fmt.Errorf("defaults: %v", err)
	}
	m := &Mapper{unordered: f.Defaults.GlobDisableOrdering}
	d := &m.defaults
	var err error
	if d.observer, err = observerType(f.Defaults.ObserverType, f.Defaults.TimerType); err != nil {
		return nil, fmt.Errorf("defaults: %v", err)
	}
	d.buckets = f.Defaults.HistogramOptions.Buckets
	if len(d.buckets) == 0 {
		d.buckets = f.Defaults.Buckets
	}
	if len(d.buckets) == 0 {
		d.buckets = defBuckets
	}
	d.factor, d.maxNative = f.Defaults.HistogramOptions.NativeFactor, f.Defaults.HistogramOptions.NativeMax
	if d.factor == 0 {
		d.factor = 1.1
	}
	if d.maxNative == 0 {
		d.maxNative = 256
	}
	d.quantiles = f.Defaults.SummaryOptions.Quantiles
	if len(d.quantiles) == 0 {
		d.quantiles = f.Defaults.Quantiles
	}
	if len(d.quantiles) == 0 {
		d.quantiles = defQuantiles
	}
	d.summary = summaryOpts{f.Defaults.SummaryOptions.MaxAge, f.Defaults.SummaryOptions.AgeBuckets, f.Defaults.SummaryOptions.BufCap}
	d.ttl = f.Defaults.TTL
	defMatch, err := matchType(f.Defaults.MatchType, "glob")
	if err != nil {
		return nil, fmt.Errorf("defaults: %v", err)
	}
	for i := range f.Mappings {
		mp, err := m.mapping(&f.Mappings[i], defMatch)
		if err != nil {
			return nil, fmt.Errorf("mappings[%d] (match %q): %v", i, f.Mappings[i].Match, err)
		}
		if mp.re == nil {
			m.globs = append(m.globs, mp)
		} else {
			m.regexes = append(m.regexes, mp)
		}
	}
	return m, nil
}

func (m *Mapper) mapping(y *mappingYAML, defMatch string) (*mapping, error) {
	mp := &mapping{match: y.Match, name: y.Name, help: y.Help, ttl: y.TTL}
	if y.Name == "" {
		return nil, errors.New("no name")
	}
	if !nameRE.MatchString(y.Name) {
		return nil, fmt.Errorf("name %q: want letters, digits, '_' and $n references, not starting with a digit", y.Name)
	}
	labels, err := labelList(&y.Labels)
	if err != nil {
		return nil, err
	}
	if len(labels) > MaxLabels {
		return nil, fmt.Errorf("labels: %d, more than %d", len(labels), MaxLabels)
	}
	for i, l := range labels {
		if !labelRE.MatchString(l[0]) {
			return nil, fmt.Errorf("label name %q: want [a-zA-Z_][a-zA-Z0-9_]+", l[0])
		}
		if strings.HasPrefix(l[0], "__") {
			return nil, fmt.Errorf("label name %q: names starting with __ are Prometheus's own", l[0])
		}
		for _, o := range labels[:i] {
			if o[0] == l[0] {
				return nil, fmt.Errorf("label name %q: twice", l[0])
			}
		}
	}
	mp.labels = labels
	mt, err := matchType(y.MatchType, defMatch)
	if err != nil {
		return nil, err
	}
	if mt == "glob" {
		if !globRE.MatchString(y.Match) {
			return nil, fmt.Errorf("glob %q: want dot-separated names or '*'", y.Match)
		}
		mp.glob = strings.Split(y.Match, ".")
		for _, c := range mp.glob {
			if c == "*" {
				mp.captures++
			}
		}
	} else if len(y.Match) > MaxRegexBytes {
		return nil, fmt.Errorf("regex of %d bytes, more than %d", len(y.Match), MaxRegexBytes)
	} else if mp.re, err = regexp.Compile(y.Match); err != nil {
		return nil, fmt.Errorf("regex: %v", err)
	}
	switch y.Action {
	case "", "map":
	case "drop":
		mp.drop = true
	default:
		return nil, fmt.Errorf("action %q: want map or drop", y.Action)
	}
	switch y.MatchMetricType {
	case "":
	case "counter", "gauge", "observer":
		mp.mtype = Type(y.MatchMetricType)
	case "timer":
		mp.mtype = Observer
	default:
		return nil, fmt.Errorf("match_metric_type %q: want counter, gauge or observer", y.MatchMetricType)
	}
	if y.Scale != nil {
		mp.scale, mp.scaled = *y.Scale, true
	}
	if y.TTL == 0 {
		mp.ttl = m.defaults.ttl
	}
	if mp.observer, err = observerType(y.ObserverType, y.TimerType); err != nil {
		return nil, err
	}
	if mp.observer == "" {
		mp.observer = m.defaults.observer
	}
	if err := checkOptions(y.Buckets, y.Quantiles, y.HistogramOptions, y.SummaryOptions); err != nil {
		return nil, err
	}
	if err := m.observerOptions(mp, y); err != nil {
		return nil, err
	}
	// A timer of this mapping is a histogram's or a summary's observation,
	// whose own label le or quantile it cannot have.
	if mp.mtype == "" || mp.mtype == Observer {
		own := "quantile"
		if mp.observer == "histogram" {
			own = "le"
		}
		for _, l := range mp.labels {
			if l[0] == own {
				return nil, fmt.Errorf("label name %q: the %s's own", own, observerName(mp.observer))
			}
		}
	}
	return mp, nil
}

// observerName is the kind of observer a timer of a mapping with observer
// o makes.
func observerName(o string) string {
	if o == "histogram" {
		return "histogram"
	}
	return "summary"
}

func checkDefaults(d *defaultsYAML) error {
	return checkOptions(d.Buckets, d.Quantiles, &d.HistogramOptions, &d.SummaryOptions)
}

// checkOptions checks the values of a histogram's or a summary's options
// that Prometheus would refuse, or that would cost beyond the bounds.
func checkOptions(buckets []float64, quantiles []Objective, h *histogramYAML, s *summaryYAML) error {
	if err := checkBuckets("buckets", buckets); err != nil {
		return err
	}
	if err := checkQuantiles("quantiles", quantiles); err != nil {
		return err
	}
	if h != nil {
		if err := checkBuckets("histogram_options.buckets", h.Buckets); err != nil {
			return err
		}
		if h.NativeMax > MaxNativeMax {
			return fmt.Errorf("histogram_options.native_histogram_max_buckets %d: more than %d", h.NativeMax, MaxNativeMax)
		}
		if math.IsNaN(h.NativeFactor) || math.IsInf(h.NativeFactor, 0) || h.NativeFactor < 0 {
			return fmt.Errorf("histogram_options.native_histogram_bucket_factor %v: want a finite number, 0 or more", h.NativeFactor)
		}
	}
	if s != nil {
		if err := checkQuantiles("summary_options.quantiles", s.Quantiles); err != nil {
			return err
		}
		if s.MaxAge < 0 {
			return fmt.Errorf("summary_options.max_age %v: negative", s.MaxAge)
		}
		if s.AgeBuckets > MaxAgeBuckets {
			return fmt.Errorf("summary_options.age_buckets %d: more than %d", s.AgeBuckets, MaxAgeBuckets)
		}
		if s.BufCap > MaxBufCap {
			return fmt.Errorf("summary_options.buf_cap %d: more than %d", s.BufCap, MaxBufCap)
		}
	}
	return nil
}

func checkBuckets(field string, b []float64) error {
	if len(b) > MaxBuckets {
		return fmt.Errorf("%s: %d, more than %d", field, len(b), MaxBuckets)
	}
	for i, x := range b {
		if math.IsNaN(x) {
			return fmt.Errorf("%s[%d]: not a number", field, i)
		}
		if i > 0 && x <= b[i-1] {
			return fmt.Errorf("%s[%d] %v: want each bucket above the one before", field, i, x)
		}
	}
	return nil
}

func checkQuantiles(field string, q []Objective) error {
	if len(q) > MaxQuantiles {
		return fmt.Errorf("%s: %d, more than %d", field, len(q), MaxQuantiles)
	}
	for i, o := range q {
		if !(o.Quantile >= 0 && o.Quantile <= 1) {
			return fmt.Errorf("%s[%d].quantile %v: want 0 to 1", field, i, o.Quantile)
		}
		if !(o.Error >= 0 && o.Error <= 1) {
			return fmt.Errorf("%s[%d].error %v: want 0 to 1", field, i, o.Error)
		}
	}
	return nil
}

// observerOptions completes a mapping's histogram or summary options with
// the defaults, refusing the options of the other kind.
func (m *Mapper) observerOptions(mp *mapping, y *mappingYAML) error {
	d := &m.defaults
	mp.hist = histOpts{d.buckets, d.factor, d.maxNative}
	mp.quant, mp.summary = d.quantiles, d.summary
	if y.HistogramOptions != nil && len(y.HistogramOptions.Buckets) > 0 && len(y.Buckets) > 0 {
		return errors.New("buckets both at the top and in histogram_options")
	}
	if y.SummaryOptions != nil && len(y.SummaryOptions.Quantiles) > 0 && len(y.Quantiles) > 0 {
		return errors.New("quantiles both at the top and in summary_options")
	}
	switch mp.observer {
	case "histogram":
		if y.SummaryOptions != nil {
			return errors.New("summary_options on a histogram")
		}
		if len(y.Buckets) > 0 {
			mp.hist.buckets = y.Buckets
		}
		if h := y.HistogramOptions; h != nil {
			if len(h.Buckets) > 0 {
				mp.hist.buckets = h.Buckets
			}
			if h.NativeFactor > 0 {
				mp.hist.factor = h.NativeFactor
			}
			if h.NativeMax > 0 {
				mp.hist.maxNative = h.NativeMax
			}
		}
	case "summary":
		if y.HistogramOptions != nil {
			return errors.New("histogram_options on a summary")
		}
		if len(y.Quantiles) > 0 {
			mp.quant = y.Quantiles
		}
		if s := y.SummaryOptions; s != nil {
			if len(s.Quantiles) > 0 {
				mp.quant = s.Quantiles
			}
			if s.MaxAge != 0 {
				mp.summary.maxAge = s.MaxAge
			}
			if s.AgeBuckets != 0 {
				mp.summary.ageBuckets = s.AgeBuckets
			}
			if s.BufCap != 0 {
				mp.summary.bufCap = s.BufCap
			}
		}
	}
	return nil
}

// labelList reads a mapping's labels, in file order.
func labelList(n *yaml.Node) ([][2]string, error) {
	if n.Kind == 0 {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("labels: want a map of label names to values (line %d)", n.Line)
	}
	var out [][2]string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("labels: want name: value (line %d)", k.Line)
		}
		out = append(out, [2]string{k.Value, v.Value})
	}
	return out, nil
}

func matchType(s, def string) (string, error) {
	switch s {
	case "":
		return def, nil
	case "glob", "regex":
		return s, nil
	}
	return "", fmt.Errorf("match_type %q: want glob or regex", s)
}

// observerType is observer_type, else the older timer_type: histogram,
// summary, or "" when neither is set.
func observerType(observer, timer string) (string, error) {
	t := observer
	if t == "" {
		t = timer
	}
	switch t {
	case "", "histogram", "summary":
		return t, nil
	}
	return "", fmt.Errorf("observer_type %q: want histogram or summary", t)
}

// A Result is where a statistic goes.
type Result struct {
	// Name is the Prometheus name, before escaping.
	Name string
	// Labels are the mapping's labels, in file order.
	Labels [][2]string
	mp     *mapping
}

// Map finds the mapping of the statistic called name of type t. ok is
// false when no mapping matches.
func (m *Mapper) Map(name string, t Type) (r Result, ok bool) {
	if mp, caps := m.glob(name, t); mp != nil {
		r = Result{Name: expandGlob(mp.name, caps, mp.captures), mp: mp}
		for _, l := range mp.labels {
			r.Labels = append(r.Labels, [2]string{l[0], expandGlob(l[1], caps, mp.captures)})
		}
		return r, true
	}
	for _, mp := range m.regexes {
		idx := mp.re.FindStringSubmatchIndex(name)
		if idx == nil {
			continue
		}
		if mp.mtype != "" && mp.mtype != t {
			continue
		}
		r = Result{Name: string(mp.re.ExpandString(nil, mp.name, name, idx)), mp: mp}
		for _, l := range mp.labels {
			r.Labels = append(r.Labels, [2]string{l[0], string(mp.re.ExpandString(nil, l[1], name, idx))})
		}
		return r, true
	}
	return Result{}, false
}

// glob returns the glob mapping of name and its captures: the first in
// file order, or, unordered, the one whose first '*' comes latest where
// the two differ (a name beats '*').
func (m *Mapper) glob(name string, t Type) (*mapping, []string) {
	var parts []string
	var best *mapping
	var bestCaps []string
	for _, mp := range m.globs {
		if mp.mtype != "" && mp.mtype != t {
			continue
		}
		if parts == nil {
			parts = strings.Split(name, ".")
		}
		caps, ok := matchGlob(mp.glob, parts)
		if !ok {
			continue
		}
		if !m.unordered {
			return mp, caps
		}
		if best == nil || moreSpecific(mp.glob, best.glob) {
			best, bestCaps = mp, caps
		}
	}
	return best, bestCaps
}

func matchGlob(glob, parts []string) ([]string, bool) {
	if len(glob) != len(parts) {
		return nil, false
	}
	var caps []string
	for i, g := range glob {
		switch {
		case g == "*":
			caps = append(caps, parts[i])
		case g != parts[i]:
			return nil, false
		}
	}
	return caps, true
}

// moreSpecific reports whether glob a, matching the same name as b, has a
// name where b first has '*'.
func moreSpecific(a, b []string) bool {
	for i := range a {
		if (a[i] == "*") != (b[i] == "*") {
			return b[i] == "*"
		}
	}
	return false
}

// expandGlob replaces $n and ${n} in tmpl by the n-th capture, as
// statsd_exporter does: a reference that is not a number from 1 to the
// glob's captures (such as $1_total, read as "1_total") is removed.
func expandGlob(tmpl string, caps []string, n int) string {
	if !strings.Contains(tmpl, "$") {
		return tmpl
	}
	return globCaptures.ReplaceAllStringFunc(tmpl, func(ref string) string {
		g := globCaptures.FindStringSubmatch(ref)[1]
		i, err := strconv.Atoi(g)
		if err != nil || i < 1 || i > n || i > len(caps) {
			return ""
		}
		return caps[i-1]
	})
}
