package memcachestore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/validate"
)

// beforeSwap, when set (by tests, in export_test.go), runs between a
// decision's read and its write: a test changes the item there, as
// another process would.
var beforeSwap func(name []byte)

// longAgo interrupts a connection's I/O when set as its deadline.
var longAgo = time.Unix(1, 0)

// with runs f on a connection to sv, which it sets to end at deadline and
// when ctx ends. When the first command of f fails because the server had
// closed a reused connection (a restart, an idle timeout), f runs once
// more on a new connection: the server never saw that command. No other
// failure is retried: a write whose reply was lost may have been applied.
func (s *Store) with(ctx context.Context, sv *server, deadline time.Time, f func(c *conn) error) error {
	c, err := sv.get(ctx, deadline)
	if err != nil {
		return s.callErr(ctx, err)
	}
	s.arm(ctx, c, deadline)
	err = f(c)
	if err != nil && c.stale(err) {
		s.disarm(c)
		if c, err = sv.redial(ctx, deadline, c); err != nil {
			return s.callErr(ctx, err)
		}
		s.arm(ctx, c, deadline)
		err = f(c)
	}
	if err != nil && !isReply(err) {
		c.broken = true
	}
	s.disarm(c)
	sv.put(c)
	if err != nil {
		return s.callErr(ctx, c.wrap(err))
	}
	return nil
}

// arm sets c's deadline and, when ctx can end before it, interrupts c's
// I/O when it does.
func (s *Store) arm(ctx context.Context, c *conn, deadline time.Time) {
	_ = c.nc.SetDeadline(deadline)
	if ctx.Done() != nil {
		nc := c.nc
		c.stop = context.AfterFunc(ctx, func() { _ = nc.SetDeadline(longAgo) })
	}
}

// disarm stops c's cancellation hook; a connection it interrupted is
// broken.
func (s *Store) disarm(c *conn) {
	if c.stop != nil && !c.stop() {
		c.broken = true
	}
	c.stop = nil
}

// isReply reports an error that leaves the connection sound: a state
// the store cannot read (read whole), or a decision that lost or could
// not use compare-and-swap. An error reply of the server (ServerError)
// closes the connection all the same: it is rare, and what the server
// made of the rest of the stream is not worth guessing.
func isReply(err error) bool {
	var ve *ValueError
	return errors.As(err, &ve) || errors.Is(err, ErrContended) || errors.Is(err, ErrNoCAS)
}

// wrap names the server in an error of its connection.
func (c *conn) wrap(err error) error {
	var se *ServerError
	if isReply(err) || errors.As(err, &se) {
		return err
	}
	return fmt.Errorf("memcachestore: %s: %w", c.sv.addr, err)
}

// callErr makes the error of a call whose context ended wrap the
// context's error, and a timeout wrap context.DeadlineExceeded.
func (s *Store) callErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(err, cerr) {
			return err
		}
		return fmt.Errorf("%w: %w", cerr, err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}

// op is one step on one state: a decision (AllowN, Reserve) or a return.
type op struct {
	lim  sluice.Limit
	p    algo.Params
	n    int64
	now  int64 // µs: the time of the decision, or of the return
	ret  bool  // a Return of n units admitted at at
	at   int64 // the Return's admission time (0 with zero: now)
	zero bool  // the Return's time was zero: the units are taken as of now
	ws   int64 // a fixed window's start
	res  algo.Result
	buf  [64]byte
}

// scratch is a call's op and item name, reused across calls (the name
// reaches functions, such as crc32's, that keep the compiler from proving
// that it stays on the stack).
type scratch struct {
	o    op
	name [maxName + 32]byte
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// decide is AllowN and Reserve: the decision and its time (µs).
func (s *Store) decide(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, int64, error) {
	if err := s.check(ctx, key, lim, n); err != nil {
		return sluice.Decision{}, 0, err
	}
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	o := &sc.o
	*o = op{lim: lim, p: params(lim), n: int64(n), now: s.nowMicro()}
	name, err := s.name(sc.name[:0], key, o)
	if err != nil {
		return sluice.Decision{}, 0, err
	}
	deadline := s.deadline(ctx)
	switch {
	case n == 0:
		err = s.peek(ctx, deadline, name, o)
	case lim.Algorithm == sluice.FixedWindow && o.p.Charge:
		err = s.charge(ctx, deadline, name, o)
	default:
		err = s.update(ctx, deadline, name, o)
	}
	if err != nil {
		return sluice.Decision{}, 0, err
	}
	return decision(lim, o.res), o.now, nil
}

// name appends the item name of o's state of key: for a fixed window,
// the window of o.now (of o.at for a Return at a known time).
func (s *Store) name(b []byte, key string, o *op) ([]byte, error) {
	var window int64
	if o.lim.Algorithm == sluice.FixedWindow {
		t := o.now
		if o.ret && !o.zero {
			t = o.at
		}
		o.ws = t + algo.WindowLeft(t, o.p.Period) - o.p.Period
		window = floorDiv(o.ws, o.p.Period)
		if s.opts.ReferenceKeys && o.lim.Period%time.Second == 0 {
			return appendReferenceName(b, key, floorDiv(o.ws, 1e6))
		}
	}
	return s.appendName(b, key, o.lim, window), nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// peek decides a cost of 0 from a plain get: nothing is written.
func (s *Store) peek(ctx context.Context, deadline time.Time, name []byte, o *op) error {
	sv := s.ring.Load().pick(name)
	return s.with(ctx, sv, deadline, func(c *conn) error {
		v, _, found, err := c.get(name, false)
		if err != nil {
			return err
		}
		_, _, err = o.step(name, v, found)
		return err
	})
}

// update decides o by compare-and-swap: read the state with its CAS
// unique (gets), decide, and write the new state only if nobody wrote it
// since (cas; add when there was none); when somebody did, read it again
// and decide again, up to MaxCASAttempts times. A denial writes nothing.
// The calls of this process on one state take turns (stripe), so that
// only other processes' writes make it try again.
func (s *Store) update(ctx context.Context, deadline time.Time, name []byte, o *op) error {
	st := s.stripe(name)
	if err := acquire(ctx, st, deadline); err != nil {
		return err
	}
	defer func() { <-st }()
	sv := s.ring.Load().pick(name)
	return s.with(ctx, sv, deadline, func(c *conn) error {
		for range s.opts.MaxCASAttempts {
			v, unique, found, err := c.get(name, true)
			if err != nil {
				return err
			}
			if found && unique == 0 {
				return fmt.Errorf("%w: %s", ErrNoCAS, sv.addr)
			}
			next, write, err := o.step(name, v, found)
			if err != nil || !write {
				return err
			}
			if beforeSwap != nil {
				beforeSwap(name)
			}
			exp := s.exptime(o.now, o.ttl())
			res, err := c.store(name, next, exp, unique)
			if err != nil {
				return err
			}
			if res == stored {
				return nil
			}
			// exists or not found (cas), not stored (add): another
			// writer came first.
		}
		return fmt.Errorf("%w: %d attempts on %.80q", ErrContended, s.opts.MaxCASAttempts, string(name))
	})
}

// charge counts n on a fixed window that counts every hit: incr, which
// memcached applies atomically, whatever the count, in one round trip
// while the window's item exists; when it does not, add it with the
// count n, and incr again if another writer added it first. The count
// is kept at most p.Debt: an incr beyond it is taken back by decr.
func (s *Store) charge(ctx context.Context, deadline time.Time, name []byte, o *op) error {
	sv := s.ring.Load().pick(name)
	n := uint64(o.n)
	return s.with(ctx, sv, deadline, func(c *conn) error {
		v, found, err := c.incr(name, n, false)
		if err != nil {
			return err
		}
		if !found {
			left := algo.WindowLeft(o.now, o.p.Period)
			res, err := c.store(name, strconv.AppendUint(o.buf[:0], n, 10), s.exptime(o.now, left), 0)
			switch {
			case err != nil:
				return err
			case res == stored:
				v, found = n, true
			default:
				if v, found, err = c.incr(name, n, false); err != nil {
					return err
				}
			}
			if !found {
				return fmt.Errorf("%w: %.80q vanished between add and incr", ErrContended, string(name))
			}
		}
		before := int64(0)
		if v >= n {
			before = int64(min(v-n, math.MaxInt64))
		}
		_, o.res = algo.FixedWindowCharge(algo.Window{Start: o.ws, Count: before}, o.now, o.p, o.n)
		if v > uint64(o.p.Debt) {
			// Take back what this charge put above the bound: the
			// charges above it, each taking back its own part, leave
			// the count at the bound.
			if _, _, err := c.incr(name, min(n, v-uint64(o.p.Debt)), true); err != nil {
				return err
			}
		}
		return nil
	})
}

// step applies o to the state v (found: the item exists) of the item
// name. It returns the value to write and whether the state changed.
func (o *op) step(name, v []byte, found bool) ([]byte, bool, error) {
	bad := func() ([]byte, bool, error) {
		return nil, false, &ValueError{Name: string(name), Reason: fmt.Sprintf("%q is not a %v state", v, o.lim.Algorithm)}
	}
	p := &o.p
	switch o.lim.Algorithm {
	case sluice.FixedWindow:
		var w algo.Window
		if found {
			c, ok := decodeCount(v)
			if !ok {
				return bad()
			}
			w = algo.Window{Start: o.ws, Count: c}
		}
		var w2 algo.Window
		switch { // a Return is a decr (Store.Return)
		case p.Charge:
			w2, o.res = algo.FixedWindowCharge(w, o.now, *p, o.n)
		default:
			w2, o.res = algo.FixedWindowStep(w, o.now, *p, o.n)
		}
		return strconv.AppendInt(o.buf[:0], w2.Count, 10), w2 != w, nil
	case sluice.SlidingWindow:
		var c algo.Counter
		if found {
			var ok bool
			if c, ok = decodeCounter(v); !ok {
				return bad()
			}
		}
		var c2 algo.Counter
		switch {
		case o.ret:
			at := o.at
			if o.zero {
				at = max(o.now, c.Start) // the time a decision would use
			}
			c2 = algo.SlidingWindowReturn(c, at, *p, o.n)
			_, o.res = algo.SlidingWindowStep(c2, o.now, *p, 0)
		case p.Charge:
			c2, o.res = algo.SlidingWindowCharge(c, o.now, *p, o.n)
		default:
			c2, o.res = algo.SlidingWindowStep(c, o.now, *p, o.n)
		}
		return appendCounter(o.buf[:0], c2), c2 != c, nil
	default: // TokenBucket, GCRA: a token bucket is kept as a TAT (algo.Bucket)
		var t algo.TAT
		if found {
			var ok bool
			if t, ok = decodeTAT(v); !ok {
				return bad()
			}
		}
		var t2 algo.TAT
		switch {
		case o.ret:
			at := o.at
			if o.zero {
				at = o.now
			}
			t2 = algo.GCRAReturn(t, at, o.now, *p, o.n)
			_, o.res = algo.GCRAStep(t2, o.now, *p, 0)
		case p.Charge:
			t2, o.res = algo.GCRACharge(t, o.now, *p, o.n)
		default:
			t2, o.res = algo.GCRAStep(t, o.now, *p, o.n)
		}
		return appendTAT(o.buf[:0], t2), t2 != t, nil
	}
}

// ttl is how long (µs) the state o writes matters: until it is back to
// untouched, which its step's ResetAfter tells.
func (o *op) ttl() int64 {
	if o.lim.Algorithm == sluice.FixedWindow {
		return algo.WindowLeft(o.now, o.p.Period) // the item is the window's
	}
	return o.res.ResetAfter
}

// Expiry limits of memcached: an exptime up to 30 days is relative, a
// larger one a Unix time, read as a 32-bit signed number.
const (
	maxRelative = 30 * 24 * 3600
	maxUnix     = math.MaxInt32
)

// exptime is the memcached expiry of a state written at now (µs) that
// matters for ttl µs: the ttl rounded up to whole seconds, plus a second
// for memcached's clock (it counts whole seconds), plus the clock skew
// allowed between processes. Up to 30 days it is relative; beyond, the
// Unix time of this process's clock, at most 2038-01-19 (memcached's
// limit).
func (s *Store) exptime(now, ttl int64) int64 {
	secs := (max(ttl, 1)+999_999)/1_000_000 + 1 + int64((s.opts.ClockSkew+time.Second-1)/time.Second)
	if s.testSlack {
		return min(secs+3600, maxRelative)
	}
	if secs <= maxRelative {
		return secs
	}
	return min(max(floorDiv(now, 1_000_000)+secs, maxRelative+1), maxUnix)
}

// Return implements sluice.Reserver: it gives back n units of a reservation
// admitted at at (a zero at: as of now). Afterwards the key is as if they
// had never been admitted, as far as they still count; returning more
// than was leased never raises the limit beyond an untouched key. A fixed
// window's units leave the count of at's window (decr, which stops at 0);
// the other states are swapped as a decision swaps them. n may be up to
// sluice.MaxCharge whatever the limit's Counting.
func (s *Store) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	err := s.check(ctx, key, lim, 0)
	if err == nil && (n < 0 || n > sluice.MaxCharge) {
		err = validate.Request(key, lim.WithCounting(sluice.CountAll), n)
	}
	if err != nil {
		return fmt.Errorf("memcachestore: return: %w", err)
	}
	if n == 0 {
		return nil
	}
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	o := &sc.o
	*o = op{lim: lim, p: params(lim), n: int64(n), now: s.nowMicro(), ret: true, zero: at.IsZero()}
	if !o.zero {
		o.at = at.UnixMicro()
	}
	name, err := s.name(sc.name[:0], key, o)
	if err != nil {
		return fmt.Errorf("memcachestore: return: %w", err)
	}
	deadline := s.deadline(ctx)
	if lim.Algorithm == sluice.FixedWindow {
		sv := s.ring.Load().pick(name)
		return s.with(ctx, sv, deadline, func(c *conn) error {
			_, _, err := c.incr(name, uint64(n), true)
			return err
		})
	}
	return s.update(ctx, deadline, name, o)
}

// Reset implements sluice.Resetter: it deletes the item of key's state
// under lim's algorithm and period (for a fixed window, the item of the
// current window).
func (s *Store) Reset(ctx context.Context, key string, lim sluice.Limit) error {
	if err := s.check(ctx, key, lim, 0); err != nil {
		return fmt.Errorf("memcachestore: reset: %w", err)
	}
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	sc.o = op{lim: lim, p: params(lim), now: s.nowMicro()}
	name, err := s.name(sc.name[:0], key, &sc.o)
	if err != nil {
		return fmt.Errorf("memcachestore: reset: %w", err)
	}
	sv := s.ring.Load().pick(name)
	return s.with(ctx, sv, s.deadline(ctx), func(c *conn) error { return c.del(name) })
}
