package memstore

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"

	"github.com/sluicehq/sluice/internal/algo"
)

// shard is one lock and the states it guards, in an open-addressing table
// (linear probing, backward-shift deletion) that holds the states
// themselves: finding a state costs one probe into one array, and a new
// state allocates nothing but, now and then, a larger table.
type shard struct {
	mu    sync.Mutex
	slots []entry // len is 0 or a power of two; h == 0 marks a free slot
	shift uint8   // 64 - log2(len(slots)): a hash's home slot is h >> shift
	n     int     // states held
	// logs holds the sliding logs, found by index from their states so
	// that a state stays 64 bytes; freeLogs lists the unused indexes.
	logs     []*algo.Log
	freeLogs []int32
	cap      int // 0: unbounded
	// minExp is at most the expiry of every state held: until now reaches
	// it, no state here has expired (expiries only grow, but by Return,
	// which lowers minExp too).
	minExp int64
	// grants holds the holder tables of the grants (grant.go), made on
	// first use.
	grants map[grantKey]*grantTable
	_      [8]byte // keep shards on separate cache lines
}

// entry is one state, in 64 bytes: three words that hold the state of
// every algorithm; a sliding log keeps in a the index (plus one) of its
// log in shard.logs.
type entry struct {
	key     string
	h       uint64 // hash of key and period, with the algorithm in the low bits; 0: a free slot
	period  int64
	expires int64 // µs: at and after this, the state no longer matters
	a, b, c int64
}

// kindMask selects the algorithm in the low bits of a hash.
const kindMask = 7

// log returns e's sliding log, or nil.
func (sh *shard) log(e *entry) *algo.Log {
	if e.kind() != algo.SlidingLog || e.a == 0 {
		return nil
	}
	return sh.logs[e.a-1]
}

// attachLog gives e, a sliding-log state without one, an empty log.
func (sh *shard) attachLog(e *entry) *algo.Log {
	var i int
	if n := len(sh.freeLogs); n > 0 {
		i = int(sh.freeLogs[n-1])
		sh.freeLogs = sh.freeLogs[:n-1]
	} else {
		sh.logs = append(sh.logs, nil)
		i = len(sh.logs) - 1
	}
	l := new(algo.Log)
	sh.logs[i] = l
	e.a = int64(i + 1)
	return l
}

// detachLog frees the log of e, a sliding-log state, if it has one.
func (sh *shard) detachLog(e *entry) {
	if e.a != 0 {
		sh.logs[e.a-1] = nil
		sh.freeLogs = append(sh.freeLogs, int32(e.a-1))
		e.a = 0
	}
}

// minSlots is the size of a shard's first table.
const minSlots = 8

// lookup returns the index of the state rf names, or -1. sh.mu is held.
func (sh *shard) lookup(rf *ref) int { return sh.lookupH(rf.h, rf.period, rf.key) }

// lookupH returns the index of the state with hash h, period and key, or
// -1. sh.mu is held.
func (sh *shard) lookupH(h uint64, period int64, key string) int {
	if sh.n == 0 {
		return -1
	}
	mask := len(sh.slots) - 1
	for i := int(h >> sh.shift); ; i = (i + 1) & mask {
		e := &sh.slots[i]
		if e.h == h && e.period == period && e.key == key {
			return i
		}
		if e.h == 0 {
			return -1
		}
	}
}

// insert adds an empty state for rf, which must not be held, making room
// first when the shard is full. The pointer is valid until the shard's
// next insert. sh.mu is held.
func (sh *shard) insert(rf *ref, now int64, s *Store) *entry {
	return sh.insertH(rf.h, rf.period, rf.key, now, s)
}

func (sh *shard) insertH(h uint64, period int64, key string, now int64, s *Store) *entry {
	if sh.cap > 0 && sh.n >= sh.cap {
		sh.makeRoom(now, s)
	}
	if (sh.n+1)*4 > len(sh.slots)*3 {
		sh.resize(max(2*len(sh.slots), minSlots))
	}
	e := sh.place(h)
	e.key, e.period = key, period
	sh.n++
	return e
}

// place returns the free slot where a state hashed h goes, marked used.
func (sh *shard) place(h uint64) *entry {
	mask := len(sh.slots) - 1
	i := int(h >> sh.shift)
	for sh.slots[i].h != 0 {
		i = (i + 1) & mask
	}
	e := &sh.slots[i]
	e.h = h
	return e
}

// resize moves the states to a table of size slots (a power of two).
func (sh *shard) resize(size int) {
	old := sh.slots
	sh.slots = make([]entry, size)
	sh.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	for i := range old {
		if old[i].h != 0 {
			*sh.place(old[i].h) = old[i]
		}
	}
}

// removeAt frees slot i, shifting back the states after it that probed
// past it. sh.mu is held.
func (sh *shard) removeAt(i int) {
	if sh.slots[i].kind() == algo.SlidingLog {
		sh.detachLog(&sh.slots[i])
	}
	mask := len(sh.slots) - 1
	for j := (i + 1) & mask; sh.slots[j].h != 0; j = (j + 1) & mask {
		home := int(sh.slots[j].h >> sh.shift)
		// The state at j stays when its home lies cyclically in (i, j].
		if i <= j && i < home && home <= j || i > j && (i < home || home <= j) {
			continue
		}
		sh.slots[i] = sh.slots[j]
		i = j
	}
	sh.slots[i] = entry{}
	sh.n--
}

// setState copies the state of f (a fresh entry that was stepped) into e.
func (e *entry) setState(f *entry) {
	e.expires, e.a, e.b, e.c = f.expires, f.a, f.b, f.c
}

// noteExpiry keeps minExp a lower bound after a state's expiry was set.
func (sh *shard) noteExpiry(exp int64) {
	sh.minExp = min(sh.minExp, exp)
}

// sweep removes the expired states, recomputes minExp and shrinks a
// mostly empty table. sh.mu is held.
func (sh *shard) sweep(now int64) {
	if now < sh.minExp {
		return // nothing has expired yet
	}
	least := int64(math.MaxInt64)
	for i := 0; i < len(sh.slots); {
		e := &sh.slots[i]
		switch {
		case e.h == 0:
			i++
		case e.expires <= now:
			sh.removeAt(i) // a later state may move into i: look again
		default:
			least = min(least, e.expires)
			i++
		}
	}
	sh.minExp = least
	if sh.n == 0 {
		sh.slots = nil
		if len(sh.freeLogs) == len(sh.logs) { // no log is held, not even by a state being inserted
			sh.logs, sh.freeLogs = nil, nil
		}
		return
	}
	if len(sh.slots) > minSlots && sh.n*8 < len(sh.slots) {
		size := minSlots
		for size*3 < sh.n*4*2 {
			size *= 2
		}
		sh.resize(size)
	}
}

// evictSample is how many states a full shard looks at to choose a live
// one to evict.
const evictSample = 16

// makeRoom frees one place in a full shard: every expired state when there
// is one (found without a scan while none can be), otherwise the live state
// of a sample that expires soonest. sh.mu is held.
func (sh *shard) makeRoom(now int64, s *Store) {
	sh.sweep(now)
	if sh.n < sh.cap || sh.n == 0 {
		return
	}
	mask := len(sh.slots) - 1
	victim, seen := -1, 0
	for i := rand.IntN(len(sh.slots)); seen < evictSample && seen < sh.n; i = (i + 1) & mask {
		if sh.slots[i].h == 0 {
			continue
		}
		if victim < 0 || sh.slots[i].expires < sh.slots[victim].expires {
			victim = i
		}
		seen++
	}
	sh.removeAt(victim)
	s.evictions.Add(1)
	if s.onEvict != nil {
		s.onEvict()
	}
}
