// Package redisserver starts a redis-server on a free loopback port for
// this module's benchmarks and harnesses, with no persistence in its own
// temporary directory, and stops it by its pid.
//
// The root module's internal/testserver/redistest does the same for tests,
// bound to one testing.TB: a harness program has none, and a package of
// benchmarks shares one server for all of its benchmarks.
package redisserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// StartTimeout bounds how long a server may take to answer.
const StartTimeout = 10 * time.Second

// stopTimeout bounds how long Stop waits after SIGTERM before SIGKILL.
const stopTimeout = 3 * time.Second

// Server is one redis-server process started by Start.
type Server struct {
	// Addr is host:port, on 127.0.0.1.
	Addr string

	cmd  *exec.Cmd
	dir  string
	done chan struct{} // closed when cmd has been reaped
}

// Binary is the path of redis-server, or an error that says how to
// install it.
func Binary() (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found (%w); install Debian's redis-server (scripts/ensure-redis.sh)", err)
	}
	return bin, nil
}

// Require skips tb when redis-server is not installed, or fails it when
// the environment has CI=true (CI must run what needs Redis).
func Require(tb testing.TB) {
	tb.Helper()
	if _, err := Binary(); err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatal(err)
		}
		tb.Skip(err)
	}
}

// Start starts a redis-server on a free 127.0.0.1 port and returns once
// it answers with its own pid (a server of someone else that won the
// port is never taken for it), retrying on another port when it could
// not. The kernel kills the server when the caller's process dies.
func Start() (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-bench-redis-")
	if err != nil {
		return nil, err
	}
	var last error
	for range 5 {
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		cmd := exec.Command(bin,
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "no",
			"--daemonize", "no", "--save", "", "--appendonly", "no", "--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, dir: dir, done: make(chan struct{})}
		go func() { cmd.Wait(); close(s.done) }()
		if last = s.waitReady(); last == nil {
			return s, nil
		}
		s.kill()
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("start redis-server: %w", last)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls until the server answers INFO server with its pid.
func (s *Server) waitReady() error {
	deadline := time.Now().Add(StartTimeout)
	for {
		select {
		case <-s.done:
			return fmt.Errorf("redis-server on %s exited", s.Addr)
		default:
		}
		info, err := infoServer(s.Addr)
		if err == nil {
			if !strings.Contains(info, fmt.Sprintf("process_id:%d\r\n", s.Pid())) {
				return fmt.Errorf("%s answered by another process", s.Addr)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s: no answer within %v: %v", s.Addr, StartTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// infoServer sends INFO server on a fresh connection and returns the
// reply's text.
func infoServer(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(head, "$") {
		return "", errors.New("INFO: " + strings.TrimSpace(head))
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil || n < 0 || n > 1<<20 {
		return "", fmt.Errorf("INFO: bad reply %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", err
	}
	return string(body), nil
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Kill crashes the server (SIGKILL), waits until it is reaped and
// removes its directory.
func (s *Server) Kill() {
	s.kill()
	os.RemoveAll(s.dir)
}

func (s *Server) kill() {
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// Stop ends the server (SIGTERM, then SIGKILL when it has not exited
// after a few seconds), waits until it is reaped and removes its
// directory. A server already ended is only cleaned up.
func (s *Server) Stop() {
	select {
	case <-s.done:
	default:
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(stopTimeout):
			s.kill()
		}
	}
	os.RemoveAll(s.dir)
}
