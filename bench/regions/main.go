// Command regions simulates one quota shared across regions and measures
// how each strategy keeps it: three or more regions of several processes
// each, on loopback, reaching one home redis-server through a TCP proxy per
// region that adds a round-trip time (with jitter, losses, resets and
// partitions), under a demand that can shift between regions.
//
//	cd bench && go run ./regions -scenario saturate -strategy remote,tiered-leases
//	cd bench && go run ./regions -table standard      # make regions
//	cd bench && go run ./regions -list
//	cd bench && go run ./regions -from regions.json -v  # a saved table again
//
// The harness re-executes its own binary once per region member (and per
// region service, for strategies that run one); each member decides
// through the sluice.Store its strategy builds. See docs/regions.md for the
// columns of the report and how to read them.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"

	"github.com/sluicehq/sluice"
)

func main() {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

func cli(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("regions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenario := fs.String("scenario", "", "scenarios to run, comma-separated (see -list)")
	strategy := fs.String("strategy", "remote,tiered-leases,sync-100ms", "strategies to run each scenario under, comma-separated")
	table := fs.String("table", "", "a named list of runs instead (standard)")
	jsonOut := fs.String("json", "", "also write the reports to this file, as JSON")
	fail := fs.String("fail", "", "override the scenarios' failure mode: open or closed")
	verbose := fs.Bool("v", false, "print every window of each run")
	list := fs.Bool("list", false, "list the scenarios, strategies and tables")
	from := fs.String("from", "", "print the table of reports saved by -json, without running")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *list {
		printList(stdout)
		return 0
	}
	if *from != "" {
		if err := printSaved(*from, stdout, *verbose); err != nil {
			fmt.Fprintf(stderr, "regions: %v\n", err)
			return 1
		}
		return 0
	}
	var runs []run
	switch {
	case *table != "":
		t, ok := tables[*table]
		if !ok {
			fmt.Fprintf(stderr, "regions: no table %q (see -list)\n", *table)
			return 2
		}
		runs = slices.Clone(t)
	case *scenario != "":
		for _, sc := range strings.Split(*scenario, ",") {
			for _, st := range strings.Split(*strategy, ",") {
				runs = append(runs, run{Scenario: sc, Strategy: st})
			}
		}
	default:
		fmt.Fprintln(stderr, "regions: give -scenario, -table or -list")
		fs.Usage()
		return 2
	}
	for _, r := range runs {
		if _, ok := scenarios[r.Scenario]; !ok {
			fmt.Fprintf(stderr, "regions: no scenario %q (see -list)\n", r.Scenario)
			return 2
		}
		if _, err := lookupStrategy(r.Strategy); err != nil {
			fmt.Fprintf(stderr, "regions: %v\n", err)
			return 2
		}
	}
	if *fail != "" {
		m, err := sluice.ParseFailureMode(*fail)
		if err != nil || m == sluice.FailDefault {
			fmt.Fprintf(stderr, "regions: -fail %q: want open or closed\n", *fail)
			return 2
		}
		for i := range runs {
			runs[i].Fail = m
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	reports, err := runAll(ctx, runs, stdout, *verbose)
	if *jsonOut != "" && len(reports) > 0 {
		b, _ := json.MarshalIndent(reports, "", "  ")
		if werr := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); werr != nil {
			fmt.Fprintf(stderr, "regions: %v\n", werr)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "regions: %v\n", err)
		return 1
	}
	return 0
}

// runAll runs each (scenario, strategy) in turn and prints its row under
// its scenario's heading.
func runAll(ctx context.Context, runs []run, w io.Writer, verbose bool) ([]*Report, error) {
	var reports []*Report
	last := ""
	for _, r := range runs {
		sc := scenarios[r.Scenario]
		if r.Fail != sluice.FailDefault {
			sc.Limit.FailureMode = r.Fail
		}
		if r.Scenario != last {
			fmt.Fprintf(w, "\nscenario %s: %s\n  %s\n%s\n", sc.Name, sc.About, sc.describe(), tableHeader)
			last = r.Scenario
		}
		o, err := runScenario(ctx, sc, r.Strategy)
		if err != nil {
			return reports, fmt.Errorf("%s under %s: %w", r.Scenario, r.Strategy, err)
		}
		rep := report(o)
		if r.Fail != sluice.FailDefault {
			rep.Label = r.Strategy + "/" + r.Fail.String()
		}
		reports = append(reports, rep)
		fmt.Fprintln(w, rep.row())
		rep.details(w, verbose)
	}
	return reports, nil
}

func printList(w io.Writer) {
	fmt.Fprintln(w, "scenarios:")
	names := make([]string, 0, len(scenarios))
	for n := range scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-16s %s\n", n, scenarios[n].About)
	}
	fmt.Fprintln(w, "strategies:")
	for _, n := range strategyNames() {
		fmt.Fprintf(w, "  %-16s %s\n", n, strategies[n].About())
	}
	for n, about := range slots {
		fmt.Fprintf(w, "  %-16s %s\n", n, about)
	}
	fmt.Fprintln(w, "tables:")
	for n, t := range tables {
		parts := make([]string, len(t))
		for i, r := range t {
			parts[i] = r.Scenario + "/" + r.Strategy
			if r.Fail != sluice.FailDefault {
				parts[i] += "/" + r.Fail.String()
			}
		}
		fmt.Fprintf(w, "  %-16s %s\n", n, strings.Join(parts, " "))
	}
}

// printSaved prints the table of the reports in a file written by -json.
func printSaved(file string, w io.Writer, verbose bool) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var reports []*Report
	if err := json.Unmarshal(b, &reports); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	last := ""
	for _, r := range reports {
		if r.Scenario != last {
			fmt.Fprintf(w, "\nscenario %s\n  %s\n%s\n", r.Scenario, r.Setup, tableHeader)
			last = r.Scenario
		}
		fmt.Fprintln(w, r.row())
		r.details(w, verbose)
	}
	return nil
}
