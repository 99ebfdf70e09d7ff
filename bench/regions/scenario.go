package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bench/regions/proxy"
)

// Scenario is one simulated deployment and its load: regions of member
// processes reaching one home store over WAN links, the demand of each
// region over time, and the partitions.
type Scenario struct {
	Name  string
	About string
	// Regions reach the home store over their own link.
	Regions []Region
	// Members is the number of processes in each region.
	Members int
	// Link is the behaviour every WAN link shares (its RTT is the
	// region's); LocalRTT is the round trip inside a region (members to
	// the region's own service processes, for strategies that run one).
	Link     proxy.Config
	LocalRTT time.Duration
	// Limit is the one key's limit, FailureMode included.
	Limit sluice.Limit
	// Deadline is each caller's deadline for one decision.
	Deadline time.Duration
	// Phases are the demand, one after the other from the run's start.
	Phases []Phase
	// Partitions cut or black-hole a region's link for a while.
	Partitions []Partition
	Seed       uint64
}

// Region is one region: its name and the round trip of its link to the
// home store.
type Region struct {
	Name string
	RTT  time.Duration
}

// Phase is the demand for a while: Offered[i] requests per second from
// region i, spread evenly over its members.
type Phase struct {
	For     time.Duration
	Offered []int
}

// Partition puts a region's link into State (proxy.Cut or
// proxy.BlackHole) At the given time from the run's start, For a while.
type Partition struct {
	Region string
	State  proxy.State
	At     time.Duration
	For    time.Duration
}

// Bounds of a scenario.
const (
	maxRegions   = 8
	maxMembers   = 16
	maxDuration  = 10 * time.Minute
	maxOffered   = 20_000 // requests per second per region
	maxPeriod    = 10 * time.Second
	minRTT       = 0
	maxLinkRTT   = 2 * time.Second
	maxDeadline  = 30 * time.Second
	maxPhases    = 100
	maxPartition = 20
)

// Duration is the length of the run: the phases together.
func (s Scenario) Duration() time.Duration {
	var d time.Duration
	for _, p := range s.Phases {
		d += p.For
	}
	return d
}

// Validate reports the first field out of its bounds.
func (s Scenario) Validate() error {
	switch {
	case len(s.Regions) < 1 || len(s.Regions) > maxRegions:
		return fmt.Errorf("scenario %s: %d regions, want 1 to %d", s.Name, len(s.Regions), maxRegions)
	case s.Members < 1 || s.Members > maxMembers:
		return fmt.Errorf("scenario %s: Members %d, want 1 to %d", s.Name, s.Members, maxMembers)
	case s.Deadline <= 0 || s.Deadline > maxDeadline:
		return fmt.Errorf("scenario %s: Deadline %v, want (0, %v]", s.Name, s.Deadline, maxDeadline)
	case s.LocalRTT < 0 || s.LocalRTT > maxLinkRTT:
		return fmt.Errorf("scenario %s: LocalRTT %v, want [0, %v]", s.Name, s.LocalRTT, maxLinkRTT)
	case len(s.Phases) < 1 || len(s.Phases) > maxPhases:
		return fmt.Errorf("scenario %s: %d phases, want 1 to %d", s.Name, len(s.Phases), maxPhases)
	case len(s.Partitions) > maxPartition:
		return fmt.Errorf("scenario %s: %d partitions, want at most %d", s.Name, len(s.Partitions), maxPartition)
	}
	if err := s.Limit.Validate(); err != nil {
		return fmt.Errorf("scenario %s: Limit: %w", s.Name, err)
	}
	if s.Limit.Period > maxPeriod {
		return fmt.Errorf("scenario %s: Limit.Period %v, want at most %v", s.Name, s.Limit.Period, maxPeriod)
	}
	if err := s.Link.Validate(); err != nil {
		return fmt.Errorf("scenario %s: Link: %w", s.Name, err)
	}
	names := map[string]bool{}
	for _, r := range s.Regions {
		if r.Name == "" || strings.ContainsAny(r.Name, " \t\n") || names[r.Name] {
			return fmt.Errorf("scenario %s: region name %q: want a unique word", s.Name, r.Name)
		}
		names[r.Name] = true
		if r.RTT < minRTT || r.RTT > maxLinkRTT {
			return fmt.Errorf("scenario %s: region %s: RTT %v, want [0, %v]", s.Name, r.Name, r.RTT, maxLinkRTT)
		}
	}
	for i, p := range s.Phases {
		if p.For <= 0 || len(p.Offered) != len(s.Regions) {
			return fmt.Errorf("scenario %s: phase %d: want For > 0 and one Offered per region", s.Name, i)
		}
		for _, o := range p.Offered {
			if o < 0 || o > maxOffered {
				return fmt.Errorf("scenario %s: phase %d: Offered %d, want [0, %d]", s.Name, i, o, maxOffered)
			}
		}
	}
	d := s.Duration()
	if d > maxDuration || d%s.Limit.Period != 0 {
		return fmt.Errorf("scenario %s: duration %v, want a whole number of periods (%v), at most %v", s.Name, d, s.Limit.Period, maxDuration)
	}
	for i, p := range s.Partitions {
		if !names[p.Region] {
			return fmt.Errorf("scenario %s: partition %d: no region %q", s.Name, i, p.Region)
		}
		if p.State != proxy.Cut && p.State != proxy.BlackHole {
			return fmt.Errorf("scenario %s: partition %d: State %v, want cut or black-hole", s.Name, i, p.State)
		}
		if p.At < 0 || p.For <= 0 || p.At+p.For > d {
			return fmt.Errorf("scenario %s: partition %d: [%v, +%v) is not inside the run (%v)", s.Name, i, p.At, p.For, d)
		}
	}
	return nil
}

func (s Scenario) region(name string) int {
	return slices.IndexFunc(s.Regions, func(r Region) bool { return r.Name == name })
}

// describe is one line about the scenario's set-up.
func (s Scenario) describe() string {
	var offered float64
	for _, p := range s.Phases {
		for _, o := range p.Offered {
			offered += float64(o) * p.For.Seconds()
		}
	}
	perSec := float64(s.Limit.Rate) / s.Limit.Period.Seconds()
	rtts := make([]string, len(s.Regions))
	for i, r := range s.Regions {
		rtts[i] = fmt.Sprintf("%s %v", r.Name, r.RTT)
	}
	line := fmt.Sprintf("%d regions x %d processes; RTT to home: %s (jitter %v); limit %d per %v, %s, fail %s; offered %.2fx the limit; %v; deadline %v",
		len(s.Regions), s.Members, strings.Join(rtts, ", "), s.Link.Jitter, s.Limit.Rate, s.Limit.Period, s.Limit.Algorithm, s.Limit.FailureMode,
		offered/s.Duration().Seconds()/perSec, s.Duration(), s.Deadline)
	if s.Link.Loss > 0 || s.Link.Reset > 0 {
		line += fmt.Sprintf("; loss %.3g, resets %.3g", s.Link.Loss, s.Link.Reset)
	}
	for _, p := range s.Partitions {
		line += fmt.Sprintf("; %s %s at %v for %v", p.Region, p.State, p.At, p.For)
	}
	return line
}

// Standard scenarios: three regions of three processes, 80 ms to the home
// store, one key limited to 1,000 per second (fixed window), a 2 s caller
// deadline.
func threeRegions(name, about string) Scenario {
	return Scenario{
		Name: name, About: about,
		Regions:  []Region{{"eu", 80 * time.Millisecond}, {"us", 80 * time.Millisecond}, {"ap", 80 * time.Millisecond}},
		Members:  3,
		Link:     proxy.Config{Jitter: 10 * time.Millisecond},
		LocalRTT: time.Millisecond,
		Limit:    sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Second, FailureMode: sluice.FailOpen},
		Deadline: 2 * time.Second,
		Seed:     1,
	}
}

var scenarios = func() map[string]Scenario {
	m := map[string]Scenario{}
	add := func(s Scenario) { m[s.Name] = s }

	s := threeRegions("saturate", "3x the limit offered, spread evenly, for 10 s")
	s.Phases = []Phase{{For: 10 * time.Second, Offered: []int{1000, 1000, 1000}}}
	add(s)

	s = threeRegions("shift", "0.9x the limit offered, its demand moving from region to region every 2 s")
	s.Phases = []Phase{
		{For: 2 * time.Second, Offered: []int{700, 100, 100}},
		{For: 2 * time.Second, Offered: []int{100, 700, 100}},
		{For: 2 * time.Second, Offered: []int{100, 100, 700}},
		{For: 2 * time.Second, Offered: []int{700, 100, 100}},
		{For: 2 * time.Second, Offered: []int{100, 700, 100}},
	}
	add(s)

	s = threeRegions("partition", "3x the limit offered; region ap black-holed from 4 s to 7 s, then healed")
	s.Phases = []Phase{{For: 12 * time.Second, Offered: []int{1000, 1000, 1000}}}
	s.Partitions = []Partition{{Region: "ap", State: proxy.BlackHole, At: 4 * time.Second, For: 3 * time.Second}}
	add(s)

	s = threeRegions("partition-cut", "as partition, but the link is cut (connections reset) rather than black-holed")
	s.Phases = []Phase{{For: 12 * time.Second, Offered: []int{1000, 1000, 1000}}}
	s.Partitions = []Partition{{Region: "ap", State: proxy.Cut, At: 4 * time.Second, For: 3 * time.Second}}
	add(s)

	s = threeRegions("wan-mix", "3x offered; RTTs 20, 80 and 150 ms, 20 ms jitter, 1% of segments lost (200 ms retransmit)")
	s.Regions = []Region{{"eu", 20 * time.Millisecond}, {"us", 80 * time.Millisecond}, {"ap", 150 * time.Millisecond}}
	s.Link = proxy.Config{Jitter: 20 * time.Millisecond, Loss: 0.01}
	s.Phases = []Phase{{For: 10 * time.Second, Offered: []int{1000, 1000, 1000}}}
	add(s)
	return m
}()

// run is one row of a table: a scenario under a strategy.
type run struct {
	Scenario, Strategy string
	// Fail, unless FailDefault, replaces the scenario's failure mode.
	Fail sluice.FailureMode
}

// tables are named lists of runs; "standard" is the documented one.
var tables = map[string][]run{
	"standard": {
		{Scenario: "saturate", Strategy: "remote"},
		{Scenario: "saturate", Strategy: "remote-adaptive"},
		{Scenario: "saturate", Strategy: "remote-default"},
		{Scenario: "saturate", Strategy: "remote-default", Fail: sluice.FailClosed},
		{Scenario: "saturate", Strategy: "tiered-leases"},
		{Scenario: "saturate", Strategy: "tiered-default"},
		{Scenario: "saturate", Strategy: "sync-100ms"},
		{Scenario: "saturate", Strategy: "hierarchical"},
		{Scenario: "saturate", Strategy: "region-holders"},
		{Scenario: "shift", Strategy: "remote"},
		{Scenario: "shift", Strategy: "tiered-leases"},
		{Scenario: "shift", Strategy: "sync-100ms"},
		{Scenario: "shift", Strategy: "hierarchical"},
		{Scenario: "shift", Strategy: "region-holders"},
		{Scenario: "partition", Strategy: "remote"},
		{Scenario: "partition", Strategy: "remote-adaptive"},
		{Scenario: "partition", Strategy: "tiered-leases"},
		{Scenario: "partition", Strategy: "sync-100ms"},
		{Scenario: "partition", Strategy: "hierarchical"},
		{Scenario: "partition", Strategy: "region-holders"},
		{Scenario: "partition-cut", Strategy: "hierarchical"},
		{Scenario: "partition-cut", Strategy: "region-holders"},
		{Scenario: "wan-mix", Strategy: "remote"},
		{Scenario: "wan-mix", Strategy: "tiered-leases"},
		{Scenario: "wan-mix", Strategy: "hierarchical"},
		{Scenario: "wan-mix", Strategy: "region-holders"},
	},
}

var errUnknown = errors.New("unknown")
