//go:build unix

package livefile

import (
	"os"
	"syscall"
)

// open opens path for reading without blocking: O_NONBLOCK makes the
// opening of a named pipe return at once (a regular file ignores it).
func open(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
