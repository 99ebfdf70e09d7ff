//go:build !linux

package proc

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }

// ThreadsStopped reports whether every thread of pid is stopped; ok is
// false where the platform cannot tell (here).
func ThreadsStopped(int) (all, ok bool) { return false, false }

func procState(int) (st byte, ok bool) { return 0, false }
