package main

import (
	"sync"

	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/rls"
)

// configHealth is --ready-needs-config (the reference's
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED): /readyz, /healthcheck and gRPC
// health report not ready until a configuration with at least one domain
// is in force, and again while one with none is.
type configHealth struct {
	mu     sync.Mutex
	ok     bool
	health *rls.Health // nil until the gRPC server exists
}

// applied follows the configuration put in force (source.Applier.Applied).
func (h *configHealth) applied(c *config.Config) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ok = len(c.Domains()) > 0
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
	if h.ok {
		return true, ""
	}
	return false, "no configuration with a domain loaded (--ready-needs-config)"
}
