package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// scripter is what the store needs from a Redis client: EVALSHA, EVAL (which
// also loads the script) and whether keys of one call must share a slot
// (Cluster) or a hash tag (a go-redis Ring, which shards by key).
type scripter interface {
	// evalSha runs a cached script; noScript reports a NOSCRIPT reply.
	evalSha(ctx context.Context, sha string, keys, args []string) (res []int64, noScript bool, err error)
	eval(ctx context.Context, src string, keys, args []string) ([]int64, error)
	isCluster() bool
	isRing() bool
	close()
}

// rueidisClient adapts a rueidis.Client. rueidis never retries EVALSHA/EVAL
// (they are not read-only), so a timed-out decision is never replayed.
type rueidisClient struct {
	c     rueidis.Client
	owned bool
}

func (r rueidisClient) evalSha(ctx context.Context, sha string, keys, args []string) ([]int64, bool, error) {
	cmd := r.c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	res, err := r.c.Do(ctx, cmd).AsIntSlice()
	if err != nil {
		if re, ok := rueidis.IsRedisErr(err); ok && re.IsNoScript() {
			return nil, true, err
		}
		return nil, false, err
	}
	return res, false, nil
}

func (r rueidisClient) eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	cmd := r.c.B().Eval().Script(src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return r.c.Do(ctx, cmd).AsIntSlice()
}

func (r rueidisClient) isCluster() bool { return r.c.Mode() == rueidis.ClientModeCluster }

func (r rueidisClient) isRing() bool { return false }

func (r rueidisClient) close() {
	if r.owned {
		r.c.Close()
	}
}

// goRedisClient adapts a go-redis UniversalClient. go-redis retries a
// command after some network errors (MaxRetries, default 3); give the store
// a client with MaxRetries -1 so that a decision is never replayed.
type goRedisClient struct {
	c redis.UniversalClient
}

func toAny(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}

func (g goRedisClient) evalSha(ctx context.Context, sha string, keys, args []string) ([]int64, bool, error) {
	res, err := g.c.EvalSha(ctx, sha, keys, toAny(args)...).Int64Slice()
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOSCRIPT") {
			return nil, true, err
		}
		return nil, false, err
	}
	return res, false, nil
}

func (g goRedisClient) eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	return g.c.Eval(ctx, src, keys, toAny(args)...).Int64Slice()
}

func (g goRedisClient) isCluster() bool {
	_, ok := g.c.(*redis.ClusterClient)
	return ok
}

func (g goRedisClient) isRing() bool {
	_, ok := g.c.(*redis.Ring)
	return ok
}

func (g goRedisClient) close() {}

// run calls sc (see runSync) for a caller under ctx, and returns when ctx
// ends even if the client has not: rueidis re-dials a hung server for
// about a second whatever the context says, and a caller must not be held
// past its deadline. The call then goes on in the background (it may still
// count, as any call cut short by its deadline may).
func (s *Store) run(ctx context.Context, sc *script, keys, args []string) ([]int64, error) {
	return s.runThen(ctx, sc, keys, args, nil)
}

// runThen is run, putting back done (when not nil), which holds keys and
// args, once the call is over and they are no longer used, which may be
// after runThen returns.
func (s *Store) runThen(ctx context.Context, sc *script, keys, args []string, done *multiBuf) ([]int64, error) {
	if ctx.Done() == nil {
		res, err := s.runSync(ctx, sc, keys, args)
		if done != nil {
			done.put()
		}
		return res, err
	}
	type result struct {
		res []int64
		err error
	}
	ch := make(chan result, 1)
	go func() {
		res, err := s.runSync(ctx, sc, keys, args)
		if done != nil {
			done.put()
		}
		ch <- result{res, err}
	}()
	select {
	case r := <-ch:
		return r.res, r.err
	case <-ctx.Done():
		return nil, withCtx(ctx, fmt.Errorf("redisstore: eval %s: %w", sc.name, ctx.Err()))
	}
}

// runSync calls sc with EVALSHA and, on a NOSCRIPT reply only, once with
// EVAL (which loads it). Any other error, a timeout included, is returned as
// is: the script may have run, and running it again could count twice.
func (s *Store) runSync(ctx context.Context, sc *script, keys, args []string) ([]int64, error) {
	res, noScript, err := s.c.evalSha(ctx, sc.sha, keys, args)
	if noScript {
		res, err = s.c.eval(ctx, sc.src, keys, args)
	}
	if err != nil {
		return nil, withCtx(ctx, fmt.Errorf("redisstore: eval %s: %w", sc.name, err))
	}
	return res, nil
}

// withCtx makes err, the failure of a call made under ctx, also match ctx's
// error when ctx has ended: a dial or a read that the deadline cut short
// fails with "i/o timeout", which errors.Is does not take for
// context.DeadlineExceeded, though it is the caller's deadline.
//
// The deadline counts as passed when the clock says so, even before ctx's
// own timer has set its error: a batch's call (under its latest member's
// deadline) fails at that very deadline, and that member's context may not
// say so yet.
func withCtx(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if d, ok := ctx.Deadline(); cerr == nil && ok && !time.Now().Before(d) {
		cerr = context.DeadlineExceeded
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", err, cerr)
	}
	return err
}
