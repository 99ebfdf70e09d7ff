package memcachedtest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr makes the kernel kill the server when the test binary dies
// (a panic or a -timeout), so that no memcached outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// threadsStopped reports whether every thread of pid is stopped (state T
// in /proc/<pid>/task/*/stat); ok is false when /proc cannot tell.
func threadsStopped(pid int) (all, ok bool) {
	stats, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/stat")
	if err != nil || len(stats) == 0 {
		return false, false
	}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			return false, false
		}
		s := string(b)
		k := strings.LastIndexByte(s, ')')
		if k < 0 || k+2 >= len(s) {
			return false, false
		}
		if s[k+2] != 'T' {
			return false, true
		}
	}
	return true, true
}
