// Package bound carries the deadline of a store call to a store that
// enforces it itself, so that the caller need not make a cancellable
// context and a timer for every call (context.WithTimeout: about ten heap
// allocations and a timer, a tenth of a Redis decision's CPU in sluice
// serve). failover gives its deadline this way to a shared store that is an
// Enforcer; any other store gets context.WithTimeout as before.
package bound

import (
	"context"
	"sync"
	"time"
)

// Enforcer is a store whose AllowN and Reserve return by the deadline of a
// context made by With (within Slack), whatever its Done channel says.
type Enforcer interface {
	// EnforcesDeadline reports whether it does (it may depend on the
	// store's configuration).
	EnforcesDeadline() bool
}

// boundCtx is a parent context with a deadline that its Done and Err do
// not report: the callee enforces it.
type boundCtx struct {
	context.Context
	d time.Time
}

// With returns parent with deadline d, reported by Deadline (or parent's
// own, when earlier) but enforced by neither Done nor Err: only a callee
// that knows of it (Of) ends the call at d.
func With(parent context.Context, d time.Time) context.Context {
	return &boundCtx{Context: parent, d: d}
}

func (c *boundCtx) Deadline() (time.Time, bool) {
	if pd, ok := c.Context.Deadline(); ok && pd.Before(c.d) {
		return pd, true
	}
	return c.d, true
}

// Of returns the deadline that With set on ctx itself (not on a context it
// derives from), and whether there is one.
func Of(ctx context.Context) (time.Time, bool) {
	if c, ok := ctx.(*boundCtx); ok {
		return c.d, true
	}
	return time.Time{}, false
}

// Slack is how late a Wheel's channel may close after its deadline: the
// deadlines of one slot share one channel and one timer.
const Slack = time.Millisecond

// Wheel hands out channels that close at a deadline, one channel and one
// timer per Slack of deadlines, shared by every caller whose deadline
// falls in it: at tens of thousands of calls a second with one timeout,
// about one timer a millisecond instead of one per call. A caller lets its
// slot go (Release) once it no longer waits; a slot that no caller waits
// on any more stops its timer, so that the deadlines of calls that ended
// in time (almost all of them) fire no timer and start no goroutine. The
// zero Wheel is ready for use.
type Wheel struct {
	mu    sync.Mutex
	epoch time.Time
	slots map[int64]*Slot
}

// Slot is one Slack of a Wheel's deadlines: what After returns, to wait on
// (Done) and then to give back (Wheel.Release).
type Slot struct {
	key     int64
	ch      chan struct{}
	timer   *time.Timer
	waiters int // under the Wheel's mu
}

// Done returns the channel closed at the slot's end.
func (s *Slot) Done() <-chan struct{} { return s.ch }

// After returns the slot of deadline d: its channel closes at d or up to
// Slack after it (at once for a deadline passed), unless every caller of
// After on it has released it by then. Each call of After must be
// followed by one of Release.
func (w *Wheel) After(d time.Time) *Slot {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.slots == nil {
		w.slots = map[int64]*Slot{}
		w.epoch = time.Now()
	}
	// The slot ends at or after d, on the monotonic clock (d from
	// time.Now carries its reading, as the epoch does).
	key := (int64(d.Sub(w.epoch)) + int64(Slack) - 1) / int64(Slack)
	s := w.slots[key]
	if s == nil {
		s = &Slot{key: key, ch: make(chan struct{})}
		w.slots[key] = s
		s.timer = time.AfterFunc(time.Until(w.epoch.Add(time.Duration(key)*Slack)), func() { w.expire(s) })
	}
	s.waiters++
	return s
}

// Release gives back a slot that After returned, once its caller no
// longer waits on it. The last caller to release a slot stops its timer.
func (w *Wheel) Release(s *Slot) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s.waiters--
	if s.waiters == 0 && w.slots[s.key] == s && s.timer.Stop() {
		delete(w.slots, s.key)
	}
}

// expire closes s's channel at its end.
func (w *Wheel) expire(s *Slot) {
	w.mu.Lock()
	if w.slots[s.key] == s {
		delete(w.slots, s.key)
	}
	w.mu.Unlock()
	close(s.ch)
}
