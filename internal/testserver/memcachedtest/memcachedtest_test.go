package memcachedtest

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// alive reports whether pid is a live process that is not a zombie.
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no /proc: kill(0) said it exists
	}
	s := string(b)
	if k := strings.LastIndexByte(s, ')'); k >= 0 && k+2 < len(s) {
		return s[k+2] != 'Z'
	}
	return true
}

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
	if alive(pid) {
		t.Fatalf("memcached pid %d still runs after its test ended", pid)
	}
}

func TestRestartEmptiesAndKeepsThePort(t *testing.T) {
	s := Server(t)
	addr, pid := s.Addr, s.Pid()
	s.MustDo("set k 0 60 1\r\nv")
	s.Restart()
	if s.Addr != addr || s.Pid() == pid || alive(pid) {
		t.Fatalf("after Restart: %s pid %d (old pid alive %v), want %s and a new pid", s.Addr, s.Pid(), alive(pid), addr)
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
	if all, ok := threadsStopped(s.Pid()); ok && !all {
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
