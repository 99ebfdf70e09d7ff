package sluicetest

import (
	"sync"
	"time"
)

// Clock is a fake clock for stores whose time can be injected. It is safe
// for concurrent use; pass its Now method to the store (for memstore,
// memstore.WithClock(c.Now)).
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock that reads start until it is moved.
func NewClock(start time.Time) *Clock { return &Clock{t: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d (backward when d is negative).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t, which may be earlier than its time.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}
