package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// semaphoreScript runs the Semaphore's three operations (lua/semaphore.lua).
var semaphoreScript *script

func init() { semaphoreScript = assemble("semaphore", 1, nil, "semaphore") }

// semSuffix ends the name of a key's holders. A rate limit's state ends in
// an algorithm's letter followed by its period's digits, so a name ending
// in this lone letter is never one of theirs.
const semSuffix = 'c'

// semKey is the name of key's holders: <prefix>{<escaped key>}c, or with
// WithSlotKey <prefix>{<escaped slot key>}<escaped key>}c, in the key's
// hash slot as its rate limits are.
func (s *Store) semKey(key string) string {
	e := escape(key)
	var b strings.Builder
	b.Grow(len(s.prefix) + len(e) + 4)
	b.WriteString(s.prefix)
	b.WriteByte('{')
	if s.slotKey != nil {
		b.WriteString(escape(s.slotKey(key)))
		b.WriteByte('}')
	}
	b.WriteString(e)
	b.WriteByte('}')
	b.WriteByte(semSuffix)
	return b.String()
}

// checkSem validates a Semaphore call before any call to Redis.
func (s *Store) checkSem(ctx context.Context, key, holder string, lim *sluice.ConcurrencyLimit) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := sluice.ValidateKey(key); err != nil {
		return err
	}
	if err := sluice.ValidateHolder(holder); err != nil {
		return err
	}
	if lim != nil {
		*lim = lim.Normalize()
		if err := lim.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// semReply is the script's answer.
type semReply struct {
	acquired bool
	held     int
	now      time.Time // the script's Redis time
	expires  time.Time
	retry    time.Duration
}

// sem runs one operation ('a', 'r' or 'e') in one script run on the key's
// node, never retried after an error: a call whose reply was lost may have
// run, and its permit then stays taken until its TTL ends, one TTL of one
// slot at most.
func (s *Store) sem(ctx context.Context, op, key, holder string, lim sluice.ConcurrencyLimit) (semReply, error) {
	args := s.clockArgs(make([]string, 0, 6))
	args = append(args, op, holder)
	if op != "r" {
		args = append(args, strconv.Itoa(lim.Max), strconv.FormatInt(lim.TTL.Microseconds(), 10))
	}
	res, err := s.run(ctx, semaphoreScript, []string{s.semKey(key)}, args)
	if err != nil {
		return semReply{}, err
	}
	if len(res) != 5 {
		return semReply{}, fmt.Errorf("redisstore: semaphore script returned %d values, want 5", len(res))
	}
	r := semReply{acquired: res[0] == 1, held: int(res[1]), now: time.UnixMicro(res[2]), retry: time.Duration(res[4]) * time.Microsecond}
	if r.acquired {
		r.expires = time.UnixMicro(res[3])
	}
	return r, nil
}

func (r semReply) decision(lim sluice.ConcurrencyLimit) sluice.PermitDecision {
	return sluice.PermitDecision{Acquired: r.acquired, Held: r.held, Limit: lim, Expires: r.expires, RetryAfter: r.retry}
}

// Acquire implements sluice.Semaphore in one script run on Redis's clock:
// the key's holders are a ZSET scored by the end of each permit's TTL, of which
// only those after now count (counted in O(log n)), and every call removes
// at most 16 expired ones, so that a call's work stays bounded however
// many leases ended together; the ZSET's TTL follows the latest permit's, so
// that an idle key vanishes, and it never holds more than the largest Max
// of its key. A holder already present is renewed to now plus lim.TTL.
// It never waits: a denial carries, in RetryAfter, the time until the
// earliest permit's TTL ends.
//
// A call is never retried after an error: one whose reply was lost (a
// timeout) may have taken a permit, which then stays taken until its TTL
// ends, one TTL of one slot at most; Release with the same holder frees it
// at once.
func (s *Store) Acquire(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	if err := s.checkSem(ctx, key, holder, &lim); err != nil {
		return sluice.PermitDecision{}, fmt.Errorf("redisstore: acquire: %w", err)
	}
	r, err := s.sem(ctx, "a", key, holder, lim)
	if err != nil {
		return sluice.PermitDecision{}, err
	}
	return r.decision(lim), nil
}

// Release implements sluice.Semaphore in one script run.
func (s *Store) Release(ctx context.Context, key string, holder string) error {
	_, err := s.release(ctx, key, holder)
	return err
}

// release is Release, also returning the Redis time of the release.
func (s *Store) release(ctx context.Context, key string, holder string) (time.Time, error) {
	if err := s.checkSem(ctx, key, holder, nil); err != nil {
		return time.Time{}, fmt.Errorf("redisstore: release: %w", err)
	}
	r, err := s.sem(ctx, "r", key, holder, sluice.ConcurrencyLimit{})
	return r.now, err
}

// Extend implements sluice.Semaphore in one script run: a holder that is
// still present is renewed to Redis's now plus lim.TTL; one that is not
// (its TTL ended) gets Acquired false and an error wrapping
// sluice.ErrPermitLost, and takes no permit.
func (s *Store) Extend(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	if err := s.checkSem(ctx, key, holder, &lim); err != nil {
		return sluice.PermitDecision{}, fmt.Errorf("redisstore: extend: %w", err)
	}
	r, err := s.sem(ctx, "e", key, holder, lim)
	if err != nil {
		return sluice.PermitDecision{}, err
	}
	d := r.decision(lim)
	if !r.acquired {
		return d, fmt.Errorf("redisstore: extend %q: %w", key, sluice.ErrPermitLost)
	}
	return d, nil
}

// Freed implements sluice.PermitWaker by returning nil: a store shared by
// processes cannot tell this one when another releases, and a waiter
// sleeps until the earliest permit's TTL ends.
func (s *Store) Freed(string) <-chan struct{} { return nil }
