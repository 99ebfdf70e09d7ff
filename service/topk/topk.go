// Package topk keeps, per domain and rule, the keys denied most over a
// recent window: a Space-Saving summary (Metwally, Agrawal and El Abbadi,
// "Efficient computation of frequent and top-k elements in data streams",
// 2005) with a fixed number of counters, so that its memory is bounded
// whatever the number of distinct keys.
//
// # The bound
//
// A summary of m counters that saw N denials reports, for each key it
// holds, a count and an error ε: the key's true number of denials is in
// [count-ε, count], and ε ≤ N/m. Every key denied more than N/m times is
// held. A rule's counters are split over Stripes stripes by a hash of the
// key (so that denials of distinct keys take distinct locks): the bound of
// a key is that of its stripe, N_s/m_s, with N_s the denials its stripe saw
// and m_s = m/Stripes its counters; keys spread by the hash make N_s about
// N/Stripes, so the bound is about N/m. Each reported key carries its own
// ε, and each rule the largest bound of its stripes.
//
// # The window
//
// Time is cut into windows of Window (default one minute), aligned on the
// tracker's start. Each stripe keeps two summaries: the current window's
// and the previous one's; a report merges them (the mergeable summaries of
// Agarwal et al.: a key missing from one summary counts that summary's
// smallest counter, as count and as error), so a report covers between one
// and two windows: the previous window and the current one so far.
//
// Only denials are recorded; an admitted decision costs nothing. Keys are
// kept without their domain, as the descriptor's entries
// (key=value/key=value, escaped as in the counting key) and truncated to
// MaxKeyBytes.
package topk

import (
	"cmp"
	"container/heap"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Defaults and bounds of the Options.
const (
	// DefaultCounters is the default number of counters per rule.
	DefaultCounters = 1000
	// MaxCounters bounds Options.Counters.
	MaxCounters = 100_000
	// DefaultMaxRules is the default number of (domain, rule) pairs
	// tracked; the denials of the pairs past it are counted, not kept.
	DefaultMaxRules = 100
	// MaxMaxRules bounds Options.MaxRules.
	MaxMaxRules = 10_000
	// DefaultWindow is the default window.
	DefaultWindow = time.Minute
	// MaxKeyBytes bounds a key as kept: longer keys are truncated (at a
	// UTF-8 boundary) and marked with a trailing "…"; two keys that differ
	// only past it share a counter.
	MaxKeyBytes = 256
	// Stripes is the number of stripes of a rule's counters.
	Stripes = 4
)

// Options configure a Tracker. The zero value is the defaults.
type Options struct {
	Counters int           // counters per (domain, rule), split over Stripes; default DefaultCounters, at least Stripes
	MaxRules int           // (domain, rule) pairs tracked; default DefaultMaxRules
	Window   time.Duration // default DefaultWindow; at least a millisecond
	// Now is the clock, time.Now by default.
	Now func() time.Time
}

// Tracker is the summary of every tracked (domain, rule). It is safe for
// concurrent use.
type Tracker struct {
	perStripe int
	maxRules  int
	window    time.Duration
	now       func() time.Time
	start     time.Time
	seed      maphash.Seed

	mu        sync.RWMutex
	rules     map[ruleKey]*rule
	untracked uint64 // denials of the pairs past maxRules (under mu)
}

type ruleKey struct{ domain, rule string }

type rule struct {
	stripes [Stripes]stripe
}

// stripe is the part of a rule's counters of the keys that hash to it: the
// current window's summary and the previous one's.
type stripe struct {
	mu        sync.Mutex
	idx       int64 // the current window's index
	cur, prev summary
}

// New returns a tracker with opts, or an error naming the option out of
// its bounds.
func New(opts Options) (*Tracker, error) {
	switch {
	case opts.Counters == 0:
		opts.Counters = DefaultCounters
	case opts.Counters < Stripes || opts.Counters > MaxCounters:
		return nil, &OptionError{Field: "Counters", Msg: "must be between 4 and 100000"}
	}
	switch {
	case opts.MaxRules == 0:
		opts.MaxRules = DefaultMaxRules
	case opts.MaxRules < 0 || opts.MaxRules > MaxMaxRules:
		return nil, &OptionError{Field: "MaxRules", Msg: "must be between 1 and 10000"}
	}
	switch {
	case opts.Window == 0:
		opts.Window = DefaultWindow
	case opts.Window < time.Millisecond:
		return nil, &OptionError{Field: "Window", Msg: "must be at least 1ms"}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Tracker{
		perStripe: opts.Counters / Stripes,
		maxRules:  opts.MaxRules,
		window:    opts.Window,
		now:       opts.Now,
		start:     opts.Now(),
		seed:      maphash.MakeSeed(),
		rules:     map[ruleKey]*rule{},
	}, nil
}

// OptionError is an option out of its bounds.
type OptionError struct{ Field, Msg string }

func (e *OptionError) Error() string { return "topk: " + e.Field + " " + e.Msg }

// Window is the tracker's window.
func (t *Tracker) Window() time.Duration { return t.window }

// Denied records one denial of key (a counting key, domain/key=value/...)
// by rule of domain.
func (t *Tracker) Denied(domain, ruleName, key string) {
	r := t.rule(domain, ruleName)
	if r == nil {
		return
	}
	key = Entries(key)
	s := &r.stripes[maphash.String(t.seed, key)%Stripes]
	idx := t.index(t.now())
	s.mu.Lock()
	s.rotate(idx)
	s.cur.add(key, t.perStripe)
	s.mu.Unlock()
}

// index is the window of time now.
func (t *Tracker) index(now time.Time) int64 {
	return int64(now.Sub(t.start) / t.window)
}

// rotate makes idx the current window.
func (s *stripe) rotate(idx int64) {
	switch {
	case idx <= s.idx:
		return
	case idx == s.idx+1:
		s.prev, s.cur = s.cur, s.prev
	default:
		s.prev.reset()
	}
	s.cur.reset()
	s.idx = idx
}

// rule returns the rule's counters, made on first use; nil past maxRules.
func (t *Tracker) rule(domain, name string) *rule {
	k := ruleKey{domain, name}
	t.mu.RLock()
	r := t.rules[k]
	t.mu.RUnlock()
	if r != nil {
		return r
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if r = t.rules[k]; r != nil {
		return r
	}
	if len(t.rules) >= t.maxRules {
		t.untracked++
		return nil
	}
	r = &rule{}
	t.rules[k] = r
	return r
}

// Entries is the part of counting key k that a report shows: its entries
// without the domain, truncated to MaxKeyBytes.
func Entries(k string) string {
	for i := 0; i < len(k); i++ {
		if k[i] == '\\' {
			i++
			continue
		}
		if k[i] == '/' {
			k = k[i+1:]
			break
		}
	}
	return truncate(k)
}

func truncate(s string) string {
	if len(s) <= MaxKeyBytes {
		return s
	}
	const mark = "…"
	n := MaxKeyBytes - len(mark)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + mark
}

// summary is one window's Space-Saving summary: at most m counters, a map
// from key to counter and a min-heap of the counters by count.
type summary struct {
	n     uint64 // denials seen
	index map[string]*counter
	heap  minHeap
}

type counter struct {
	key          string
	count, error uint64
	pos          int // in the heap
}

func (s *summary) reset() {
	s.n = 0
	clear(s.index)
	clear(s.heap)
	s.heap = s.heap[:0]
}

// add counts one occurrence of key in a summary of at most m counters.
func (s *summary) add(key string, m int) {
	s.n++
	if c := s.index[key]; c != nil {
		c.count++
		heap.Fix(&s.heap, c.pos)
		return
	}
	if s.index == nil {
		s.index = make(map[string]*counter, m)
	}
	key = strings.Clone(key) // the request's key is not retained
	if len(s.heap) < m {
		c := &counter{key: key, count: 1}
		s.index[key] = c
		heap.Push(&s.heap, c)
		return
	}
	// Replace the smallest counter: the new key inherits its count as its
	// error.
	c := s.heap[0]
	delete(s.index, c.key)
	c.key, c.error = key, c.count
	c.count++
	s.index[key] = c
	heap.Fix(&s.heap, 0)
}

// min is the smallest count of a full summary of m counters, else 0: the
// most a key it does not hold can have been seen.
func (s *summary) min(m int) uint64 {
	if len(s.heap) < m {
		return 0
	}
	return s.heap[0].count
}

type minHeap []*counter

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h minHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *minHeap) Push(x any) {
	c := x.(*counter)
	c.pos = len(*h)
	*h = append(*h, c)
}
func (h *minHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return c
}

// Key is one reported key.
type Key struct {
	Key string `json:"key"`
	// Count is at least the key's true denials in the report's window, and
	// at most Error more.
	Count uint64 `json:"count"`
	Error uint64 `json:"error"`
}

// Rule is the report of one (domain, rule).
type Rule struct {
	Domain string `json:"domain"`
	Rule   string `json:"rule"`
	// Denials is the number of denials the report's window saw.
	Denials uint64 `json:"denials"`
	// Bound is the largest error a key's count may have: the largest of
	// the stripes' N_s/m_s. Every key denied more than Bound times is in
	// Keys (when n asked for enough of them).
	Bound uint64 `json:"bound"`
	Keys  []Key  `json:"keys"`
}

// Report is what the tracker holds at a time.
type Report struct {
	// From and To are the window the report covers: the previous window's
	// start to now.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Window is the tracker's window, in seconds.
	Window float64 `json:"window_seconds"`
	// Counters is the number of counters per rule.
	Counters int    `json:"counters_per_rule"`
	Rules    []Rule `json:"rules"`
	// Untracked is the number of denials of rules past MaxRules (since
	// start), not kept.
	Untracked uint64 `json:"untracked_denials"`
}

// Report returns, for each tracked (domain, rule) that domain and rule
// select ("" selects all), its n keys denied most, most denied first;
// rules sorted by domain and name.
func (t *Tracker) Report(domain, ruleName string, n int) Report {
	n = max(n, 0)
	now := t.now()
	idx := t.index(now)
	t.mu.RLock()
	type named struct {
		k ruleKey
		r *rule
	}
	var rs []named
	for k, r := range t.rules {
		if (domain == "" || k.domain == domain) && (ruleName == "" || k.rule == ruleName) {
			rs = append(rs, named{k, r})
		}
	}
	untracked := t.untracked
	t.mu.RUnlock()
	slices.SortFunc(rs, func(a, b named) int {
		return cmp.Or(strings.Compare(a.k.domain, b.k.domain), strings.Compare(a.k.rule, b.k.rule))
	})
	rep := Report{
		From:      t.start.Add(time.Duration(idx-1) * t.window),
		To:        now,
		Window:    t.window.Seconds(),
		Counters:  t.perStripe * Stripes,
		Untracked: untracked,
		Rules:     make([]Rule, 0, len(rs)),
	}
	if rep.From.Before(t.start) {
		rep.From = t.start
	}
	for _, x := range rs {
		rep.Rules = append(rep.Rules, t.report(x.k, x.r, idx, n))
	}
	return rep
}

// report merges the stripes of r at window idx.
func (t *Tracker) report(k ruleKey, r *rule, idx int64, n int) Rule {
	out := Rule{Domain: k.domain, Rule: k.rule, Keys: []Key{}}
	var keys []Key
	m := t.perStripe
	for i := range r.stripes {
		s := &r.stripes[i]
		s.mu.Lock()
		s.rotate(idx)
		minCur, minPrev := s.cur.min(m), s.prev.min(m)
		out.Denials += s.cur.n + s.prev.n
		out.Bound = max(out.Bound, (s.cur.n+s.prev.n)/uint64(m))
		for key, c := range s.cur.index {
			kc := Key{Key: key, Count: c.count, Error: c.error}
			if p := s.prev.index[key]; p != nil {
				kc.Count += p.count
				kc.Error += p.error
			} else {
				kc.Count += minPrev
				kc.Error += minPrev
			}
			keys = append(keys, kc)
		}
		for key, p := range s.prev.index {
			if s.cur.index[key] == nil {
				keys = append(keys, Key{Key: key, Count: p.count + minCur, Error: p.error + minCur})
			}
		}
		s.mu.Unlock()
	}
	slices.SortFunc(keys, func(a, b Key) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Error, b.Error), strings.Compare(a.Key, b.Key))
	})
	if len(keys) > n {
		keys = keys[:n]
	}
	out.Keys = append(out.Keys, keys...)
	return out
}
