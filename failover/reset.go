package failover

import (
	"context"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/validate"
)

// Reset implements sluice.Resetter: it validates key and lim, resets the
// key's state in the local limiter that FailOpen decides by (so that a
// reset key starts afresh there too, during an outage or the next one),
// and passes the reset to the shared store under the deadline and the
// breaker.
//
// While the breaker is open it returns ErrBreakerOpen without calling the
// shared store, and a failed call returns an error wrapping
// ErrUnavailable: the shared state was then not reset (or, for a call cut
// short, may not have been), and the caller should try again once the
// store answers; only the local state was. A shared store that cannot
// reset returns its sluice.ErrResetUnsupported, passed on as is.
func (s *Store) Reset(ctx context.Context, key string, lim sluice.Limit) error {
	if s.isDone.Load() {
		return sluice.ErrClosed
	}
	if err := validate.Request(key, lim, 0); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if l, ok := LocalLimit(lim, s.cfg.replicas); ok {
		// The local share may count under a longer Period (Rate below
		// the replicas): its own limit names its state.
		_ = s.local.Reset(ctx, key, l)
	}
	if s.br.open() {
		return ErrBreakerOpen
	}
	c := s.begin(ctx)
	err := s.shared.Reset(c.ctx, key, lim)
	err, _ = s.end(c, err)
	return err
}
