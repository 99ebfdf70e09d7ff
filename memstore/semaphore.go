package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

var (
	_ sluice.Semaphore   = (*Store)(nil)
	_ sluice.PermitWaker = (*Store)(nil)
)

// ErrSemaphoreFull reports an Acquire of a new key when the store holds
// WithMaxKeys semaphore keys with live permits: a live permit is never
// evicted, since forgetting it would admit more than Max at once.
var ErrSemaphoreFull = errors.New("memstore: semaphore keys full")

// semTable holds the concurrency limits: per key, its holders and the
// expiry of each. It is sharded like the rate states, and bounded by
// WithMaxKeys separately from them.
type semTable struct {
	shards []semShard
	n      atomic.Int64 // keys held, for the bound
}

type semShard struct {
	mu   sync.Mutex
	keys map[string]*semKey
}

// semKey is one key's permits.
type semKey struct {
	holders map[string]int64 // holder → TTL end, µs on the store's clock
	last    int64            // the latest time seen: the clock is clamped so it never runs backwards for the key
	freed   chan struct{}    // closed when a permit is released or expires; nil when nobody waits
	timer   *time.Timer      // wakes freed at the earliest expiry
}

func (t *semTable) init(n int) {
	t.shards = make([]semShard, n)
	for i := range t.shards {
		t.shards[i].keys = make(map[string]*semKey)
	}
}

func (s *Store) semShard(key string) *semShard {
	return &s.sem.shards[maphash.String(s.seed, key)&s.mask]
}

// semCheck validates a call before any state is touched.
func (s *Store) semCheck(ctx context.Context, key string, lim *sluice.ConcurrencyLimit, holder string) error {
	if s.closed.Load() {
		return s.closedErr()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if key == "" || len(key) > sluice.MaxKeyLen {
		return sluice.ValidateKey(key)
	}
	if lim != nil {
		*lim = lim.Normalize()
		if err := lim.Validate(); err != nil {
			return err
		}
	}
	return sluice.ValidateHolder(holder)
}

// trim removes the expired permits of k at now (clamped so that it never
// runs backwards for the key) and returns now; when one was removed, it
// wakes the waiters.
func (k *semKey) trim(now int64) int64 {
	now = max(now, k.last)
	k.last = now
	removed := false
	for h, exp := range k.holders {
		if exp <= now {
			delete(k.holders, h)
			removed = true
		}
	}
	if removed {
		k.wake()
	}
	return now
}

// wake closes k's freed channel, if anybody waits on it.
func (k *semKey) wake() {
	if k.freed != nil {
		close(k.freed)
		k.freed = nil
	}
	if k.timer != nil {
		k.timer.Stop()
		k.timer = nil
	}
}

// earliest is the earliest TTL end of k's permits.
func (k *semKey) earliest() int64 {
	first := int64(0)
	for _, exp := range k.holders {
		if first == 0 || exp < first {
			first = exp
		}
	}
	return first
}

// drop removes k from sh when it holds no permit and nobody waits on it.
func (s *Store) semDrop(sh *semShard, key string, k *semKey) {
	if len(k.holders) == 0 && k.freed == nil {
		delete(sh.keys, key)
		s.sem.n.Add(-1)
	}
}

// Acquire implements sluice.Semaphore on the store's clock (WithClock),
// clamped per key so that it never runs backwards: a permit is held while
// the clock is before its TTL's end, and free from that instant. Every
// call on a key first removes its expired permits. A denial's RetryAfter
// is the time to the earliest TTL end. A new key when WithMaxKeys keys
// hold live permits is an error wrapping ErrSemaphoreFull.
func (s *Store) Acquire(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	if err := s.semCheck(ctx, key, &lim, holder); err != nil {
		return sluice.PermitDecision{}, fmt.Errorf("memstore: acquire: %w", err)
	}
	now := s.nowMicro()
	sh := s.semShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.keys[key]
	if k == nil {
		if s.maxKeys > 0 && s.sem.n.Load() >= int64(s.maxKeys) {
			s.semSweepShard(sh, now)
			if s.sem.n.Load() >= int64(s.maxKeys) {
				return sluice.PermitDecision{}, fmt.Errorf("memstore: acquire %q: %w (%d keys)", key, ErrSemaphoreFull, s.maxKeys)
			}
		}
		k = &semKey{holders: make(map[string]int64, 1)}
		sh.keys[key] = k
		s.sem.n.Add(1)
	}
	now = k.trim(now)
	d := sluice.PermitDecision{Limit: lim}
	_, holds := k.holders[holder]
	if !holds && len(k.holders) >= lim.Max {
		d.Held = len(k.holders)
		d.RetryAfter = time.Duration(k.earliest()-now) * time.Microsecond
		return d, nil
	}
	exp := now + lim.TTL.Microseconds()
	k.holders[holder] = exp
	d.Acquired, d.Held, d.Expires = true, len(k.holders), time.UnixMicro(exp)
	return d, nil
}

// Release implements sluice.Semaphore. Releasing a permit that is not
// held is not an error.
func (s *Store) Release(ctx context.Context, key string, holder string) error {
	if err := s.semCheck(ctx, key, nil, holder); err != nil {
		return fmt.Errorf("memstore: release: %w", err)
	}
	now := s.nowMicro()
	sh := s.semShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.keys[key]
	if k == nil {
		return nil
	}
	k.trim(now)
	if _, ok := k.holders[holder]; ok {
		delete(k.holders, holder)
		k.wake()
	}
	s.semDrop(sh, key, k)
	return nil
}

// Extend implements sluice.Semaphore.
func (s *Store) Extend(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	if err := s.semCheck(ctx, key, &lim, holder); err != nil {
		return sluice.PermitDecision{}, fmt.Errorf("memstore: extend: %w", err)
	}
	now := s.nowMicro()
	sh := s.semShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	d := sluice.PermitDecision{Limit: lim}
	k := sh.keys[key]
	if k != nil {
		now = k.trim(now)
		d.Held = len(k.holders)
		if _, ok := k.holders[holder]; ok {
			exp := now + lim.TTL.Microseconds()
			k.holders[holder] = exp
			d.Acquired, d.Expires = true, time.UnixMicro(exp)
			return d, nil
		}
		if len(k.holders) > 0 {
			d.RetryAfter = time.Duration(k.earliest()-now) * time.Microsecond
		}
		s.semDrop(sh, key, k)
	}
	return d, fmt.Errorf("memstore: extend %q: %w", key, sluice.ErrPermitLost)
}

// Freed implements sluice.PermitWaker: the channel is closed when a permit
// of key is released or its TTL ends (on a store with the default clock;
// with WithClock, only a call that finds it expired closes it), or at once
// when none is held. Each call may return a new channel: call Freed before
// each try.
func (s *Store) Freed(key string) <-chan struct{} {
	sh := s.semShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.keys[key]
	if k == nil || s.closed.Load() {
		c := make(chan struct{})
		close(c)
		return c
	}
	now := k.trim(s.nowMicro())
	if len(k.holders) == 0 {
		c := make(chan struct{})
		close(c)
		s.semDrop(sh, key, k)
		return c
	}
	if k.freed == nil {
		k.freed = make(chan struct{})
	}
	s.semSchedule(sh, key, k, now)
	return k.freed
}

// semSchedule makes k's freed channel close at k's earliest TTL end, on
// the default clock (a fake clock has no timers). A permit extended in the
// meantime makes the timer find none expired: it schedules itself again.
func (s *Store) semSchedule(sh *semShard, key string, k *semKey, now int64) {
	if k.timer != nil || k.freed == nil || s.now != nil || len(k.holders) == 0 {
		return
	}
	wait := time.Duration(k.earliest()-now) * time.Microsecond
	k.timer = time.AfterFunc(wait, func() {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if sh.keys[key] != k {
			return
		}
		k.timer = nil
		now := k.trim(s.nowMicro())
		s.semSchedule(sh, key, k, now)
		s.semDrop(sh, key, k)
	})
}

// Held reports the permits of key held now, for tests and metrics.
func (s *Store) Held(key string) int {
	sh := s.semShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.keys[key]
	if k == nil {
		return 0
	}
	k.trim(s.nowMicro())
	return len(k.holders)
}

// semSweepShard removes the expired permits of sh, and its keys left with
// none.
func (s *Store) semSweepShard(sh *semShard, now int64) {
	for key, k := range sh.keys {
		k.trim(now)
		s.semDrop(sh, key, k)
	}
}

// sweepSem removes the expired permits, and the keys left with none.
func (s *Store) sweepSem(now int64) {
	for i := range s.sem.shards {
		sh := &s.sem.shards[i]
		sh.mu.Lock()
		s.semSweepShard(sh, now)
		sh.mu.Unlock()
	}
}
