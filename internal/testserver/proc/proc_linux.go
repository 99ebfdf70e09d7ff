package proc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr makes the kernel kill the process when the test binary
// dies, so that no server outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// ThreadsStopped reports whether every thread of pid is stopped (state T
// in /proc/<pid>/task/*/stat); ok is false when /proc cannot tell.
func ThreadsStopped(pid int) (all, ok bool) {
	stats, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/stat")
	if err != nil || len(stats) == 0 {
		return false, false
	}
	for _, f := range stats {
		st, ok := state(f)
		if !ok {
			return false, false
		}
		if st != 'T' {
			return false, true
		}
	}
	return true, true
}

// procState is the state of pid as /proc/<pid>/stat says (Z for a
// zombie); ok is false when /proc cannot tell.
func procState(pid int) (st byte, ok bool) {
	return state("/proc/" + strconv.Itoa(pid) + "/stat")
}

// state reads the state field of a /proc stat file: "pid (comm) S ...".
func state(path string) (st byte, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	s := string(b)
	k := strings.LastIndexByte(s, ')')
	if k < 0 || k+2 >= len(s) {
		return 0, false
	}
	return s[k+2], true
}
