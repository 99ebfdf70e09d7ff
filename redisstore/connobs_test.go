package redisstore

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

// TestConnObserver: every connection Open's client makes is told once
// opened and once closed: when the store closes, and when Redis goes away.
func TestConnObserver(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	srv := redistest.Server(t, redistest.WithArgs("--unixsocket", sock, "--unixsocketperm", "700"))
	for _, url := range []string{"redis://" + srv.Addr, "unix://" + sock} {
		scheme, _, _ := strings.Cut(url, ":")
		t.Run(scheme, func(t *testing.T) {
			var opened, closed atomic.Int64
			s, err := Open(context.Background(), url, WithConnObserver(func() { opened.Add(1) }, func() { closed.Add(1) }))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.AllowN(context.Background(), "k", sluice.PerSecond(5), 1); err != nil {
				t.Fatal(err)
			}
			if opened.Load() < 1 || closed.Load() != 0 {
				t.Errorf("open store: %d opened, %d closed; want at least 1 and 0", opened.Load(), closed.Load())
			}
			s.Close()
			if o, c := opened.Load(), closed.Load(); c != o {
				t.Errorf("closed store: %d opened, %d closed; want as many", o, c)
			}
		})
	}
	t.Run("redis gone", func(t *testing.T) {
		var opened, closed atomic.Int64
		s, err := Open(context.Background(), "redis://"+srv.Addr, WithConnObserver(func() { opened.Add(1) }, func() { closed.Add(1) }))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		srv.Kill()
		// The client finds the connection closed by Redis, at its next
		// read.
		for deadline := time.Now().Add(30 * time.Second); closed.Load() < opened.Load(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d opened, %d closed after Redis was killed", opened.Load(), closed.Load())
			}
		}
	})
}

// TestOneConnectionPerServer: Open's client pipelines over one connection
// per server, so that the first command after Redis comes back (the
// failover layer's probe) finds out a connection Redis closed while it was
// idle, and no decision after it fails on one. With rueidis's default (one
// per two CPUs) the decisions are spread over two connections or more,
// and the first decision to reach the stale one after the probe fails.
func TestOneConnectionPerServer(t *testing.T) {
	srv := redistest.Server(t)
	var opened atomic.Int64
	s, err := Open(context.Background(), "redis://"+srv.Addr, WithConnObserver(func() { opened.Add(1) }, func() {}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	decide := func(key string) error {
		_, err := s.AllowN(ctx, key, sluice.PerMinute(100), 1)
		return err
	}
	// Decisions on many keys, one at a time: each client connection is
	// chosen at random per command, so 64 reach every one of them.
	for i := range 64 {
		if err := decide("before-" + strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := opened.Load(); n != 1 {
		t.Fatalf("%d connections opened for 64 decisions, want 1", n)
	}
	srv.Kill()
	srv.Restart()
	// The idle connection is found closed by the first command sent on
	// it, which fails; the next is sent on a new one.
	answered := false
	for i := range 3 {
		if decide("probe-"+strconv.Itoa(i)) == nil {
			answered = true
			break
		}
	}
	if !answered {
		t.Fatal("no decision answered in three after Redis restarted")
	}
	for i := range 64 {
		if err := decide("after-" + strconv.Itoa(i)); err != nil {
			t.Fatalf("decision %d after one was answered: %v", i, err)
		}
	}
}
