package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// syncStrategy admits locally and syncs with the home store every interval,
// as gubernator's GLOBAL behaviour does: each process answers from its own
// view of the count (the global count at its last sync plus what it admitted
// since), and every interval adds its new hits to the home store's count
// and reads the total back. Fixed windows only.
type syncStrategy struct{ interval time.Duration }

func (s syncStrategy) About() string {
	return fmt.Sprintf("admit locally, add the hits to the home store's count and read it back every %v (gubernator GLOBAL's approach; fixed window)", s.interval)
}

func (s syncStrategy) NewStore(_ context.Context, m Member) (sluice.Store, error) {
	if m.Limit.Algorithm != sluice.FixedWindow {
		return nil, fmt.Errorf("sync: only %s limits, not %s", sluice.FixedWindow, m.Limit.Algorithm)
	}
	c, err := dialHome(m.HomeAddr)
	if err != nil {
		return nil, err
	}
	st := &syncStore{c: c, interval: s.interval, timeout: WANTimeout(m.RTT, m.Jitter),
		states: map[syncKey]*syncState{}, stop: make(chan struct{}), done: make(chan struct{})}
	go st.loop()
	return st, nil
}

type syncKey struct {
	key    string
	period time.Duration
}

// syncState is one key's view of its current window.
type syncState struct {
	window   int64 // start of the window, µs
	rate     int64
	seen     int64 // the home store's count at the last sync
	pending  int64 // admitted here, not yet sent
	inflight int64 // sent in the sync in flight
}

type syncStore struct {
	c        rueidis.Client
	interval time.Duration
	timeout  time.Duration

	mu     sync.Mutex
	states map[syncKey]*syncState

	stop, done chan struct{}
	once       sync.Once
}

// AllowN admits n when this process's view of the window's count leaves
// room for it.
func (s *syncStore) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	if err := lim.Validate(); err != nil {
		return sluice.Decision{}, err
	}
	if lim.Algorithm != sluice.FixedWindow {
		return sluice.Decision{}, fmt.Errorf("sync: only %s limits", sluice.FixedWindow)
	}
	now := time.Now().UnixMicro()
	p := lim.Period.Microseconds()
	ws := now - now%p
	end := time.Duration(ws+p-now) * time.Microsecond
	s.mu.Lock()
	defer s.mu.Unlock()
	k := syncKey{key, lim.Period}
	st := s.states[k]
	if st == nil || st.window != ws {
		st = &syncState{window: ws}
		s.states[k] = st
	}
	st.rate = int64(lim.Rate)
	used := st.seen + st.pending + st.inflight
	if used+int64(n) > int64(lim.Rate) {
		return sluice.Decision{Limit: lim, Remaining: max(lim.Rate-int(used), 0), RetryAfter: end, ResetAfter: end}, nil
	}
	st.pending += int64(n)
	return sluice.Decision{Allowed: true, Limit: lim, Remaining: lim.Rate - int(used) - n, ResetAfter: end}, nil
}

// loop syncs every interval, one sync at a time.
func (s *syncStore) loop() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			s.sync() // the last hits
			return
		case <-t.C:
			s.sync()
		}
	}
}

// sync adds each key's pending hits of its current window to the home
// store's count (INCRBY, which also reads it) and takes the total as seen.
func (s *syncStore) sync() {
	type job struct {
		k      syncKey
		window int64
		n      int64
	}
	s.mu.Lock()
	jobs := make([]job, 0, len(s.states))
	now := time.Now().UnixMicro()
	for k, st := range s.states {
		if now-st.window >= 2*k.period.Microseconds() {
			delete(s.states, k) // a past window: nothing more to learn
			continue
		}
		jobs = append(jobs, job{k, st.window, st.pending})
		st.inflight, st.pending = st.pending, 0
	}
	s.mu.Unlock()
	if len(jobs) == 0 {
		return
	}
	cmds := make(rueidis.Commands, 0, 2*len(jobs))
	for _, j := range jobs {
		name := "sync:{" + j.k.key + "}:" + strconv.FormatInt(j.k.period.Microseconds(), 10) + ":" + strconv.FormatInt(j.window, 10)
		cmds = append(cmds,
			s.c.B().Incrby().Key(name).Increment(j.n).Build(),
			s.c.B().Pexpire().Key(name).Milliseconds(2*j.k.period.Milliseconds()+1000).Build())
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	res := s.c.DoMulti(ctx, cmds...)
	cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, j := range jobs {
		st := s.states[j.k]
		total, err := res[2*i].AsInt64()
		if st == nil || st.window != j.window {
			continue // the window passed while the sync was in flight
		}
		if err != nil {
			// Not known to be counted: keep it pending (a reply lost after
			// the INCRBY ran counts it twice, which only makes this
			// baseline stricter).
			st.pending += st.inflight
		} else {
			st.seen = total
		}
		st.inflight = 0
	}
}

// Close stops the sync loop after a last sync, and closes the client.
func (s *syncStore) Close() error {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		s.c.Close()
	})
	return nil
}
