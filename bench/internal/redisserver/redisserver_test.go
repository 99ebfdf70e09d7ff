package redisserver

import (
	"strings"
	"syscall"
	"testing"
)

func TestStartStop(t *testing.T) {
	Require(t)
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	info, err := infoServer(s.Addr)
	if err != nil || !strings.Contains(info, "redis_version:") {
		t.Fatalf("INFO server = %q, %v", info, err)
	}
	pid := s.Pid()
	s.Stop()
	if syscall.Kill(pid, 0) == nil {
		t.Fatalf("pid %d still exists after Stop", pid)
	}
	if _, err := infoServer(s.Addr); err == nil {
		t.Fatal("a stopped server answered")
	}
}
