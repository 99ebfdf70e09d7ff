// Package livefile reads the files that sluice serve re-reads while it
// runs: the admin token file, certificates, keys and CAs, the
// configuration. Such a path may be replaced at any moment by anything: a
// named pipe, whose opening blocks until a writer comes; a device, which
// never ends; a file far larger than any configuration. Read refuses what
// is not a regular file without blocking, and a file larger than its
// bound without reading it all.
//
// Value keeps what is loaded from some files and loads it again when one
// of them changes, without ever making a caller wait for another's load
// (so that no lock is held over a read) and keeping the value in force
// when the new files do not load.
package livefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
)

// ErrNotRegular is the error of a path that is not a regular file (a
// named pipe, a device, a socket, a directory).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is the error of a file larger than its bound.
var ErrTooLarge = errors.New("file too large")

// Read returns the contents of the regular file at path (symbolic links
// followed), at most max bytes. A path that is not a regular file is an
// error wrapping ErrNotRegular, returned without blocking; a larger file
// one wrapping ErrTooLarge. Errors are *fs.PathError naming path.
func Read(path string, max int64) ([]byte, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%v)", ErrNotRegular, kind(fi.Mode()))}
	}
	if fi.Size() > max {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: %d bytes, more than %d", ErrTooLarge, fi.Size(), max)}
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(len(b)) > max { // it grew while read
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, max)}
	}
	return b, nil
}

// kind names the type of a file that is not regular.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return "mode " + m.String()
}

// Version tells a file's versions apart: a rewrite, or a rename or a
// symbolic link swapped over it, changes its size, its modification time
// or its inode. The zero Version is a file that cannot be stat'ed.
type Version struct {
	size, mtime int64
	ino         uint64
	mode        fs.FileMode
}

// Stat returns the Version of the file at path (symbolic links
// followed); the zero Version when it cannot be stat'ed. A stat never
// blocks on a named pipe.
func Stat(path string) Version {
	fi, err := os.Stat(path)
	if err != nil {
		return Version{}
	}
	return Version{size: fi.Size(), mtime: fi.ModTime().UnixNano(), ino: inode(fi), mode: fi.Mode().Type()}
}

// Hooks report what a Value does; either may be nil.
type Hooks[T any] struct {
	// Loaded is called after the files changed and loaded.
	Loaded func(T)
	// Failed is called after the files changed and did not load; the
	// value in force is kept.
	Failed func(error)
}

// Value is a value loaded from files, loaded again when one of them
// changes. It is safe for concurrent use.
type Value[T any] struct {
	paths []string
	load  func() (T, error)
	hooks Hooks[T]

	loading atomic.Bool // a load is under way: the others use the value in force

	mu   sync.Mutex // never held over a read
	vers []Version  // of the last attempt, loaded or not
	val  T
}

// New loads a value from paths with load (which should read them with
// Read) and returns it, or load's error.
func New[T any](paths []string, load func() (T, error), h Hooks[T]) (*Value[T], error) {
	vers := stats(paths)
	v, err := load()
	if err != nil {
		return nil, err
	}
	return &Value[T]{paths: paths, load: load, hooks: h, vers: vers, val: v}, nil
}

// Current returns the value in force, first loading it again when a file
// changed since the last attempt. While another caller loads, it returns
// the value in force at once.
func (v *Value[T]) Current() T {
	vers := stats(v.paths)
	v.mu.Lock()
	val, same := v.val, equal(vers, v.vers)
	v.mu.Unlock()
	if same || !v.loading.CompareAndSwap(false, true) {
		return val
	}
	defer v.loading.Store(false)
	nv, err := v.load()
	v.mu.Lock()
	v.vers = vers // a file that does not load is reported once, not at every call
	if err == nil {
		v.val, val = nv, nv
	}
	v.mu.Unlock()
	switch {
	case err != nil && v.hooks.Failed != nil:
		v.hooks.Failed(err)
	case err == nil && v.hooks.Loaded != nil:
		v.hooks.Loaded(nv)
	}
	return val
}

func stats(paths []string) []Version {
	vs := make([]Version, len(paths))
	for i, p := range paths {
		vs[i] = Stat(p)
	}
	return vs
}

func equal(a, b []Version) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
