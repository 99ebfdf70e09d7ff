package memcachedtest

import "syscall"

// sysProcAttr makes the kernel kill the server when the test binary dies
// (a panic or a -timeout), so that no memcached outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
