package validate

import (
	"sync/atomic"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// Limits is a cache of validated limits and their parameters, so that a
// store checks a request at its entrance with one lookup: a limit seen
// before is neither validated nor divided again. memstore and redisstore
// each keep one. The zero value is ready; it is safe for concurrent use.
//
// The cache is two-way: a limit lives in its slot or the slot's
// neighbour, so that two limits used in turn (a per-second and a per-day
// limit) never evict each other. It holds at most limitSlots limits: a
// limit beyond them is validated again, never wrongly trusted.
type Limits struct {
	slots [limitSlots]atomic.Pointer[limitParams]
}

// limitSlots is the size of a Limits.
const limitSlots = 64

// limitParams is a validated limit and its parameters.
type limitParams struct {
	lim sluice.Limit
	p   algo.Params
}

// Params validates lim (Limit.Validate, unless it is cached) and returns
// its parameters, Charge set for a limit that counts every hit.
func (c *Limits) Params(lim sluice.Limit) (*algo.Params, error) {
	h := uint64(lim.Rate)*0x9e3779b97f4a7c15 ^ uint64(lim.Period)*0xbf58476d1ce4e5b9 ^ uint64(lim.Burst)*0x94d049bb133111eb ^ uint64(lim.Algorithm)
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	i := (h >> 58) % limitSlots
	if lp := c.slots[i].Load(); lp != nil && lp.lim == lim {
		return &lp.p, nil
	}
	if lp := c.slots[i^1].Load(); lp != nil && lp.lim == lim {
		return &lp.p, nil
	}
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	lp := &limitParams{lim: lim, p: Params(lim)}
	if old := c.slots[i].Load(); old != nil {
		// Keep the limit already here: move it to the neighbour, unless
		// that slot was just the one in use.
		c.slots[i^1].Store(old)
	}
	c.slots[i].Store(lp)
	return &lp.p, nil
}

// Check checks a request as Request does, the limit through c (so a
// limit seen before costs a lookup), and returns the limit's parameters.
func (c *Limits) Check(key string, lim sluice.Limit, n int) (*algo.Params, error) {
	if key == "" || len(key) > sluice.MaxKeyLen {
		return nil, sluice.ValidateKey(key)
	}
	p, err := c.Params(lim)
	if err != nil {
		return nil, err
	}
	if n < 0 || int64(n) > p.Cap && !(p.Charge && n <= sluice.MaxCharge) {
		return nil, Cost(lim, n)
	}
	return p, nil
}

// Params returns the parameters of lim, a limit that passed Validate.
func Params(lim sluice.Limit) algo.Params {
	p := algo.NewParams(algo.Kind(lim.Algorithm), int64(lim.Rate), int64(lim.Burst), lim.Period.Microseconds())
	p.Charge = lim.Counting == sluice.CountAll
	return p
}
