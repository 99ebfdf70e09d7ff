package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/region"
	"github.com/sluicehq/sluice/remotestore"
)

// regionFlags make the shared store a home store that grants this process
// units of each limit, decided from locally (package region): one quota
// for several regions, a decision never waiting for the round trip to the
// home region while its units last (a group of redisFlags).
type regionFlags struct {
	holder        string
	refresh       time.Duration
	reportTTL     time.Duration
	timeoutMin    time.Duration
	timeoutMax    time.Duration
	leaseTime     time.Duration
	failOpenShare float64
}

func (g *regionFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.holder, "region", "", "decide from units that the shared store (--redis, or --remote-store: a home sluice serve) grants this process, by its demand, fetched ahead of need, under this holder `name` (1 to 64 bytes, unique among the processes sharing the home store, e.g. eu-1): one quota across regions, no decision waiting for the home region while the units last (the configuration's counters of fixed values are warmed at start, /readyz waiting for it); see docs/regions.md")
	fs.DurationVar(&g.refresh, "region-refresh", region.DefaultRefresh, "with --region: how much demand, beyond the round trip, one grant covers (1ms to 1m): each key calls the home store about once per this time")
	fs.DurationVar(&g.reportTTL, "region-report-ttl", region.DefaultReportTTL, "with --region: how long the home store keeps this process's report and the allowance reserved for --failure-mode open (1ms to 1h); cut off for longer, open limits are decided closed")
	fs.DurationVar(&g.timeoutMin, "region-timeout-min", region.DefaultMinTimeout, "with --region: the least deadline of a call to the home store, which follows the measured round trip (1ms to 1m; set it above a busy host's delays)")
	fs.DurationVar(&g.timeoutMax, "region-timeout-max", region.DefaultMaxTimeout, "with --region: the greatest deadline of a call to the home store, and that of the first calls (--region-timeout-min to 1m)")
	fs.DurationVar(&g.leaseTime, "region-lease-time", region.DefaultLeaseTime, "with --region: how long the units of a token bucket or GCRA grant may be spent (1ms to 1h); the window algorithms spend theirs within their window")
	fs.Float64Var(&g.failOpenShare, "region-fail-open-share", 1, "with --region and --failure-mode open: the `fraction` (0 to 1) of this process's share of a limit that the home store reserves for it, and that it may admit per window while cut off; the other processes are not granted it")
}

// on reports whether --region is set.
func (g *regionFlags) on() bool { return g.holder != "" }

// Bounds of the flags that package region leaves open.
const (
	maxRegionTimeout   = time.Minute
	maxRegionLeaseTime = time.Hour
)

func (g *regionFlags) validate() error {
	switch {
	case !g.on():
		if g.refresh != region.DefaultRefresh || g.reportTTL != region.DefaultReportTTL || g.timeoutMin != region.DefaultMinTimeout ||
			g.timeoutMax != region.DefaultMaxTimeout || g.leaseTime != region.DefaultLeaseTime || g.failOpenShare != 1 {
			return errors.New("--region-* need --region")
		}
		return nil
	case len(g.holder) > sluice.MaxGrantHolderLen:
		return fmt.Errorf("--region: %d bytes, want 1 to %d", len(g.holder), sluice.MaxGrantHolderLen)
	case g.refresh < region.MinRefresh || g.refresh > region.MaxRefresh:
		return fmt.Errorf("--region-refresh %v: want %v to %v", g.refresh, region.MinRefresh, region.MaxRefresh)
	case g.reportTTL < sluice.MinGrantTTL || g.reportTTL > sluice.MaxGrantTTL:
		return fmt.Errorf("--region-report-ttl %v: want %v to %v", g.reportTTL, sluice.MinGrantTTL, sluice.MaxGrantTTL)
	case g.timeoutMin < time.Millisecond || g.timeoutMin > maxRegionTimeout:
		return fmt.Errorf("--region-timeout-min %v: want 1ms to %v", g.timeoutMin, maxRegionTimeout)
	case g.timeoutMax < g.timeoutMin || g.timeoutMax > maxRegionTimeout:
		return fmt.Errorf("--region-timeout-max %v: want --region-timeout-min (%v) to %v", g.timeoutMax, g.timeoutMin, maxRegionTimeout)
	case g.leaseTime < time.Millisecond || g.leaseTime > maxRegionLeaseTime:
		return fmt.Errorf("--region-lease-time %v: want 1ms to %v", g.leaseTime, maxRegionLeaseTime)
	case math.IsNaN(g.failOpenShare) || g.failOpenShare < 0 || g.failOpenShare > 1:
		return fmt.Errorf("--region-fail-open-share %v: want a fraction in [0, 1]", g.failOpenShare)
	}
	return nil
}

// validateRegion checks --region against the rest of the shared store's
// flags.
func (g *redisFlags) validateRegion() error {
	r := &g.region
	if !r.on() {
		return nil
	}
	switch {
	case g.url == "" && g.remote.addr == "":
		return errors.New("--region needs a home store that grants: --redis or --remote-store")
	case g.memcache.set():
		return errors.New("--region and --memcache: memcached cannot grant units; use --redis or --remote-store")
	case g.perSecond != "":
		return errors.New("--region and --redis-persecond: the home store's grants count every limit in --redis")
	case g.tiered.set():
		return errors.New("--region and --tiered (--lease-*): with --region each process already decides locally from its grants")
	case g.failover.mode == sluice.FailError:
		return errors.New("--failure-mode error with --region: a process cut off from the home store decides closed or open (from its allowance)")
	}
	return nil
}

// checkGrants refuses to start --region over a home sluice that answered
// that it cannot grant (it serves memcached, or counts per-second limits
// in a second Redis); one that did not answer is found out by the first
// grants, which fail.
func checkGrants(ctx context.Context, r *regionFlags, addr string, st sluice.FullStore, down error) error {
	rs, ok := st.(*remotestore.Store)
	if !r.on() || down != nil || !ok {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeoutMax)
	defer cancel()
	caps, err := rs.Capabilities(cctx)
	if err == nil && !caps.Grant {
		return fmt.Errorf("--region: the home sluice at --remote-store %s cannot grant (its store is memcached, or it counts per-second limits in --redis-persecond)", addr)
	}
	return nil
}

// regionHome is the home store as package region sees it: its grants go
// to the shared store itself (a grant is never decided by a failure mode:
// a failed one is a failed call, which region's own policy handles); the
// decisions region passes on (sliding logs, limits counting every hit,
// several limits at once on a key's first use, permits) go through
// failover, with its deadline, breaker and failure modes.
type regionHome struct {
	sluice.FullStore
	g sluice.Granter
}

func (h regionHome) Grant(ctx context.Context, key string, lim sluice.Limit, r sluice.GrantRequest) (sluice.Grant, error) {
	return h.g.Grant(ctx, key, lim, r)
}

func (h regionHome) String() string { return fmt.Sprint(h.g) }

// openRegion returns package region's store over home (failover over the
// shared store) and g (the shared store's grants).
func openRegion(r *regionFlags, home sluice.FullStore, g sluice.Granter, mode sluice.FailureMode, maxKeys int, reg prometheus.Registerer, log *slog.Logger) (*region.Store, error) {
	opts := []region.Option{
		region.WithRefresh(r.refresh),
		region.WithReportTTL(r.reportTTL),
		region.WithTimeout(r.timeoutMin, r.timeoutMax),
		region.WithLeaseTime(r.leaseTime),
		region.WithFailOpenShare(r.failOpenShare),
		region.WithDefaultMode(mode),
		region.WithLogger(log),
	}
	if maxKeys > 0 {
		opts = append(opts, region.WithMaxKeys(maxKeys))
	}
	st, err := region.New(regionHome{home, g}, r.holder, opts...)
	if err != nil {
		return nil, fmt.Errorf("--region: %w", err)
	}
	if reg != nil {
		if err := reg.Register(regionCollector{st}); err != nil {
			st.Close()
			return nil, err
		}
	}
	return st, nil
}

// regionCollector exports a region store's counters.
type regionCollector struct{ st *region.Store }

var (
	regionDecisionsDesc = prometheus.NewDesc("sluice_region_decisions_total",
		"Decisions of --region by how they were made: local (from units held), local_denied (no units, denied without a call), wait (admitted) and wait_denied (a key's first decisions, which wait for its first grant), degraded_allowed and degraded_denied (by the failure mode, the home store not answering).",
		[]string{"way"}, nil)
	regionCallsDesc = prometheus.NewDesc("sluice_region_home_calls_total",
		"Calls of --region to the home store's grants, by result (ok, error).",
		[]string{"result"}, nil)
	regionReportsDesc = prometheus.NewDesc("sluice_region_home_reports_total",
		"Calls of --region to the home store that asked for no units (a report of demand alone), counted in sluice_region_home_calls_total too.", nil, nil)
	regionUnitsDesc = prometheus.NewDesc("sluice_region_units_total",
		"Units of --region by fate: granted by the home store; late (their answer came after their window ended: dropped); lost (ended unspent).",
		[]string{"fate"}, nil)
	regionDownDesc = prometheus.NewDesc("sluice_region_link_down",
		"1 while the last call of --region to the home store failed (decisions its units cannot serve follow the failure mode), else 0.", nil, nil)
	regionRTTDesc = prometheus.NewDesc("sluice_region_rtt_seconds",
		"The round trip of --region to the home store, smoothed, and the deadline of its calls, by kind (srtt, rttvar, timeout).",
		[]string{"kind"}, nil)
)

func (regionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{regionDecisionsDesc, regionCallsDesc, regionReportsDesc, regionUnitsDesc, regionDownDesc, regionRTTDesc} {
		ch <- d
	}
}

func (c regionCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.st.Stats()
	counter := func(d *prometheus.Desc, v int64, label ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), label...)
	}
	counter(regionDecisionsDesc, s.Local, "local")
	counter(regionDecisionsDesc, s.LocalDenied, "local_denied")
	counter(regionDecisionsDesc, s.Waits-s.WaitDenied, "wait")
	counter(regionDecisionsDesc, s.WaitDenied, "wait_denied")
	counter(regionDecisionsDesc, s.DegradedAllowed, "degraded_allowed")
	counter(regionDecisionsDesc, s.DegradedDenied, "degraded_denied")
	counter(regionCallsDesc, s.Fetches-s.FetchErrors, "ok")
	counter(regionCallsDesc, s.FetchErrors, "error")
	counter(regionReportsDesc, s.Reports)
	counter(regionUnitsDesc, s.Granted, "granted")
	counter(regionUnitsDesc, s.Late, "late")
	counter(regionUnitsDesc, s.Lost, "lost")
	down := 0.0
	if s.Down {
		down = 1
	}
	ch <- prometheus.MustNewConstMetric(regionDownDesc, prometheus.GaugeValue, down)
	for _, r := range []struct {
		kind string
		d    time.Duration
	}{{"srtt", s.SRTT}, {"rttvar", s.RTTVar}, {"timeout", s.Timeout}} {
		ch <- prometheus.MustNewConstMetric(regionRTTDesc, prometheus.GaugeValue, r.d.Seconds(), r.kind)
	}
}
