package memstore

import (
	"math"
	"sync"

	"github.com/sluicehq/sluice/internal/algo"
)

// shard is one lock and the states it guards, in a map from a 64-bit hash
// of (key, algorithm, period) to a chain of entries (a chain longer than one
// only on a hash collision).
type shard struct {
	mu  sync.Mutex
	m   map[uint64]*entry
	n   int // states held
	cap int // 0: unbounded
	// minExp is at most the expiry of every state held: until now reaches
	// it, no state here has expired (expiries only grow, but by Return,
	// which lowers minExp too).
	minExp int64
	_      [24]byte // keep shards on separate cache lines
}

// entry is one state: three words that hold the state of every algorithm
// but the log, or the log. The fields a decision reads come first, in one
// cache line.
type entry struct {
	key     string
	period  int64
	expires int64 // µs: at and after this, the state no longer matters
	a, b, c int64
	kind    algo.Kind
	log     *algo.Log
	h       uint64 // the key of the shard map
	next    *entry // the next state in the same chain
}

// lookup returns the state rf names, or nil. sh.mu is held.
func (sh *shard) lookup(rf *ref) *entry {
	for e := sh.m[rf.h]; e != nil; e = e.next {
		if e.period == rf.period && e.kind == rf.kind && e.key == rf.key {
			return e
		}
	}
	return nil
}

// insert adds an empty state for rf, which must not be held, making room
// first when the shard is full. sh.mu is held.
func (sh *shard) insert(rf *ref, now int64, s *Store) *entry {
	if sh.cap > 0 && sh.n >= sh.cap {
		sh.makeRoom(now, s)
	}
	e := &entry{key: rf.key, kind: rf.kind, period: rf.period, h: rf.h, next: sh.m[rf.h]}
	sh.m[rf.h] = e
	sh.n++
	return e
}

// setState copies the state of f (a fresh entry that was stepped) into e.
func (e *entry) setState(f *entry) {
	e.expires, e.a, e.b, e.c, e.log = f.expires, f.a, f.b, f.c, f.log
}

// remove drops e from the shard. sh.mu is held.
func (sh *shard) remove(e *entry) {
	head := sh.m[e.h]
	if head == e {
		if e.next == nil {
			delete(sh.m, e.h)
		} else {
			sh.m[e.h] = e.next
		}
	} else {
		for p := head; p != nil; p = p.next {
			if p.next == e {
				p.next = e.next
				break
			}
		}
	}
	e.next = nil
	sh.n--
}

// noteExpiry keeps minExp a lower bound after a state's expiry was set.
func (sh *shard) noteExpiry(exp int64) {
	sh.minExp = min(sh.minExp, exp)
}

// sweep removes the expired states and recomputes minExp. sh.mu is held.
func (sh *shard) sweep(now int64) {
	if now < sh.minExp {
		return // nothing has expired yet
	}
	least := int64(math.MaxInt64)
	for _, head := range sh.m {
		for e := head; e != nil; {
			next := e.next
			if e.expires <= now {
				sh.remove(e)
			} else {
				least = min(least, e.expires)
			}
			e = next
		}
	}
	sh.minExp = least
}

// evictSample is how many chains a full shard looks at to choose a live
// state to evict.
const evictSample = 16

// makeRoom frees one place in a full shard: every expired state when there
// is one (found without a scan while none can be), otherwise the live state
// of a sample that expires soonest. sh.mu is held.
func (sh *shard) makeRoom(now int64, s *Store) {
	sh.sweep(now)
	if sh.n < sh.cap {
		return
	}
	var victim *entry
	seen := 0
	for _, head := range sh.m { // map iteration starts at a random entry
		for e := head; e != nil; e = e.next {
			if victim == nil || e.expires < victim.expires {
				victim = e
			}
		}
		if seen++; seen >= evictSample {
			break
		}
	}
	if victim != nil {
		sh.remove(victim)
		s.evictions.Add(1)
	}
}
