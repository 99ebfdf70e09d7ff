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
}

// applied follows the configuration put in force (source.Applier.Applied).
func (h *configHealth) applied(c *config.Config) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ok = !h.needDomain || len(c.Domains()) > 0
	if h.health != nil {
		h.health.SetServing(h.ok)
	}
}

// attach makes gRPC health follow the configuration from now on.
func (h *configHealth) attach(g *rls.Health) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.health = g
	g.SetServing(h.ok)
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
