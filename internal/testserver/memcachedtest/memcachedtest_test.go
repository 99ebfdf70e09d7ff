package memcachedtest

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testserver/proc"
)

func TestServerStartsAndStops(t *testing.T) {
	var pid int
	if !t.Run("inner", func(t *testing.T) {
		s := Server(t)
		pid = s.Pid()
		if got := s.MustDo("set k 0 60 1\r\nv"); got != "STORED" {
			t.Fatalf("set = %q, want STORED", got)
		}
		if got := s.MustDo("get k"); got != "VALUE k 0 1\nv\nEND" {
			t.Fatalf("get = %q, want the value", got)
		}
		if got := s.MustDo("get missing"); got != "END" {
			t.Fatalf("get missing = %q, want END", got)
		}
		if got := s.MustDo("incr n 1"); got != "NOT_FOUND" {
			t.Fatalf("incr missing = %q, want NOT_FOUND", got)
		}
	}) {
		t.FailNow()
	}
	if proc.Alive(pid) {
		t.Fatalf("memcached pid %d still runs after its test ended", pid)
	}
}

func TestRestartEmptiesAndKeepsThePort(t *testing.T) {
	s := Server(t)
	addr, pid := s.Addr, s.Pid()
	s.MustDo("set k 0 60 1\r\nv")
	s.Restart()
	if s.Addr != addr || s.Pid() == pid || proc.Alive(pid) {
		t.Fatalf("after Restart: %s pid %d (old pid alive %v), want %s and a new pid", s.Addr, s.Pid(), proc.Alive(pid), addr)
	}
	if got := s.MustDo("get k"); got != "END" {
		t.Fatalf("get after Restart = %q, want END (empty)", got)
	}
	s.Kill()
	if s.Running() {
		t.Fatal("Running after Kill")
	}
	if _, err := s.Do("version"); err == nil {
		t.Fatal("a killed server answered")
	}
	s.Start()
	if got := s.MustDo("version"); !strings.HasPrefix(got, "VERSION ") {
		t.Fatalf("version after Start = %q", got)
	}
}

func TestPauseResume(t *testing.T) {
	s := Server(t)
	s.Pause()
	if all, ok := proc.ThreadsStopped(s.Pid()); ok && !all {
		t.Fatal("Pause returned with a thread still running")
	}
	if _, err := s.do(200*time.Millisecond, "version"); err == nil {
		t.Fatal("a paused server answered")
	}
	s.Resume()
	if got := s.MustDo("version"); !strings.HasPrefix(got, "VERSION ") {
		t.Fatalf("version after Resume = %q", got)
	}
}
