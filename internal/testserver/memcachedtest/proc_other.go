//go:build !linux

package memcachedtest

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
