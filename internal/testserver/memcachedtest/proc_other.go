//go:build !linux

package memcachedtest

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }

func threadsStopped(int) (all, ok bool) { return false, false }
