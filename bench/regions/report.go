package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Report is what one run measured. Times are in ms from the run's start
// unless named otherwise; ratios are of the limit (Rate per Period).
type Report struct {
	Scenario, Strategy string
	// Label names the row: the strategy, and the failure mode when the
	// run replaced the scenario's.
	Label        string
	Setup, About string
	Rate         int
	PeriodMS     float64
	Start        int64 // µs since the epoch

	Offered, Admitted, Denied int
	// Errors are decisions that returned an error (no decision);
	// DeadlineErrors those whose error was the caller's deadline.
	Errors, DeadlineErrors int
	// DegradedAdmitted and DegradedDenied are decisions made by the
	// failure mode, without the home store's answer.
	DegradedAdmitted, DegradedDenied int

	// Fixed is the most admitted in one window aligned as the algorithm
	// aligns them (epoch multiples of the period), each admission placed
	// at the time its decision returned to the caller.
	Fixed WindowMax
	// StoreWindow is the same with each admission placed in the window its
	// decision's ResetAfter names (storeWindow): for a decision of the home
	// store, the window the store counted it in, exactly. Only the remote
	// strategies decide every admission there: for the others it is not a
	// measure (a lease spend's ResetAfter counts from its lease), and the
	// table leaves it out. Unattributed admissions (no window, or two,
	// fit the call) are left out.
	StoreWindow  WindowMax
	Unattributed int
	// GrantWindow is, for a strategy whose region services take units
	// from the home store (hierarchical), the most units the home store
	// granted in one of its windows, all regions together: its own count,
	// exact whatever the machine's load. Granted is the units granted over
	// the run, which the members' admissions (degraded ones aside) never
	// exceed.
	GrantWindow WindowMax
	Granted     int
	// Services are the region services' own counters (JSON), when they
	// report them. ServiceDegraded is the units their failure mode leased
	// to members while the home store did not answer: the members' spends
	// of them are decisions of the failure mode that their records cannot
	// tell, and the degraded column adds them.
	Services        []json.RawMessage `json:",omitempty"`
	ServiceDegraded int               `json:",omitempty"`
	// Sliding is the most admitted in any interval of one period, at
	// return times.
	Sliding WindowMax
	// Utilization is admitted / Σ min(offered, limit) over the run's
	// windows (offered by send time, admitted by return time).
	Utilization float64

	// Latency is each decision's latency as its member measured it, on
	// its monotonic clock around its call of Allow.
	Latency struct{ Admitted, Denied Latency }
	// Steady is the latency of the decisions sent after the run's first
	// window: without a key's first round trips (a strategy that holds
	// units cannot admit before it has some), what a long-running fleet
	// sees.
	Steady struct{ Admitted, Denied Latency }

	// WAN is each region's link to the home store over the run;
	// RoundTripsPerRegion their mean round trips per second.
	WAN                 []WAN
	RoundTripsPerRegion float64

	Windows    []Window
	Partitions []PartitionReport
	Machine    Machine
}

// WindowMax is the busiest window: its admissions, as a ratio of the limit,
// and its start.
type WindowMax struct {
	Count int
	Ratio float64
	AtMS  float64
}

// Latency is a decision latency distribution, in ms.
type Latency struct {
	N                 int
	P50MS, P99MS, Max float64
}

// WAN is one region's link over the run. RoundTripsPerSec counts the
// requests that crossed it: each read of the proxy from a client's
// connection is one (a write of the client, which may carry several
// pipelined commands).
type WAN struct {
	Region           string
	RoundTripsPerSec float64
	Conns, Resets    int64
	Lost, Held       int64
}

// Window is one fixed window of the run.
type Window struct {
	AtMS     float64
	Offered  int
	Admitted int
	ByRegion []int // admitted per region
	Degraded int   // admitted or denied by the failure mode
	Errors   int
}

// PartitionReport is the run through one partition and its healing.
type PartitionReport struct {
	Region, State   string
	AtMS, ForMS     float64
	CutMS, HealMS   float64 // when the parent applied them
	MaxDuring       float64 // most admitted in a window that overlaps the partition, / limit
	MinAfter        float64 // fewest admitted in the 3 windows after the heal's, / limit
	MaxAfter        float64 // most admitted in the heal's window and the 3 after, / limit
	DegradedAfterMS float64 // the cut region's last degraded decision, from the heal (0: none after it)
	// Crossed counts the cut region's decisions sent after the cut and
	// returned before the heal that were neither degraded nor errors:
	// decisions made without the home store (a lease spend, a local
	// view). For a strategy whose every decision is a call, it must be 0.
	Crossed int
	// Series is the windows from two before the partition to three after
	// the heal (indexes into Windows).
	From, To int
}

// report computes what a run measured.
func report(o *outcome) *Report {
	sc := o.sc
	P := sc.Limit.Period.Microseconds()
	rate := sc.Limit.Rate
	r := &Report{Scenario: sc.Name, Strategy: o.strategy, Label: o.strategy, Setup: sc.describe(), Rate: rate,
		PeriodMS: float64(P) / 1000, Start: o.start, Machine: o.machine}
	if s, err := lookupStrategy(o.strategy); err == nil {
		r.About = s.About()
	}
	runWindows := int(sc.Duration().Microseconds() / P)
	ms := func(t int64) float64 { return float64(t-o.start) / 1000 }
	win := func(t int64) int { return int(math.Floor(float64(t-o.start) / float64(P))) }

	windows := map[int]*Window{}
	at := func(k int) *Window {
		w := windows[k]
		if w == nil {
			w = &Window{AtMS: float64(int64(k)*P) / 1000, ByRegion: make([]int, len(sc.Regions))}
			windows[k] = w
		}
		return w
	}
	for k := range runWindows {
		at(k)
	}
	inStore := map[int]int{}
	var admittedAt []int64
	var latA, latD, steadyA, steadyD []int64
	for _, m := range o.members {
		for _, rec := range m.records() {
			r.Offered++
			at(win(rec.Sent)).Offered++
			degraded := rec.Flags&flagDegraded != 0
			switch rec.Outcome {
			case outAdmitted:
				r.Admitted++
				w := at(win(rec.Returned))
				w.Admitted++
				w.ByRegion[m.Region]++
				admittedAt = append(admittedAt, rec.Returned)
				latA = append(latA, rec.LatencyNS)
				if win(rec.Sent) >= 1 {
					steadyA = append(steadyA, rec.LatencyNS)
				}
				if degraded {
					r.DegradedAdmitted++
					w.Degraded++
				}
				if k, ok := storeWindow(rec, P); ok {
					inStore[win(k)]++
				} else {
					r.Unattributed++
				}
			case outDenied:
				r.Denied++
				latD = append(latD, rec.LatencyNS)
				if win(rec.Sent) >= 1 {
					steadyD = append(steadyD, rec.LatencyNS)
				}
				if degraded {
					r.DegradedDenied++
					at(win(rec.Returned)).Degraded++
				}
			default:
				r.Errors++
				if rec.Flags&flagDeadline != 0 {
					r.DeadlineErrors++
				}
				at(win(rec.Returned)).Errors++
			}
		}
	}
	keys := make([]int, 0, len(windows))
	for k := range windows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	index := map[int]int{}
	var capacity int
	admittedInRun := 0
	for i, k := range keys {
		w := windows[k]
		r.Windows = append(r.Windows, *w)
		index[k] = i
		if w.Admitted > r.Fixed.Count {
			r.Fixed = WindowMax{Count: w.Admitted, AtMS: w.AtMS}
		}
		if k >= 0 && k < runWindows {
			capacity += min(w.Offered, rate)
			admittedInRun += w.Admitted
		}
	}
	granted := map[int64]int{}
	for _, sv := range o.services {
		if len(sv.Stats) > 0 {
			r.Services = append(r.Services, sv.Stats)
			var st struct{ DegradedLeased int }
			if json.Unmarshal(sv.Stats, &st) == nil {
				r.ServiceDegraded += st.DegradedLeased
			}
		}
		for i := 0; i+1 < len(sv.Grants); i += 2 {
			granted[sv.Grants[i]] += int(sv.Grants[i+1])
			r.Granted += int(sv.Grants[i+1])
		}
	}
	for w, n := range granted {
		if n > r.GrantWindow.Count || n == r.GrantWindow.Count && ms(w) < r.GrantWindow.AtMS {
			r.GrantWindow = WindowMax{Count: n, AtMS: ms(w)}
		}
	}
	for k, n := range inStore {
		if n > r.StoreWindow.Count || n == r.StoreWindow.Count && float64(int64(k)*P)/1000 < r.StoreWindow.AtMS {
			r.StoreWindow = WindowMax{Count: n, AtMS: float64(int64(k)*P) / 1000}
		}
	}
	slices.Sort(admittedAt)
	for i, j := 0, 0; j < len(admittedAt); j++ {
		for admittedAt[j]-admittedAt[i] >= P {
			i++
		}
		if n := j - i + 1; n > r.Sliding.Count {
			r.Sliding = WindowMax{Count: n, AtMS: ms(admittedAt[i])}
		}
	}
	for _, m := range []*WindowMax{&r.Fixed, &r.StoreWindow, &r.Sliding, &r.GrantWindow} {
		m.Ratio = float64(m.Count) / float64(rate)
	}
	if capacity > 0 {
		r.Utilization = float64(admittedInRun) / float64(capacity)
	}
	r.Latency.Admitted = latency(latA)
	r.Latency.Denied = latency(latD)
	r.Steady.Admitted = latency(steadyA)
	r.Steady.Denied = latency(steadyD)

	secs := sc.Duration().Seconds()
	for i, s := range o.wan {
		w := WAN{Region: sc.Regions[i].Name, RoundTripsPerSec: float64(s.ChunksUp) / secs,
			Conns: s.Conns, Resets: s.Resets, Lost: s.Lost, Held: s.HeldUp}
		r.WAN = append(r.WAN, w)
		r.RoundTripsPerRegion += w.RoundTripsPerSec / float64(len(o.wan))
	}

	for _, ap := range o.partitions {
		ri := sc.region(ap.Region)
		pr := PartitionReport{Region: ap.Region, State: ap.State.String(),
			AtMS: float64(ap.At.Milliseconds()), ForMS: float64(ap.For.Milliseconds()),
			CutMS: ms(ap.CutAt), HealMS: ms(ap.HealAt), MinAfter: math.Inf(1)}
		cutK, healK := win(ap.CutAt), win(ap.HealAt)
		for k := cutK; k <= healK; k++ {
			if w, ok := windows[k]; ok {
				pr.MaxDuring = max(pr.MaxDuring, float64(w.Admitted)/float64(rate))
			}
		}
		for k := healK; k <= healK+3; k++ {
			if w, ok := windows[k]; ok && k < runWindows {
				pr.MaxAfter = max(pr.MaxAfter, float64(w.Admitted)/float64(rate))
				if k > healK {
					pr.MinAfter = min(pr.MinAfter, float64(w.Admitted)/float64(rate))
				}
			}
		}
		if math.IsInf(pr.MinAfter, 1) {
			pr.MinAfter = 0
		}
		last := int64(math.MinInt64)
		for _, m := range o.members {
			if m.Region != ri {
				continue
			}
			for _, rec := range m.records() {
				if rec.Flags&flagDegraded != 0 && rec.Returned > last {
					last = rec.Returned
				}
				if rec.Sent >= ap.CutAt && rec.Returned < ap.HealAt && rec.Outcome != outError && rec.Flags&flagDegraded == 0 {
					pr.Crossed++
				}
			}
		}
		if last > ap.HealAt {
			pr.DegradedAfterMS = float64(last-ap.HealAt) / 1000
		}
		pr.From, pr.To = 0, len(r.Windows)-1
		for i, k := range keys {
			if k < cutK-2 {
				pr.From = i + 1
			}
			if k <= healK+3 {
				pr.To = i
			}
		}
		r.Partitions = append(r.Partitions, pr)
	}
	return r
}

// storeWindow returns the start of the window that rec's ResetAfter
// names, taking the decision to have been made between its call and its
// return: the window's end is then the one multiple of the period in
// [Sent+ResetAfter, Returned+ResetAfter] (none or two: false). Exact for
// a decision of the home store, made on its clock in that interval; not
// for a local decision whose ResetAfter counts from another instant (a
// lease spend's, from the lease).
func storeWindow(rec record, P int64) (int64, bool) {
	lo, hi := rec.Sent+rec.ResetAfter, rec.Returned+rec.ResetAfter
	if lo < 0 || hi < lo {
		return 0, false
	}
	end := (lo + P - 1) / P * P // the first multiple at or after lo
	if end > hi || end+P <= hi {
		return 0, false
	}
	return end - P, true
}

// latency is the distribution of v, latencies in ns.
func latency(v []int64) Latency {
	if len(v) == 0 {
		return Latency{}
	}
	slices.Sort(v)
	return Latency{N: len(v), P50MS: float64(pct(v, 0.5)) / 1e6, P99MS: float64(pct(v, 0.99)) / 1e6, Max: float64(v[len(v)-1]) / 1e6}
}

// The table's columns.
const tableHeader = "strategy                fixed  sliding  util  admitted p50/p99  denied p50/p99   errors  degraded  WAN rt/s  harness"

// row formats a report as one line of the table.
func (r *Report) row() string {
	errs := fmt.Sprintf("%d", r.Errors)
	if r.DeadlineErrors > 0 {
		errs = fmt.Sprintf("%d(%dd)", r.Errors, r.DeadlineErrors)
	}
	deg := 0.0
	if r.Offered > 0 {
		deg = 100 * float64(r.DegradedAdmitted+r.DegradedDenied+r.ServiceDegraded) / float64(r.Offered)
	}
	health := "ok"
	if r.Machine.Starved {
		health = "STARVED"
	}
	return fmt.Sprintf("%-22s  %5.2f   %5.2f    %4.2f  %7s           %7s          %-7s %5.1f%%    %6.0f    %s",
		r.Label, r.Fixed.Ratio, r.Sliding.Ratio, r.Utilization,
		fmt.Sprintf("%s/%s", msStr(r.Latency.Admitted.P50MS), msStr(r.Latency.Admitted.P99MS)),
		fmt.Sprintf("%s/%s", msStr(r.Latency.Denied.P50MS), msStr(r.Latency.Denied.P99MS)),
		errs, deg, r.RoundTripsPerRegion, health)
}

// msStr prints a latency in ms: one decimal below 10 ms.
func msStr(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// details prints what the row leaves out: partitions, the machine, and
// with verbose the per-window series.
func (r *Report) details(w io.Writer, verbose bool) {
	for _, p := range r.Partitions {
		after := "no degraded decision after the heal"
		if p.DegradedAfterMS > 0 {
			after = fmt.Sprintf("degraded until heal+%.0f ms", p.DegradedAfterMS)
		}
		fmt.Fprintf(w, "    partition %s %s [%.0f, %.0f) ms: max %.2fx in a window during it; after the heal max %.2fx, min %.2fx; %s %s; %d of its decisions answered without the home store during it\n",
			p.Region, p.State, p.CutMS, p.HealMS, p.MaxDuring, p.MaxAfter, p.MinAfter, p.Region, after, p.Crossed)
		for _, win := range r.Windows[p.From : p.To+1] {
			fmt.Fprintf(w, "      %s\n", win.line(r.Rate, r.WAN))
		}
	}
	if verbose && len(r.Partitions) == 0 {
		for _, win := range r.Windows {
			fmt.Fprintf(w, "      %s\n", win.line(r.Rate, r.WAN))
		}
	}
	fmt.Fprintf(w, "    after the first window: admitted p50/p99/max %s/%s/%s ms, denied %s/%s/%s ms\n",
		msStr(r.Steady.Admitted.P50MS), msStr(r.Steady.Admitted.P99MS), msStr(r.Steady.Admitted.Max),
		msStr(r.Steady.Denied.P50MS), msStr(r.Steady.Denied.P99MS), msStr(r.Steady.Denied.Max))
	if r.Granted > 0 {
		fmt.Fprintf(w, "    home store: at most %d units granted in one window (%.2fx, at %.0f ms); %d granted in all, %d admitted without the failure mode\n",
			r.GrantWindow.Count, r.GrantWindow.Ratio, r.GrantWindow.AtMS, r.Granted, r.Admitted-r.DegradedAdmitted)
	}
	if verbose {
		for _, sv := range r.Services {
			fmt.Fprintf(w, "    service: %s\n", sv)
		}
	}
	m := r.Machine
	fmt.Fprintf(w, "    machine: %d CPUs, load %.2f -> %.2f, %.0f%% busy; harness %.2f CPU, redis %.2f CPU; oversleep p99/max: parent %.1f/%.1f ms, worst child %.1f/%.1f ms\n",
		m.CPUs, m.LoadBefore[0], m.LoadAfter[0], 100*m.Busy, m.HarnessCPU, m.RedisCPU,
		float64(m.Parent.P99)/1000, float64(m.Parent.Max)/1000, float64(m.WorstChild.P99)/1000, float64(m.WorstChild.Max)/1000)
	for _, warn := range m.Warnings {
		fmt.Fprintf(w, "    WARNING: %s\n", warn)
	}
}

func (w Window) line(rate int, wan []WAN) string {
	parts := make([]string, len(w.ByRegion))
	for i, n := range w.ByRegion {
		parts[i] = fmt.Sprintf("%s %d", wan[i].Region, n)
	}
	return fmt.Sprintf("at %6.0f ms: admitted %4d (%.2fx; %s), offered %d, degraded %d, errors %d",
		w.AtMS, w.Admitted, float64(w.Admitted)/float64(rate), strings.Join(parts, ", "), w.Offered, w.Degraded, w.Errors)
}
