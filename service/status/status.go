// Package status serves the service's status page, GET /admin/: the rules
// loaded, the decisions per second of each rule with their over-limit
// share, the keys denied most, the breaker and readiness, and the store's
// latency. The page is server-rendered HTML with inline CSS and inline SVG
// sparklines, loads nothing else, and refreshes itself.
//
// The numbers come from the service's Prometheus metrics, sampled into a
// ring of Samples samples (at most one per Interval: on every Run tick, and
// when the page is asked and the last sample is older than Interval), and
// from the topk summary. Each number is also in a data- attribute of its
// element, for tools and tests.
package status

import (
	"cmp"
	"context"
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/topk"
)

// Bounds and defaults of the page.
const (
	// Samples is the length of the ring of samples (the sparklines' width).
	Samples = 60
	// DefaultInterval is the default time between samples.
	DefaultInterval = 5 * time.Second
	// TopKeys is the number of keys shown per rule.
	TopKeys = 5
	// MaxRulesShown bounds the rules shown in each table.
	MaxRulesShown = 200
)

// Options configure the page. Gatherer is required.
type Options struct {
	// Gatherer is the service's metrics registry (metrics.Metrics.Registry).
	Gatherer prometheus.Gatherer
	// Top is the summary of the keys denied most; nil shows none.
	Top *topk.Tracker
	// Config is the configuration in force; nil shows no rule list.
	Config func() *config.Config
	// Ready reports readiness as /readyz does: nil when ready. A nil Ready
	// shows the service ready.
	Ready func() error
	// BreakerOpen reports whether the shared store's breaker is open, and
	// false for ok when the service has no breaker (no shared store). Nil
	// reads the sluice_breaker_open gauge, showing no breaker when it was
	// never set.
	BreakerOpen func() (open, ok bool)
	// Replica names this process on the page (topk.Replica() when "").
	Replica string
	// Interval is the time between samples, DefaultInterval when 0; at
	// least a second.
	Interval time.Duration
	// Now is the clock, time.Now by default.
	Now func() time.Time
}

// Page is the status page; an http.Handler.
type Page struct {
	o Options

	mu      sync.Mutex
	samples []sample // the ring, oldest first, at most Samples
}

// sample is the metrics at one time.
type sample struct {
	at      time.Time
	rules   map[ruleKey]counts
	buckets []bucket // the store's latency histogram, cumulative
	breaker float64
	hasBrk  bool
}

type ruleKey struct{ domain, rule string }

// counts are a rule's decisions (every result) and over-limit decisions.
type counts struct{ total, over float64 }

type bucket struct{ le, count float64 }

// New returns the page, or an error naming the option that is wrong.
func New(o Options) (*Page, error) {
	if o.Gatherer == nil {
		return nil, errors.New("status: Options.Gatherer is required")
	}
	switch {
	case o.Interval == 0:
		o.Interval = DefaultInterval
	case o.Interval < time.Second:
		return nil, errors.New("status: Options.Interval must be at least 1s")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Replica == "" {
		o.Replica = topk.Replica()
	}
	return &Page{o: o}, nil
}

// Run samples the metrics every Interval until ctx is done.
func (p *Page) Run(ctx context.Context) {
	t := time.NewTicker(p.o.Interval)
	defer t.Stop()
	p.Sample()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.Sample()
		}
	}
}

// Sample takes a sample of the metrics now.
func (p *Page) Sample() {
	s, err := p.gather()
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.push(s)
}

func (p *Page) push(s sample) {
	if len(p.samples) == Samples {
		copy(p.samples, p.samples[1:])
		p.samples = p.samples[:Samples-1]
	}
	p.samples = append(p.samples, s)
}

// gather reads the metrics the page shows.
func (p *Page) gather() (sample, error) {
	fams, err := p.o.Gatherer.Gather()
	if err != nil && len(fams) == 0 {
		return sample{}, err
	}
	s := sample{at: p.o.Now(), rules: map[ruleKey]counts{}}
	for _, f := range fams {
		switch f.GetName() {
		case "sluice_rls_decisions_total":
			for _, m := range f.GetMetric() {
				k := ruleKey{label(m, "domain"), label(m, "rule")}
				if _, ok := s.rules[k]; !ok && len(s.rules) >= MaxRulesShown {
					continue
				}
				c := s.rules[k]
				v := m.GetCounter().GetValue()
				c.total += v
				if label(m, "result") == "over_limit" {
					c.over += v
				}
				s.rules[k] = c
			}
		case "sluice_store_duration_seconds":
			for _, m := range f.GetMetric() {
				for _, b := range m.GetHistogram().GetBucket() {
					s.buckets = append(s.buckets, bucket{b.GetUpperBound(), float64(b.GetCumulativeCount())})
				}
				s.buckets = append(s.buckets, bucket{math.Inf(1), float64(m.GetHistogram().GetSampleCount())})
			}
		case "sluice_breaker_open":
			for _, m := range f.GetMetric() {
				s.breaker, s.hasBrk = m.GetGauge().GetValue(), true
			}
		}
	}
	return s, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Quantile is the q-quantile of a cumulative histogram as Prometheus's
// histogram_quantile computes it: linear within the bucket it falls in,
// the lower bound of the first bucket taken as 0, and the largest finite
// upper bound when it falls in the +Inf bucket. NaN with no observation.
func Quantile(q float64, les, cumulative []float64) float64 {
	n := len(les)
	if n == 0 || cumulative[n-1] == 0 {
		return math.NaN()
	}
	rank := q * cumulative[n-1]
	i, _ := slices.BinarySearchFunc(cumulative, rank, func(c, r float64) int {
		if c < r {
			return -1
		}
		return 1
	})
	if i >= n {
		i = n - 1
	}
	if math.IsInf(les[i], 1) {
		if i == 0 {
			return math.NaN()
		}
		return les[i-1]
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = les[i-1], cumulative[i-1]
	}
	in := cumulative[i] - below
	if in == 0 {
		return les[i]
	}
	return lo + (les[i]-lo)*(rank-below)/in
}

// view is what the template shows.
type view struct {
	Replica     string
	Now         string
	Refresh     int
	Interval    float64
	Ready       bool
	ReadyErr    string
	HasBreaker  bool
	BreakerOpen bool
	P50, P99    float64
	HasLatency  bool
	StoreCalls  float64
	Rules       []ruleView
	Decisions   []decisionView
	Top         []topView
	TopWindow   float64
	TopFrom     string
}

type ruleView struct {
	Name, Limit, Algorithm, Modes string
}

type decisionView struct {
	Domain, Rule string
	Total, Over  float64
	Share        float64 // over / total, 0 with no decision
	Rate         float64 // decisions per second over the last interval
	OverRate     float64
	Spark        string // SVG polyline points of the rate
	Peak         float64
}

type topView struct {
	Domain, Rule   string
	Denials, Bound uint64
	Keys           []topk.Key
}

// ServeHTTP implements http.Handler: GET the page (HEAD too).
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	v := p.view()
	var b strings.Builder
	if err := page.Execute(&b, v); err != nil {
		http.Error(w, "rendering the status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write([]byte(b.String()))
}

func (p *Page) view() view {
	now := p.o.Now()
	p.mu.Lock()
	if n := len(p.samples); n == 0 || now.Sub(p.samples[n-1].at) >= p.o.Interval {
		if s, err := p.gather(); err == nil {
			p.push(s)
		}
	}
	samples := slices.Clone(p.samples)
	p.mu.Unlock()

	v := view{
		Replica:  p.o.Replica,
		Now:      now.UTC().Format(time.RFC3339),
		Refresh:  int(p.o.Interval / time.Second),
		Interval: p.o.Interval.Seconds(),
		Ready:    true,
	}
	if p.o.Ready != nil {
		if err := p.o.Ready(); err != nil {
			v.Ready, v.ReadyErr = false, err.Error()
		}
	}
	var last sample
	if len(samples) > 0 {
		last = samples[len(samples)-1]
	}
	if p.o.BreakerOpen != nil {
		v.BreakerOpen, v.HasBreaker = p.o.BreakerOpen()
	} else if last.hasBrk {
		v.HasBreaker, v.BreakerOpen = true, last.breaker > 0
	}
	if n := len(last.buckets); n > 0 && last.buckets[n-1].count > 0 {
		les, cum := make([]float64, n), make([]float64, n)
		for i, b := range last.buckets {
			les[i], cum[i] = b.le, b.count
		}
		v.HasLatency = true
		v.P50, v.P99 = Quantile(0.5, les, cum), Quantile(0.99, les, cum)
		v.StoreCalls = cum[n-1]
	}
	if p.o.Config != nil {
		if c := p.o.Config(); c != nil {
			for _, r := range c.Rules() {
				if len(v.Rules) == MaxRulesShown {
					break
				}
				v.Rules = append(v.Rules, describe(r))
			}
		}
	}
	v.Decisions = decisions(samples)
	if p.o.Top != nil {
		rep := p.o.Top.Report("", "", TopKeys)
		v.TopWindow, v.TopFrom = rep.Window, rep.From.UTC().Format(time.RFC3339)
		for _, r := range rep.Rules {
			if len(v.Top) == MaxRulesShown {
				break
			}
			v.Top = append(v.Top, topView{r.Domain, r.Rule, r.Denials, r.Bound, r.Keys})
		}
	}
	return v
}

// decisions are the rows of the decisions table, from the samples.
func decisions(samples []sample) []decisionView {
	if len(samples) == 0 {
		return nil
	}
	last := samples[len(samples)-1]
	var out []decisionView
	for k, c := range last.rules {
		d := decisionView{Domain: k.domain, Rule: k.rule, Total: c.total, Over: c.over}
		if c.total > 0 {
			d.Share = c.over / c.total
		}
		rates := make([]float64, 0, len(samples))
		for i := 1; i < len(samples); i++ {
			a, b := samples[i-1], samples[i]
			dt := b.at.Sub(a.at).Seconds()
			if dt <= 0 {
				continue
			}
			r := max(b.rules[k].total-a.rules[k].total, 0) / dt
			rates = append(rates, r)
			if i == len(samples)-1 {
				d.Rate = r
				d.OverRate = max(b.rules[k].over-a.rules[k].over, 0) / dt
			}
		}
		d.Spark, d.Peak = spark(rates)
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b decisionView) int {
		return cmp.Or(strings.Compare(a.Domain, b.Domain), strings.Compare(a.Rule, b.Rule))
	})
	return out
}

// Sparkline geometry, in SVG user units.
const sparkW, sparkH = 120.0, 24.0

// spark is the points of a polyline of rates over the sparkline's width,
// the newest on the right, and the largest rate.
func spark(rates []float64) (string, float64) {
	peak := 0.0
	for _, r := range rates {
		peak = max(peak, r)
	}
	var b strings.Builder
	step := sparkW / float64(Samples-1)
	x0 := sparkW - step*float64(len(rates)-1)
	for i, r := range rates {
		y := sparkH - 1
		if peak > 0 {
			y = sparkH - 1 - (sparkH-2)*r/peak
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(fmtFloat(x0+step*float64(i)) + "," + fmtFloat(y))
	}
	return b.String(), peak
}
