package storeapi

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	storev1 "github.com/sluicehq/sluice/api/sluice/store/v1"
)

// The capabilities of sluice.FullStore that the store API reports.
const (
	capMulti = iota
	capReserve
	capReset
	capSemaphore
	numCaps
)

// probeKey is the key the probes ask about: a key no caller uses by
// accident (it starts with a NUL byte), whose state the probes never
// change.
const probeKey = "\x00sluice/store-api/capability-probe"

// probeHolder is the holder id of the Release probe, which holds nothing.
const probeHolder = "\x00capability-probe"

// probeLimit is the limit of the probes.
var probeLimit = sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Second}

// reprobeAfter is how long an answer that told nothing (the store did not
// answer) is trusted before the capability is probed again.
const reprobeAfter = time.Second

// capabilities learns what a store supports by asking it once per
// capability, with a call that changes nothing: the capability's error
// (its sentinel) says unsupported, an answer says supported. A store that
// did not answer (a failover store whose shared store is down) says
// nothing: the capability is reported supported, as the store's own error
// will tell otherwise, and probed again after reprobeAfter.
type capabilities struct {
	mu    sync.Mutex
	known [numCaps]bool // answered for good
	has   [numCaps]bool
	asked time.Time // the last probe that told nothing
}

// get returns what store supports, probing what is not known yet.
func (c *capabilities) get(ctx context.Context, store sluice.FullStore, log *slog.Logger) *storev1.CapabilitiesResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.allKnown() && time.Since(c.asked) >= reprobeAfter {
		for i := range numCaps {
			if c.known[i] {
				continue
			}
			has, known := probe(ctx, store, i, log)
			c.known[i], c.has[i] = known, has
			if !known {
				c.asked = time.Now()
			}
		}
	}
	r := &storev1.CapabilitiesResponse{}
	for i, p := range []*bool{&r.Multi, &r.Reserve, &r.Reset_, &r.Semaphore} {
		*p = !c.known[i] || c.has[i]
	}
	return r
}

func (c *capabilities) allKnown() bool {
	for _, k := range c.known {
		if !k {
			return false
		}
	}
	return true
}

// probe asks store whether it supports capability i: has, and whether the
// answer is known.
func probe(ctx context.Context, store sluice.FullStore, i int, log *slog.Logger) (has, known bool) {
	var err, sentinel error
	switch i {
	case capMulti:
		_, err = store.AllowMulti(ctx, nil)
		sentinel = sluice.ErrMultiUnsupported
	case capReserve:
		var d sluice.Decision
		d, _, err = store.Reserve(ctx, probeKey, probeLimit, 0)
		sentinel = sluice.ErrReserveUnsupported
		if err == nil && d.Degraded {
			return true, false // failover, its store down: not asked
		}
	case capReset:
		err = store.Reset(ctx, probeKey, probeLimit)
		sentinel = sluice.ErrResetUnsupported
	case capSemaphore:
		err = store.Release(ctx, probeKey, probeHolder)
		sentinel = sluice.ErrSemaphoreUnsupported
	}
	switch {
	case err == nil:
		return true, true
	case errors.Is(err, sentinel):
		return false, true
	}
	log.Debug("store API: a capability probe got no answer; reported supported and asked again later", "capability", i, "err", err)
	return true, false
}
