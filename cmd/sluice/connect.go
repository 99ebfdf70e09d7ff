package main

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/config"
)

// connectTimeout bounds the attempt to reach Redis at start; when Redis is
// unreachable then, serve decides through a redisstore.Later, which keeps
// connecting in the background.
const connectTimeout = 5 * time.Second

// checkFailureModes rejects a configuration that would fail open with no
// local share: with --redis and no --replicas, a rule's failure_mode: open
// would deny everything during an outage instead.
func checkFailureModes(c *config.Config, f *serveFlags) error {
	if !f.redis.shared() || f.redis.failover.replicas > 0 {
		return nil
	}
	for _, r := range c.Rules() {
		if r.Limit.FailureMode == sluice.FailOpen {
			return fmt.Errorf("rule %s: failure_mode: open needs --replicas N (the number of sluice replicas) with a shared store (--redis, --memcache or --remote-store): each admits rate/N while it is down", r.Name)
		}
	}
	return nil
}
