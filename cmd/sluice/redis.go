package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memcachestore"
	"github.com/sluicehq/sluice/redisstore"
)

// redisFlags are the shared store and the layers serve puts around it: how
// decisions go while it is down (failover) and its local tier. Without
// --redis, serve decides through the memory store, which never fails.
type redisFlags struct {
	url       string
	perSecond string        // a second Redis for the limits of a second or less
	psTimeout time.Duration // its calls' deadline; 0: timeout's
	keyPrefix string
	timeout   time.Duration
	required  bool
	memcache  memcacheFlags // memcached instead of Redis
	failover  failoverFlags
	tiered    tieredFlags
	remote    remoteFlags // --remote-store: another sluice's store API instead
	region    regionFlags // --region: decide from units the shared store grants
}

// maxKeyPrefix bounds --redis-key-prefix: it is in every key name.
const maxKeyPrefix = 128

func (g *redisFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.url, "redis", "", "shared store `URL`: redis://[user:pass@]host:port[/db], rediss:// (TLS), redis+cluster://h1:p1,h2:p2, redis+sentinel://s1:p1?master=name; the memory store when empty")
	fs.StringVar(&g.perSecond, "redis-persecond", "", "a second Redis `URL` (the forms of --redis) that counts the limits of a period of a second or less, as envoyproxy/ratelimit's REDIS_PERSECOND; the others stay in --redis")
	fs.StringVar(&g.keyPrefix, "redis-key-prefix", redisstore.DefaultPrefix, "`prefix` of every Redis key name, so that deployments sharing a Redis keep apart (the reference's CACHE_KEY_PREFIX)")
	fs.DurationVar(&g.timeout, "redis-timeout", 50*time.Millisecond, "deadline of each shared store call")
	fs.DurationVar(&g.psTimeout, "redis-persecond-timeout", 0, "deadline of each --redis-persecond call; 0: --redis-timeout's (the reference's REDIS_PERSECOND_TIMEOUT)")
	fs.BoolVar(&g.required, "redis-required", false, "exit 1 when --redis cannot be reached at start, instead of deciding by the failure policy while connecting in the background")
	g.memcache.register(fs)
	g.failover.register(fs)
	g.tiered.register(fs)
	g.remote.register(fs)
	g.region.register(fs)
}

// shared reports whether decisions go through a shared store (Redis,
// memcached or another sluice's store API) rather than the memory store.
func (g *redisFlags) shared() bool { return g.url != "" || g.memcache.set() || g.remote.addr != "" }

func (g *redisFlags) validate() error {
	if g.timeout <= 0 {
		return fmt.Errorf("--redis-timeout %v: want > 0", g.timeout)
	}
	if len(g.keyPrefix) > maxKeyPrefix {
		return fmt.Errorf("--redis-key-prefix: %d bytes, want at most %d", len(g.keyPrefix), maxKeyPrefix)
	}
	if err := g.memcache.validate(); err != nil {
		return err
	}
	if g.memcache.set() && g.url != "" {
		return errors.New("--redis and --memcache are alternatives: the shared store is Redis or memcached")
	}
	if g.memcache.set() && len(g.keyPrefix) > memcachestore.MaxPrefixLen {
		return fmt.Errorf("--redis-key-prefix: %d bytes, want at most %d with --memcache", len(g.keyPrefix), memcachestore.MaxPrefixLen)
	}
	if err := g.failover.validate(); err != nil {
		return err
	}
	if err := g.remote.validate(); err != nil {
		return err
	}
	if g.remote.addr != "" && (g.url != "" || g.memcache.set()) {
		return errors.New("--remote-store, --redis and --memcache are alternatives: one shared store")
	}
	if err := g.region.validate(); err != nil {
		return err
	}
	if err := g.validateRegion(); err != nil {
		return err
	}
	if g.failover.mode == sluice.FailOpen && g.region.on() && g.failover.replicas == 0 {
		return errors.New("--failure-mode open with --region needs --replicas N (the number of processes deciding through the home store): the limits that are not granted (sliding_log, counting all, several limits at once) are decided at the home store, each process admitting rate/N while it does not answer")
	}
	if g.failover.mode == sluice.FailOpen && g.shared() && g.failover.replicas == 0 {
		return errors.New("--failure-mode open needs --replicas N (the number of sluice replicas): each admits rate/N while the shared store is down")
	}
	if g.tiered.set() && !g.shared() {
		return errors.New("--tiered and --lease-max apply to a shared store (--redis, --memcache or --remote-store) only")
	}
	if err := g.tiered.validate(); err != nil {
		return err
	}
	if g.required && g.url == "" {
		return errors.New("--redis-required needs --redis")
	}
	if g.psTimeout < 0 || g.psTimeout > 0 && g.perSecond == "" {
		return fmt.Errorf("--redis-persecond-timeout %v: want > 0, with --redis-persecond", g.psTimeout)
	}
	if g.perSecond != "" && g.url == "" {
		return errors.New("--redis-persecond needs --redis: it takes the per-second limits off that Redis")
	}
	return nil
}
