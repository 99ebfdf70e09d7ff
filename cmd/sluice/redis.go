package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// redisFlags are the shared store and the layers serve puts around it: how
// decisions go while it is down (failover) and its local tier. Without
// --redis, serve decides through the memory store, which never fails.
type redisFlags struct {
	url       string
	keyPrefix string
	timeout   time.Duration
	required  bool
	failover  failoverFlags
	tiered    tieredFlags
	remote    remoteFlags // --remote-store: another sluice's store API instead
}

// maxKeyPrefix bounds --redis-key-prefix: it is in every key name.
const maxKeyPrefix = 128

func (g *redisFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.url, "redis", "", "shared store `URL`: redis://[user:pass@]host:port[/db], rediss:// (TLS), redis+cluster://h1:p1,h2:p2, redis+sentinel://s1:p1?master=name; the memory store when empty")
	fs.StringVar(&g.keyPrefix, "redis-key-prefix", redisstore.DefaultPrefix, "`prefix` of every Redis key name, so that deployments sharing a Redis keep apart (the reference's CACHE_KEY_PREFIX)")
	fs.DurationVar(&g.timeout, "redis-timeout", 50*time.Millisecond, "deadline of each shared store call")
	fs.BoolVar(&g.required, "redis-required", false, "exit 1 when --redis cannot be reached at start, instead of deciding by the failure policy while connecting in the background")
	g.failover.register(fs)
	g.tiered.register(fs)
	g.remote.register(fs)
}

// shared reports whether a shared store is set: --redis or --remote-store.
func (g *redisFlags) shared() bool { return g.url != "" || g.remote.addr != "" }

func (g *redisFlags) validate() error {
	if g.timeout <= 0 {
		return fmt.Errorf("--redis-timeout %v: want > 0", g.timeout)
	}
	if len(g.keyPrefix) > maxKeyPrefix {
		return fmt.Errorf("--redis-key-prefix: %d bytes, want at most %d", len(g.keyPrefix), maxKeyPrefix)
	}
	if err := g.failover.validate(); err != nil {
		return err
	}
	if err := g.remote.validate(); err != nil {
		return err
	}
	if g.url != "" && g.remote.addr != "" {
		return errors.New("--redis and --remote-store are alternatives: one shared store")
	}
	if g.failover.mode == sluice.FailOpen && g.shared() && g.failover.replicas == 0 {
		return errors.New("--failure-mode open needs --replicas N (the number of sluice replicas): each admits rate/N while the shared store is down")
	}
	if g.tiered.set() && !g.shared() {
		return errors.New("--tiered and --lease-max apply to --redis and --remote-store only")
	}
	if err := g.tiered.validate(); err != nil {
		return err
	}
	if g.required && g.url == "" {
		return errors.New("--redis-required needs --redis")
	}
	return nil
}
