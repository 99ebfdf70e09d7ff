package redisstore

import (
	"context"
	"path/filepath"
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
