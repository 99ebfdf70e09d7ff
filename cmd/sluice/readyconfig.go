package main

import (
	"sync"

	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/rls"
)

// configHealth makes /readyz, /healthcheck and gRPC health agree on the
// configuration: with needDomain (--ready-needs-config, the reference's
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED) they report not ready until a
// configuration with at least one domain is in force, and again while one
// with none is; without (--xds-force-start), until a first configuration
// is in force.
type configHealth struct {
	mu         sync.Mutex
	needDomain bool
	ok         bool
	health     *rls.Health // nil until the gRPC server exists
	// warm, when set, is --region's warming: gRPC health is not serving
	// until its first pass is over either.
	warm *warmer
}

// serving is gRPC health's status. h.mu is held.
func (h *configHealth) serving() bool {
	if !h.ok {
		return false
	}
	if h.warm != nil {
		ok, _ := h.warm.ready()
		return ok
	}
	return true
}

// refresh sets gRPC health again (the warming's first pass ended).
func (h *configHealth) refresh() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.health != nil {
		h.health.SetServing(h.serving())
	}
}

// applied follows the configuration put in force (source.Applier.Applied).
func (h *configHealth) applied(c *config.Config) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ok = !h.needDomain || len(c.Domains()) > 0
	if h.health != nil {
		h.health.SetServing(h.serving())
	}
}

// attach makes gRPC health follow the configuration from now on.
func (h *configHealth) attach(g *rls.Health) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.health = g
	g.SetServing(h.serving())
}

// ready is /readyz's condition.
func (h *configHealth) ready() (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.ok:
		return true, ""
	case h.needDomain:
		return false, "no configuration with a domain loaded (--ready-needs-config)"
	}
	return false, "no configuration from xDS yet (--xds-force-start)"
}
