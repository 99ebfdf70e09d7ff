package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

// TestResetDeletesOneKey: Reset deletes the Redis key of one state, named
// as AllowN names it (prefix, slot key, the millisecond layout), and no
// other key.
func TestResetDeletesOneKey(t *testing.T) {
	srv := redistest.Server(t)
	raw := newGoRedis(t, false, srv.Addr)
	ctx := context.Background()
	slotKey := func(k string) string { k, _, _ = strings.Cut(k, "/"); return k }
	perMinute := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 3, Period: time.Minute}
	perHour := perMinute
	perHour.Period = time.Hour
	tests := []struct {
		name string
		opts []Option
		// sameKey: the layout keeps both periods in one key.
		sameKey bool
	}{
		{name: "default"},
		{name: "prefix", opts: []Option{WithPrefix("app{1}:")}},
		{name: "slot key", opts: []Option{WithSlotKey(slotKey)}},
		{name: "millisecond layout", opts: []Option{WithMillisecondLayout()}, sameKey: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewGoRedis(raw, tt.opts...)
			key := "tenant{7}/" + t.Name()
			for _, l := range []sluice.Limit{perMinute, perHour} {
				if tt.sameKey && l == perHour {
					break // the state perMinute filled
				}
				if d, err := s.AllowN(ctx, key, l, 3); err != nil || !d.Allowed {
					t.Fatalf("AllowN(%v, 3) = %+v, %v; want allowed", l, d, err)
				}
			}
			name, other := s.redisKey(key, perMinute), s.redisKey(key, perHour)
			if n := raw.Exists(ctx, name, other).Val(); n != 2 { // EXISTS counts a key named twice twice
				t.Fatalf("EXISTS %q %q = %d before Reset", name, other, n)
			}
			if err := s.Reset(ctx, key, perMinute); err != nil {
				t.Fatalf("Reset: %v", err)
			}
			if n := raw.Exists(ctx, name).Val(); n != 0 {
				t.Errorf("EXISTS %q after Reset = %d, want 0", name, n)
			}
			if d, _ := s.AllowN(ctx, key, perMinute, 0); d.Remaining != 3 {
				t.Errorf("peek after Reset = %+v, want Remaining 3", d)
			}
			wantOther := 3 // the other period's state is kept
			if tt.sameKey {
				wantOther = 0 // one state per key whatever the period
			}
			if d, _ := s.AllowN(ctx, key, perHour, 0); 3-d.Remaining != wantOther {
				t.Errorf("peek of the other period after Reset = %+v, want %d counted", d, wantOther)
			}
		})
	}
}

// countingScripter counts the scripts run through it.
type countingScripter struct {
	scripter
	calls atomic.Int64
}

func (c *countingScripter) evalSha(ctx context.Context, sha string, keys, args []string) ([]int64, bool, error) {
	c.calls.Add(1)
	return c.scripter.evalSha(ctx, sha, keys, args)
}

// TestResetValidatesFirst: an invalid key or limit, a cancelled context or
// a closed store fail Reset without a call to Redis.
func TestResetValidatesFirst(t *testing.T) {
	srv := redistest.Server(t)
	cs := &countingScripter{scripter: goRedisClient{newGoRedis(t, false, srv.Addr)}}
	s := newStore(cs, nil)
	good := sluice.PerSecond(1)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := context.Background()
	for _, err := range []error{
		s.Reset(ctx, "", good),
		s.Reset(ctx, strings.Repeat("k", sluice.MaxKeyLen+1), good),
		s.Reset(ctx, "k", sluice.Limit{Algorithm: sluice.GCRA, Rate: 1}),
		s.Reset(ctx, "k", sluice.Limit{Algorithm: 42, Rate: 1, Period: time.Second}),
		newStore(cs, []Option{WithMillisecondLayout()}).Reset(ctx, "k", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 1, Period: 1500 * time.Microsecond}),
		s.Reset(cancelled, "k", good),
	} {
		if err == nil {
			t.Errorf("Reset with a bad argument = nil, want an error")
		}
	}
	if n := cs.calls.Load(); n != 0 {
		t.Errorf("invalid Resets made %d calls to Redis, want 0", n)
	}
	if err := s.Reset(ctx, "k", good); err != nil || cs.calls.Load() != 1 {
		t.Errorf("Reset = %v after %d calls, want nil after 1", err, cs.calls.Load())
	}
	s.Close()
	if err := s.Reset(ctx, "k", good); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("Reset after Close = %v, want ErrClosed", err)
	}
}
