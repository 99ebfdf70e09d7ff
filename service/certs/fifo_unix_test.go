//go:build unix

package certs_test

import (
	"os"
	"syscall"
	"testing"
)

// mkfifoAt puts a named pipe at path, in place of its file.
func mkfifoAt(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path+".pipe", 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".pipe", path); err != nil {
		t.Fatal(err)
	}
}
