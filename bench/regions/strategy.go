package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/stack"
	"github.com/sluicehq/sluice/tiered"
)

// A Strategy is one way for the regions to share one quota: it builds the
// sluice.Store that each region member decides through. The harness runs
// NewStore in the member's own process; the store may implement io.Closer,
// which the member calls after its last decision.
type Strategy interface {
	// About says in one line what the strategy does.
	About() string
	NewStore(ctx context.Context, m Member) (sluice.Store, error)
}

// RegionService is a Strategy that runs a tier of its own in each region:
// the slot of the hierarchical design, where a region's service fleet holds
// leases from the home store and hands smaller ones to the region's
// members. The harness starts ServicesPerRegion() processes per region, each
// running Serve on a loopback listener of its own and reaching the home
// store over the region's WAN link (Service.HomeAddr); the region's members
// reach them over a local link (Member.ServiceAddrs, LocalRTT away).
type RegionService interface {
	Strategy
	ServicesPerRegion() int
	// Serve serves the region's members on ln until ctx ends.
	Serve(ctx context.Context, s Service, ln net.Listener) error
}

// Member is what a strategy knows of one region member (one process).
type Member struct {
	Region      string
	RegionIndex int
	Index       int // within the region
	Regions     int
	PerRegion   int // members per region
	Members     int // in all regions
	// HomeAddr reaches the home store (redis-server) over this region's WAN
	// link; ServiceAddrs reach the region's service processes (RegionService
	// strategies only) over the local link.
	HomeAddr     string
	ServiceAddrs []string
	// RTT and Jitter are the WAN link's, as configured: what an operator
	// would have measured, to set timeouts by.
	RTT, Jitter time.Duration
	Limit       sluice.Limit
}

// Service is what a strategy knows of one of a region's service processes.
type Service struct {
	Region      string
	RegionIndex int
	Index       int
	Regions     int
	PerRegion   int // services per region
	Members     int // members in all regions
	HomeAddr    string
	RTT, Jitter time.Duration
	Limit       sluice.Limit
}

var strategies = map[string]Strategy{
	"remote":          remote{wan: true},
	"remote-default":  remote{},
	"remote-adaptive": remote{adaptive: true},
	"tiered-leases":   tieredLeases{wan: true},
	"tiered-default":  tieredLeases{},
	"sync-100ms":      syncStrategy{interval: 100 * time.Millisecond},
	"hierarchical":    &hierarchical{},
	"region-holders":  regionHolders{},
}

// slots are strategies to come: the name, and what it will be.
var slots = map[string]string{}

// strategyNames lists the strategies, sorted.
func strategyNames() []string {
	names := make([]string, 0, len(strategies))
	for n := range strategies {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func lookupStrategy(name string) (Strategy, error) {
	if about, ok := slots[name]; ok {
		return nil, fmt.Errorf("strategy %s: %w: %s; see RegionService in strategy.go", name, errNotBuilt, about)
	}
	s, ok := strategies[name]
	if !ok {
		return nil, fmt.Errorf("strategy %q: %w (have %v)", name, errUnknown, strategyNames())
	}
	return s, nil
}

// errNotBuilt is the answer for a slot.
var errNotBuilt = errors.New("not built yet")

// WANTimeout is the failover deadline the WAN strategies set: eight round
// trips with their jitter, at least 500 ms and at most 1 s, so that a
// round trip slowed by a lost segment (200 ms) or a busy machine is not
// taken for an outage, while an outage is still noticed well within a
// caller's deadline of a few seconds. failover's default (50 ms) is below
// an 80 ms round trip: every call would time out.
func WANTimeout(rtt, jitter time.Duration) time.Duration {
	return min(max(8*(rtt+jitter), 500*time.Millisecond), time.Second)
}

// dialHome opens a rueidis client to the home store at addr.
func dialHome(addr string) (rueidis.Client, error) {
	return rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{addr},
		DisableCache: true,
		// A decision is never retried (a retry may count twice); rueidis
		// retries only read-only commands, which decisions are not.
		DisableRetry: true,
	})
}

// failoverOptions are the failover settings of a member: the limit's
// failure mode by default, FailOpen shares of Rate/Members, with wan a
// deadline above the link's round trip, with adaptive a deadline that
// follows the measured round trip (failover.WithAdaptiveTimeout from
// 200 ms to 2 s).
func failoverOptions(m Member, wan, adaptive bool) []failover.Option {
	mode := m.Limit.FailureMode
	if mode == sluice.FailDefault {
		mode = sluice.FailClosed
	}
	opts := []failover.Option{failover.WithReplicas(m.Members), failover.WithDefaultMode(mode)}
	switch {
	case adaptive:
		opts = append(opts, failover.WithAdaptiveTimeout(200*time.Millisecond, 2*time.Second))
	case wan:
		opts = append(opts, failover.WithTimeout(WANTimeout(m.RTT, m.Jitter)))
	}
	return opts
}

// closing is a store that closes what it was built on, in order.
type closing struct {
	sluice.Store
	closers []io.Closer
}

func (c *closing) Close() error {
	var errs []error
	for _, cl := range c.closers {
		errs = append(errs, cl.Close())
	}
	return errors.Join(errs...)
}

// warmer is a store that can learn of a key before its first decision
// (region.Store).
type warmer interface {
	Warm(ctx context.Context, key string, lim sluice.Limit) error
}

// Warm warms key when the store can.
func (c *closing) Warm(ctx context.Context, key string, lim sluice.Limit) error {
	if w, ok := c.Store.(warmer); ok {
		return w.Warm(ctx, key, lim)
	}
	return nil
}

type closerFunc func()

func (f closerFunc) Close() error { f(); return nil }

// remote: every decision is a call to the home store, through failover.
type remote struct{ wan, adaptive bool }

func (r remote) About() string {
	if r.adaptive {
		return "every decision a call to the home store: failover(redisstore), deadline from the measured round trip (WithAdaptiveTimeout(200ms, 2s))"
	}
	if r.wan {
		return "every decision a call to the home store: failover(redisstore), deadline WANTimeout (8 RTT, 500 ms to 1 s)"
	}
	return "every decision a call to the home store: failover(redisstore) with its defaults (50 ms deadline)"
}

func (r remote) NewStore(_ context.Context, m Member) (sluice.Store, error) {
	c, err := dialHome(m.HomeAddr)
	if err != nil {
		return nil, err
	}
	rs := redisstore.NewRueidis(c)
	fo, err := failover.New(rs, failoverOptions(m, r.wan, r.adaptive)...)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &closing{Store: fo, closers: []io.Closer{fo, rs, closerFunc(c.Close)}}, nil
}

// tieredLeases: the stack, tiered(failover(redisstore)), with leases.
type tieredLeases struct{ wan bool }

func (t tieredLeases) About() string {
	if t.wan {
		return "stack: tiered.WithLeases(100, 0.1, 1s) over failover(redisstore), deadline WANTimeout"
	}
	return "stack: tiered.WithLeases(100, 0.1, 1s) over failover(redisstore) with its defaults (50 ms deadline)"
}

func (t tieredLeases) NewStore(_ context.Context, m Member) (sluice.Store, error) {
	c, err := dialHome(m.HomeAddr)
	if err != nil {
		return nil, err
	}
	rs := redisstore.NewRueidis(c)
	st, err := stack.New(rs,
		stack.WithTiered(tiered.WithLeases(100, 0.1, time.Second)),
		stack.WithFailover(failoverOptions(m, t.wan, false)...))
	if err != nil {
		c.Close()
		return nil, err
	}
	return &closing{Store: st, closers: []io.Closer{st, rs, closerFunc(c.Close)}}, nil
}
