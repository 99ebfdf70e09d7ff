package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bench/internal/redisserver"
	"github.com/sluicehq/sluice/bench/regions/proxy"
)

// The test binary is also the harness's child: runScenario re-executes it
// with childEnv set, once per region member and service.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}

func needRedis(t *testing.T) {
	t.Helper()
	redisserver.Require(t)
}

// smoke is a short scenario: three regions of two processes, 20 ms away,
// 3x a limit of 50 per 250 ms, one region black-holed for 1 s.
func smoke() Scenario {
	return Scenario{
		Name: "smoke", About: "the test's short run",
		Regions:  []Region{{"a", 20 * time.Millisecond}, {"b", 20 * time.Millisecond}, {"c", 20 * time.Millisecond}},
		Members:  2,
		Link:     proxy.Config{Jitter: 5 * time.Millisecond},
		LocalRTT: time.Millisecond,
		Limit:    sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 50, Period: 250 * time.Millisecond, FailureMode: sluice.FailClosed},
		Deadline: 2 * time.Second,
		Phases: []Phase{
			{For: 750 * time.Millisecond, Offered: []int{200, 200, 200}},
			{For: 750 * time.Millisecond, Offered: []int{400, 100, 100}},
			{For: 500 * time.Millisecond, Offered: []int{100, 100, 400}},
		},
		Partitions: []Partition{{Region: "c", State: proxy.BlackHole, At: 500 * time.Millisecond, For: time.Second}},
		Seed:       1,
	}
}

// The smoke run asserts what a busy machine cannot break: with every
// decision a call to the home store and FailClosed, no window the store
// counts in holds more than the limit; no decision of the cut region sent
// during the partition came back before the heal with an answer of the
// store; the report survives JSON.
func TestSmokeRemote(t *testing.T) {
	needRedis(t)
	sc := smoke()
	o, err := runScenario(context.Background(), sc, "remote")
	if err != nil {
		t.Fatal(err)
	}
	r := report(o)
	var buf bytes.Buffer
	buf.WriteString(tableHeader + "\n" + r.row() + "\n")
	r.details(&buf, true)
	t.Logf("\n%s", buf.String())

	if len(o.members) != len(sc.Regions)*sc.Members {
		t.Fatalf("%d member results, want %d", len(o.members), len(sc.Regions)*sc.Members)
	}
	if r.Offered == 0 || r.Admitted+r.Denied+r.Errors != r.Offered {
		t.Errorf("offered %d = admitted %d + denied %d + errors %d?", r.Offered, r.Admitted, r.Denied, r.Errors)
	}
	if r.DegradedAdmitted != 0 {
		t.Errorf("%d degraded admissions under FailClosed", r.DegradedAdmitted)
	}
	// The exact bound: each admission in the window the store counted it
	// in (calls longer than a period are left out, which can only lower a
	// count).
	if r.StoreWindow.Count > sc.Limit.Rate {
		t.Errorf("%d admitted in the store's window at %v ms, limit %d", r.StoreWindow.Count, r.StoreWindow.AtMS, sc.Limit.Rate)
	}
	if len(r.Partitions) != 1 {
		t.Fatalf("%d partitions reported, want 1", len(r.Partitions))
	}
	if p := r.Partitions[0]; p.Crossed != 0 {
		t.Errorf("%d decisions of region c were sent after the cut and answered by the store before the heal", p.Crossed)
	}

	b, err := json.Marshal([]*Report{r})
	if err != nil {
		t.Fatal(err)
	}
	var back []*Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("the JSON report does not parse: %v", err)
	}
	if diff := cmp.Diff([]*Report{r}, back); diff != "" {
		t.Errorf("the JSON report changed on the way back (-want +got):\n%s", diff)
	}
}

// relay is a test strategy that runs a region service: a plain TCP relay
// to the home store, with the members deciding through it as remote does.
// It checks the slot's plumbing: service processes, their listeners, the
// local links.
type relay struct{}

func init() { strategies["relay-test"] = relay{} }

func (relay) About() string {
	return "test: members reach the home store through a relay in their region"
}
func (relay) ServicesPerRegion() int { return 1 }

func (relay) NewStore(ctx context.Context, m Member) (sluice.Store, error) {
	if len(m.ServiceAddrs) != 1 {
		return nil, errors.New("relay: want one service address")
	}
	m.HomeAddr = m.ServiceAddrs[0]
	m.RTT += 2 * time.Millisecond // the local link, both ways
	return remote{wan: true}.NewStore(ctx, m)
}

func (relay) Serve(ctx context.Context, s Service, ln net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		home, err := net.Dial("tcp", s.HomeAddr)
		if err != nil {
			c.Close()
			continue
		}
		wg.Add(2)
		go func() { defer wg.Done(); io.Copy(home, c); home.Close() }()
		go func() { defer wg.Done(); io.Copy(c, home); c.Close() }()
		go func() { <-ctx.Done(); c.Close(); home.Close() }()
	}
}

func TestRegionServiceSlot(t *testing.T) {
	needRedis(t)
	sc := smoke()
	sc.Regions, sc.Members, sc.Partitions = sc.Regions[:2], 1, nil
	sc.Phases = []Phase{{For: 500 * time.Millisecond, Offered: []int{100, 100}}}
	o, err := runScenario(context.Background(), sc, "relay-test")
	if err != nil {
		t.Fatal(err)
	}
	if len(o.services) != 2 || len(o.members) != 2 {
		t.Fatalf("%d services and %d members reported, want 2 and 2", len(o.services), len(o.members))
	}
	r := report(o)
	if r.StoreWindow.Count > sc.Limit.Rate {
		t.Errorf("%d admitted in the store's window, limit %d", r.StoreWindow.Count, sc.Limit.Rate)
	}
	if r.Offered == 0 {
		t.Error("no decision recorded")
	}
}

// The hierarchical strategy's smoke run asserts what a busy machine cannot
// break: the home store never grants more than the limit in one of its
// windows (its own count, recorded by each region's service as it gets
// each answer); the members admit no more than was granted; under
// FailClosed nothing is admitted degraded; every decision is answered.
func TestSmokeHierarchical(t *testing.T) {
	needRedis(t)
	sc := smoke()
	o, err := runScenario(context.Background(), sc, "hierarchical")
	if err != nil {
		t.Fatal(err)
	}
	r := report(o)
	var buf bytes.Buffer
	buf.WriteString(tableHeader + "\n" + r.row() + "\n")
	r.details(&buf, true)
	t.Logf("\n%s", buf.String())
	if len(o.members) != len(sc.Regions)*sc.Members || len(o.services) != len(sc.Regions) {
		t.Fatalf("%d member and %d service results, want %d and %d", len(o.members), len(o.services), len(sc.Regions)*sc.Members, len(sc.Regions))
	}
	if r.Offered == 0 || r.Admitted+r.Denied+r.Errors != r.Offered {
		t.Errorf("offered %d = admitted %d + denied %d + errors %d?", r.Offered, r.Admitted, r.Denied, r.Errors)
	}
	if r.DegradedAdmitted != 0 {
		t.Errorf("%d degraded admissions under FailClosed", r.DegradedAdmitted)
	}
	if r.Granted == 0 || r.GrantWindow.Count > sc.Limit.Rate {
		t.Errorf("the home store granted %d units in its window at %v ms (%d in all), limit %d", r.GrantWindow.Count, r.GrantWindow.AtMS, r.Granted, sc.Limit.Rate)
	}
	if r.Admitted > r.Granted {
		t.Errorf("%d admitted, more than the %d units granted", r.Admitted, r.Granted)
	}
}

func TestScenariosValidate(t *testing.T) {
	for name, sc := range scenarios {
		if err := sc.Validate(); err != nil || sc.Name != name {
			t.Errorf("scenario %s: %v", name, err)
		}
	}
	for name, runs := range tables {
		for _, r := range runs {
			if _, ok := scenarios[r.Scenario]; !ok {
				t.Errorf("table %s: no scenario %s", name, r.Scenario)
			}
			if _, err := lookupStrategy(r.Strategy); err != nil {
				t.Errorf("table %s: %v", name, err)
			}
		}
	}
	bad := []func(*Scenario){
		func(s *Scenario) { s.Regions = nil },
		func(s *Scenario) { s.Members = 0 },
		func(s *Scenario) { s.Members = maxMembers + 1 },
		func(s *Scenario) { s.Regions[1].Name = s.Regions[0].Name },
		func(s *Scenario) { s.Regions[0].RTT = 3 * time.Second },
		func(s *Scenario) { s.Deadline = 0 },
		func(s *Scenario) { s.Phases[0].Offered = []int{1} },
		func(s *Scenario) { s.Phases[0].Offered[0] = maxOffered + 1 },
		func(s *Scenario) { s.Phases[0].For = 100 * time.Millisecond }, // not whole periods
		func(s *Scenario) { s.Limit.Rate = 0 },
		func(s *Scenario) { s.Limit.Period = time.Minute },
		func(s *Scenario) { s.Partitions[0].Region = "nowhere" },
		func(s *Scenario) { s.Partitions[0].State = proxy.Up },
		func(s *Scenario) { s.Partitions[0].For = time.Hour },
		func(s *Scenario) { s.Link.Loss = 2 },
	}
	for i, f := range bad {
		sc := smoke()
		f(&sc)
		if err := sc.Validate(); err == nil {
			t.Errorf("bad scenario %d: Validate() = nil", i)
		}
	}
}

// rec builds a member's record list.
func recs(rs ...record) []int64 {
	var out []int64
	for _, r := range rs {
		lat := r.LatencyNS
		if lat == 0 {
			lat = 1000 * (r.Returned - r.Sent)
		}
		out = append(out, r.Sent, r.Returned, r.Outcome, r.Flags, r.ResetAfter, lat)
	}
	return out
}

// The report's arithmetic on a hand-made run: period 1 s from t0.
func TestReportArithmetic(t *testing.T) {
	sc := smoke()
	sc.Regions, sc.Members = sc.Regions[:2], 1
	sc.Limit = sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Second}
	sc.Phases = []Phase{{For: 2 * time.Second, Offered: []int{1, 1}}}
	sc.Partitions = []Partition{{Region: "b", State: proxy.Cut, At: 0, For: time.Second}}
	const t0 = 1_000_000_000 * 1_000_000 // µs, on a second
	const s = 1_000_000
	o := &outcome{sc: sc, strategy: "remote", start: t0,
		partitions: []appliedPartition{{Partition: sc.Partitions[0], CutAt: t0 + 100_000, HealAt: t0 + 900_000}}}
	o.members = []childResult{
		{Region: 0, Records: recs(
			// Sent in window 0, returned in 1; its ResetAfter names window 1.
			record{t0 + 900_000, t0 + s + 100_000, outAdmitted, 0, 950_000, 0},
			record{t0 + s + 200_000, t0 + s + 210_000, outAdmitted, 0, 795_000, 0},
			record{t0 + s + 300_000, t0 + s + 310_000, outAdmitted, 0, 695_000, 0},
			record{t0 + s + 400_000, t0 + s + 410_000, outDenied, 0, 595_000, 0},
			// A call longer than a period: unattributed.
			record{t0 + 50_000, t0 + s + 800_000, outAdmitted, 0, 300_000, 0},
			// A local decision whose ResetAfter points past window 1's end
			// (a lease spend's counts from its lease): no window fits.
			record{t0 + 500_000, t0 + 500_000, outAdmitted, 0, 1_540_000, 0},
		)},
		{Region: 1, Records: recs(
			record{t0 + 200_000, t0 + 300_000, outAdmitted, flagDegraded, 750_000, 0},
			record{t0 + 300_000, t0 + 400_000, outAdmitted, 0, 650_000, 0}, // answered during the cut
			record{t0 + 400_000, t0 + 500_000, outError, flagDeadline, 0, 0},
		)},
	}
	r := report(o)
	if r.Offered != 9 || r.Admitted != 7 || r.Denied != 1 || r.Errors != 1 || r.DeadlineErrors != 1 || r.DegradedAdmitted != 1 {
		t.Errorf("counts: offered %d admitted %d denied %d errors %d (deadline %d) degraded %d, want 9 7 1 1 1 1",
			r.Offered, r.Admitted, r.Denied, r.Errors, r.DeadlineErrors, r.DegradedAdmitted)
	}
	// By return time: window 0 holds 3 (region b's two, the local one),
	// window 1 holds 4.
	if r.Fixed != (WindowMax{Count: 4, Ratio: 4.0 / 3, AtMS: 1000}) {
		t.Errorf("Fixed = %+v, want 4 at 1000 ms", r.Fixed)
	}
	// StoreWindow: window 1 holds 3 (the first three of region a), window 0
	// two; two unattributed.
	if r.StoreWindow.Count != 3 || r.StoreWindow.AtMS != 1000 || r.Unattributed != 2 {
		t.Errorf("StoreWindow = %+v, unattributed %d; want 3 at 1000 ms, 2", r.StoreWindow, r.Unattributed)
	}
	// Sliding: returns at 0.3, 0.4, 0.5, 1.1, 1.21, 1.31, 1.8: [0.3, 1.3)
	// holds 5.
	if r.Sliding != (WindowMax{Count: 5, Ratio: 5.0 / 3, AtMS: 300}) {
		t.Errorf("Sliding = %+v, want 5 from 300 ms", r.Sliding)
	}
	// Offered per window by send time: window 0: 6 (a: 0.9, 0.05, 0.5;
	// b: 3), window 1: 3. Σ min(offered, 3) = 3 + 3; admitted in the run's
	// windows 3 + 4.
	if r.Utilization != 7.0/6 {
		t.Errorf("Utilization = %v, want 7/6", r.Utilization)
	}
	p := r.Partitions[0]
	if p.Crossed != 1 {
		t.Errorf("Crossed = %d, want 1 (the one answer during the cut)", p.Crossed)
	}
	if p.MaxDuring != 1 {
		t.Errorf("MaxDuring = %v, want 1 (window 0's 3)", p.MaxDuring)
	}
}

// -from prints the table of saved reports.
func TestPrintSaved(t *testing.T) {
	r := &Report{Scenario: "s", Strategy: "remote", Label: "remote/closed", Setup: "set-up", Rate: 10}
	b, err := json.Marshal([]*Report{r})
	if err != nil {
		t.Fatal(err)
	}
	file := t.TempDir() + "/r.json"
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if code := cli([]string{"-from", file}, &out, &errs); code != 0 {
		t.Fatalf("cli -from = %d: %s", code, errs.String())
	}
	for _, want := range []string{"scenario s", "set-up", tableHeader, "remote/closed "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-from printed\n%s\nwithout %q", out.String(), want)
		}
	}
}
