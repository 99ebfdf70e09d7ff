package sluice

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Reservation is units taken by Limiter.Reserve before the work whose cost
// they estimate, settled by Settle once the actual cost is known. It is
// safe for concurrent use.
type Reservation struct {
	l       *Limiter
	rs      Reserver
	key     string
	lim     Limit
	d       Decision
	at      time.Time // the store's time of the reservation; zero: unknown
	counted int       // the units the store counted

	mu      sync.Mutex
	settled bool
	err     error
}

// Reserve takes n units for key under lim now, before the work they pay
// for, and returns a Reservation that Settle corrects to the cost actually
// used. The store must be able to reserve (memstore, redisstore,
// failover, tiered and stack stores can; see Reserver); otherwise the
// error wraps ErrReserveUnsupported. A denial is not an error: the Reservation's
// Decision says so, and the caller should not do the work.
//
// A limit that counts every hit (CountAll) counts the reservation even
// when it denies it. While the store cannot reserve (failover's shared
// store down), Reserve decides with AllowN, by the limit's failure mode, and a
// later refund is made at the store's time.
func (l *Limiter) Reserve(ctx context.Context, key string, lim Limit, n int) (*Reservation, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	if l.store == nil {
		return nil, errNilStore
	}
	rs := l.full
	d, at, err := rs.Reserve(ctx, key, lim, n)
	if err != nil {
		return nil, err
	}
	if d.Degraded && !d.Allowed && at.IsZero() {
		// The store could not reserve and admitted nothing: decide as a
		// request, by the limit's failure mode.
		if d, err = rs.AllowN(ctx, key, lim, n); err != nil {
			return nil, err
		}
	}
	r := &Reservation{l: l, rs: rs, key: key, lim: lim, d: d, at: at}
	if d.Allowed || lim.Counting == CountAll {
		r.counted = n
	}
	return r, nil
}

// Decision is the store's decision on the reservation.
func (r *Reservation) Decision() Decision { return r.d }

// Settle corrects the reservation to the units the work used: when used
// is less than what was counted, it returns the rest (as of the
// reservation's time, never crediting more than the key counts); when it
// is more, it charges the excess counting every hit (CountAll), so that
// it is never lost, even beyond the limit. A denied reservation of a limit
// that counts only admitted hits counted nothing: Settle then charges all
// of used, work done all the same. A sliding_log limit cannot count beyond
// its Rate: its excess is charged as an admission, and when that is
// denied, the error wraps ErrExceedsCapacity.
//
// used must be in [0, MaxCharge] (otherwise a *LimitError on "N").
// Settle acts once: later calls do nothing and return the first call's
// error.
func (r *Reservation) Settle(ctx context.Context, used int) error {
	if used < 0 {
		return &LimitError{Field: "N", Reason: fmt.Sprintf("used = %d must be >= 0", used), Err: ErrInvalidCost}
	}
	if used > MaxCharge {
		return &LimitError{Field: "N", Reason: fmt.Sprintf("used = %d, but a charge is at most %d", used, MaxCharge), Err: ErrExceedsCapacity}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled {
		return r.err
	}
	r.settled = true
	r.err = r.settle(ctx, used)
	return r.err
}

func (r *Reservation) settle(ctx context.Context, used int) error {
	if r.l.closed.Load() {
		return ErrClosed
	}
	switch diff := used - r.counted; {
	case diff < 0:
		return r.rs.Return(ctx, r.key, r.lim, -diff, r.at)
	case diff > 0 && r.lim.Algorithm == SlidingLog:
		d, err := r.rs.AllowN(ctx, r.key, r.lim, min(diff, r.lim.Capacity()))
		if err == nil && (!d.Allowed || diff > r.lim.Capacity()) {
			err = fmt.Errorf("%w: %d units over the reservation of %q were not all recorded: %v cannot count beyond its Rate", ErrExceedsCapacity, diff, r.key, r.lim)
		}
		return err
	case diff > 0:
		_, err := r.rs.AllowN(ctx, r.key, r.lim.WithCounting(CountAll), diff)
		return err
	}
	return nil
}

// Refund gives n units back to key under lim at the store's time now (a
// refund whose admission time is unknown, such as Envoy's
// is_negative_hits): it never credits more than the key counts, so an
// untouched key stays untouched and a key in debt has its debt reduced.
// The store must be able to reserve (see Reserver); otherwise the error
// wraps ErrReserveUnsupported.
func (l *Limiter) Refund(ctx context.Context, key string, lim Limit, n int) error {
	if l.closed.Load() {
		return ErrClosed
	}
	if l.store == nil {
		return errNilStore
	}
	return l.full.Return(ctx, key, lim, n, time.Time{})
}
