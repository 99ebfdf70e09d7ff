// Command deviation measures how far the sliding-window counter
// (sluice.SlidingWindow, two counters per key) strays from the exact
// sliding log (sluice.SlidingLog) on the same requests, for three traces:
//
//   - steady: 50 sources, each at a fifth of the limit, requests spread at
//     random (Poisson arrivals);
//   - abusers: 5 sources at ten times the limit;
//   - bursty: 20 sources at the limit on average, in bursts of 50 requests
//     within a second at random times.
//
// Every trace runs 10 minutes of simulated time against a limit of 100 a
// minute per source, through two memstores on one simulated clock. It
// prints, per trace, the requests each algorithm admitted, the share of
// decisions where they differ (the window admitting what the log denies,
// and the reverse), and the most the window admitted to one source in any
// minute, as a multiple of the limit (the log never exceeds 1.00).
//
//	cd bench && go run ./deviation
package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

const (
	rate     = 100
	period   = time.Minute
	duration = 10 * time.Minute
)

// request is one request of a trace: its source and its time from the
// start.
type request struct {
	source int
	at     time.Duration
}

// poisson appends the requests of one source arriving at perMinute on
// average.
func poisson(r *rand.Rand, out []request, source int, perMinute float64) []request {
	mean := float64(time.Minute) / perMinute
	for t := time.Duration(r.ExpFloat64() * mean); t < duration; t += time.Duration(r.ExpFloat64() * mean) {
		out = append(out, request{source, t})
	}
	return out
}

// trace is a named set of requests.
type trace struct {
	name, what string
	reqs       []request
}

func traces() []trace {
	r := rand.New(rand.NewPCG(1, 2)) // fixed: the same traces every run
	var steady, abusers, bursty []request
	for s := range 50 {
		steady = poisson(r, steady, s, rate/5)
	}
	for s := range 5 {
		abusers = poisson(r, abusers, s, 10*rate)
	}
	for s := range 20 {
		// Bursts of 50 within a second, two a minute on average: 100 a
		// minute, the limit.
		for _, b := range poisson(r, nil, s, 2) {
			for range 50 {
				at := b.at + time.Duration(r.Int64N(int64(time.Second)))
				if at < duration {
					bursty = append(bursty, request{s, at})
				}
			}
		}
	}
	ts := []trace{
		{"steady", "50 sources at 1/5 of the limit", steady},
		{"abusers", "5 sources at 10x the limit", abusers},
		{"bursty", "20 sources at the limit, in bursts of 50", bursty},
	}
	for _, t := range ts {
		slices.SortStableFunc(t.reqs, func(a, b request) int { return int(a.at - b.at) })
	}
	return ts
}

// result is what one trace measured.
type result struct {
	requests, logAdmitted, windowAdmitted int
	windowOnly, logOnly                   int     // decisions where only one admitted
	worst                                 float64 // most window admissions of a source in any period, / rate
	worstLog                              float64
}

func run(t trace) result {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	clock := func() time.Time { return now }
	logLim := sluice.New(memstore.New(memstore.WithClock(clock)))
	winLim := sluice.New(memstore.New(memstore.WithClock(clock)))
	defer logLim.Close()
	defer winLim.Close()
	logL := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: rate, Period: period}
	winL := sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: rate, Period: period}
	ctx := context.Background()
	res := result{requests: len(t.reqs)}
	winTimes, logTimes := map[int][]time.Duration{}, map[int][]time.Duration{}
	for _, rq := range t.reqs {
		now = start.Add(rq.at)
		key := fmt.Sprint("source-", rq.source)
		dl, err := logLim.Allow(ctx, key, logL)
		if err != nil {
			panic(err)
		}
		dw, err := winLim.Allow(ctx, key, winL)
		if err != nil {
			panic(err)
		}
		if dl.Allowed {
			res.logAdmitted++
			logTimes[rq.source] = append(logTimes[rq.source], rq.at)
		}
		if dw.Allowed {
			res.windowAdmitted++
			winTimes[rq.source] = append(winTimes[rq.source], rq.at)
		}
		switch {
		case dw.Allowed && !dl.Allowed:
			res.windowOnly++
		case dl.Allowed && !dw.Allowed:
			res.logOnly++
		}
	}
	res.worst = worstPeriod(winTimes)
	res.worstLog = worstPeriod(logTimes)
	return res
}

// worstPeriod returns the most admissions of one source within any
// interval of length period, as a multiple of rate.
func worstPeriod(times map[int][]time.Duration) float64 {
	most := 0
	for _, ts := range times {
		i := 0
		for j, t := range ts {
			for ts[i] <= t-period {
				i++
			}
			most = max(most, j-i+1)
		}
	}
	return float64(most) / rate
}

func main() {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "trace\trequests\tlog admits\twindow admits\twindow only\tlog only\tworst minute, window\tworst minute, log\n")
	for _, t := range traces() {
		r := run(t)
		pct := func(n int) string { return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(r.requests)) }
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%s\t%.2fx\t%.2fx\n", t.name, r.requests, r.logAdmitted, r.windowAdmitted,
			pct(r.windowOnly), pct(r.logOnly), r.worst, r.worstLog)
	}
	w.Flush()
}
