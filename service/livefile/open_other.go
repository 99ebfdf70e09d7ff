//go:build !unix

package livefile

import (
	"fmt"
	"io/fs"
	"os"
)

// open opens path for reading once a stat found a regular file: without
// O_NONBLOCK, a named pipe swapped in between can still block it.
func open(path string) (*os.File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%v)", ErrNotRegular, kind(fi.Mode()))}
	}
	return os.Open(path)
}

func inode(os.FileInfo) uint64 { return 0 }
