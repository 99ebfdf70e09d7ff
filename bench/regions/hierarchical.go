package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/region"
	"github.com/sluicehq/sluice/tiered"
)

// hierarchical: a region's service (package region over the home store)
// holds units the home store grants it, sized by the region's demand and
// fair share, fetched ahead of need; the region's members lease smaller
// amounts from it (tiered.WithLeases with refresh ahead) over the region
// hop, and decide locally. Each process keeps its own value (the
// strategy's state is per process): a service records what the home
// store granted it, for the report's exact count.
type hierarchical struct {
	mu     sync.Mutex
	grants []int64 // pairs: the home store's window start (µs), units granted
	stats  region.Stats
}

func (*hierarchical) About() string {
	return "a region service (package region over redisstore) holds units granted by demand, fetched ahead; members lease from it (tiered leases, refresh ahead) over an in-harness RPC standing in for the remote store API"
}

func (*hierarchical) ServicesPerRegion() int { return 1 }

// Member leases: at most 10 units, a hundredth of the capacity, for a
// second at most (a window's end first), the next one taken ahead at half.
// Small, since the region service is a millisecond away and measures its
// demand by the units its members ask for: leases of 50 (a member's
// demand over a tenth of a second at most is 25 here) made the quiet
// regions ask for shares they could not spend, and below the limit the
// busy region was granted less (util 0.60 in the shift scenario; 0.79
// with these).
func memberLeases() []tiered.Option {
	return []tiered.Option{tiered.WithLeases(10, 0.01, time.Second), tiered.WithRefreshAhead(0.5)}
}

func (h *hierarchical) NewStore(_ context.Context, m Member) (sluice.Store, error) {
	rc, err := dialRPC(m.ServiceAddrs[0])
	if err != nil {
		return nil, err
	}
	t, err := tiered.New(rc, memberLeases()...)
	if err != nil {
		rc.Close()
		return nil, err
	}
	return &closing{Store: t, closers: []io.Closer{t, rc}}, nil
}

// recordingHome is the home store as a region service sees it: every
// grant it answers is recorded by the home store's window.
type recordingHome struct {
	*redisstore.Store
	h *hierarchical
}

func (r *recordingHome) Grant(ctx context.Context, key string, lim sluice.Limit, req sluice.GrantRequest) (sluice.Grant, error) {
	g, err := r.Store.Grant(ctx, key, lim, req)
	if err == nil && g.Units > 0 {
		r.h.mu.Lock()
		r.h.grants = append(r.h.grants, g.Window.UnixMicro(), int64(g.Units))
		r.h.mu.Unlock()
	}
	return g, err
}

func (h *hierarchical) Serve(ctx context.Context, s Service, ln net.Listener) error {
	c, err := dialHome(s.HomeAddr)
	if err != nil {
		return err
	}
	defer c.Close()
	rs := redisstore.NewRueidis(c)
	defer rs.Close()
	mode := s.Limit.FailureMode
	if mode == sluice.FailDefault {
		mode = sluice.FailClosed
	}
	st, err := region.New(&recordingHome{rs, h}, s.Region, region.WithDefaultMode(mode))
	if err != nil {
		return err
	}
	err = serveRPC(ctx, st, ln)
	st.Close()
	h.mu.Lock()
	h.stats = st.Stats()
	h.mu.Unlock()
	return err
}

// report is what a service adds to its result: the grants and its
// region.Stats.
func (h *hierarchical) report(res *childResult) {
	h.mu.Lock()
	defer h.mu.Unlock()
	res.Grants = h.grants
	res.Stats, _ = json.Marshal(h.stats)
}

// regionHolders: every member is a holder of its own at the home store
// (package region over redisstore, named region-index), as `sluice serve
// --region` runs a region's fleet: no region tier, so a decision never
// leaves its process while the member's units last; the home store sees
// Members holders per key instead of Regions.
type regionHolders struct{}

func (regionHolders) About() string {
	return "each member holds units granted by demand by the home store itself (package region over redisstore, one holder per process, as sluice serve --region), fetched ahead; no region tier"
}

func (regionHolders) NewStore(_ context.Context, m Member) (sluice.Store, error) {
	c, err := dialHome(m.HomeAddr)
	if err != nil {
		return nil, err
	}
	rs := redisstore.NewRueidis(c)
	mode := m.Limit.FailureMode
	if mode == sluice.FailDefault {
		mode = sluice.FailClosed
	}
	st, err := region.New(rs, fmt.Sprintf("%s-%d", m.Region, m.Index), region.WithDefaultMode(mode))
	if err != nil {
		rs.Close()
		c.Close()
		return nil, err
	}
	return &closing{Store: st, closers: []io.Closer{st, rs, closerFunc(c.Close)}}, nil
}
