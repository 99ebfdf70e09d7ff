package tiered_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// redisServer is a redis-server this package started on a free loopback
// port (bench/ cannot import internal/testserver/redistest).
type redisServer struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// startRedis starts a redis-server for b and stops it when b ends; it skips
// (fails under CI=true) when the binary is missing.
func startRedis(b testing.TB) *redisServer {
	b.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := fmt.Sprintf("redis-server not found (%v); install Debian's redis-server (scripts/ensure-redis.sh)", err)
		if os.Getenv("CI") == "true" {
			b.Fatal(msg)
		}
		b.Skip(msg)
	}
	dir := b.TempDir()
	var last error
	for range 5 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
			"--protected-mode", "no", "--dir", dir, "--logfile", dir+"/redis.log")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, done: make(chan struct{})}
		go func() { cmd.Wait(); close(s.done) }()
		if last = s.waitPing(5 * time.Second); last == nil {
			b.Cleanup(s.stop)
			return s
		}
		s.stop()
	}
	b.Fatalf("start redis-server: %v", last)
	return nil
}

func (s *redisServer) waitPing(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-s.done:
			return fmt.Errorf("redis-server on %s exited", s.addr)
		default:
		}
		c, err := net.DialTimeout("tcp", s.addr, 100*time.Millisecond)
		if err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			buf := make([]byte, 7)
			_, err = c.Write([]byte("PING\r\n"))
			if err == nil {
				_, err = c.Read(buf)
			}
			c.Close()
			if err == nil && string(buf[:5]) == "+PONG" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer PING: %v", s.addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill crashes the server (SIGKILL), for the outage benchmark.
func (s *redisServer) kill() {
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

func (s *redisServer) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(3 * time.Second):
		s.kill()
	}
}
