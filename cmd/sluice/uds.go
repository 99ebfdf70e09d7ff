package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
)

// maxSocketPath bounds --grpc-uds: the longest path a Unix socket's address
// holds on Linux (sun_path, 108 bytes with its terminating NUL).
const maxSocketPath = 107

// socketMode is a --grpc-uds-mode: octal permission bits of the socket file.
type socketMode fs.FileMode

func (m *socketMode) Set(s string) error {
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 0o777 {
		return errors.New("want octal permission bits, such as 0660")
	}
	*m = socketMode(n)
	return nil
}

func (m *socketMode) String() string {
	if m == nil {
		return "0660"
	}
	return fmt.Sprintf("%#o", uint32(*m))
}

// checkSocketPath reports a --grpc-uds path a Unix socket cannot have.
func checkSocketPath(path string) error {
	switch {
	case len(path) > maxSocketPath:
		return fmt.Errorf("--grpc-uds: %d bytes, longer than a Unix socket's path may be (%d)", len(path), maxSocketPath)
	case path[0] == '@':
		return errors.New("--grpc-uds: abstract sockets (@name) are not served: give a file path")
	}
	return nil
}

// listenUnix listens on the Unix socket path with the permissions mode. A
// socket file left there by a process that ended (nothing accepts on it)
// is removed first; a live socket, or a file that is not a socket, is an
// error, never removed. The listener removes the file when it closes.
func listenUnix(path string, mode fs.FileMode) (net.Listener, error) {
	if err := removeStale(path); err != nil {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// The file is made with the process's umask; the operator's mode
	// decides who may connect (writing to it is connecting).
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("setting the mode of %s: %w", path, err)
	}
	return l, nil
}

// removeStale removes path when it is a socket that nothing accepts on.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket: not removed", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s: another process serves on this socket", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s: cannot tell whether the socket is in use: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the stale socket %s: %w", path, err)
	}
	return nil
}
