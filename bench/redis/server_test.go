package redis

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// server is the one redis-server every benchmark in the package shares,
// started on first use and stopped by TestMain. It duplicates the little
// start logic of the root module's internal/testserver/redistest, which this module
// cannot import.
type server struct {
	addr  string
	dir   string
	cmd   *exec.Cmd
	done  chan struct{}
	admin *goredis.Client
}

var (
	shared     *server
	sharedErr  error
	sharedOnce sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.stop()
	}
	os.Exit(code)
}

// redisServer returns the shared server, skipping (or, under CI=true,
// failing) when redis-server is not installed.
func redisServer(tb testing.TB) *server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := fmt.Sprintf("redis-server not found (%v); install Debian's redis-server (scripts/ensure-redis.sh)", err)
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	sharedOnce.Do(func() { shared, sharedErr = start(bin) })
	if sharedErr != nil {
		tb.Fatal(sharedErr)
	}
	return shared
}

func start(bin string) (*server, error) {
	dir, err := os.MkdirTemp("", "sluice-bench-redis-")
	if err != nil {
		return nil, err
	}
	var last error
	for range 5 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		cmd := exec.Command(bin,
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "no",
			"--daemonize", "no", "--save", "", "--appendonly", "no", "--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, cmd: cmd, done: make(chan struct{})}
		go func() { cmd.Wait(); close(s.done) }()
		s.admin = goredis.NewClient(&goredis.Options{Addr: s.addr})
		if last = s.waitReady(); last == nil {
			return s, nil
		}
		s.stop()
	}
	return nil, fmt.Errorf("start redis-server: %v", last)
}

func (s *server) waitReady() error {
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("redis-server on %s exited", s.addr)
		default:
		}
		info, err := s.admin.Info(ctx, "server").Result()
		if err == nil {
			want := fmt.Sprintf("process_id:%d", s.cmd.Process.Pid)
			if !strings.Contains(info, want+"\r\n") {
				return fmt.Errorf("%s answered by another process", s.addr)
			}
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("redis-server on %s: no answer", s.addr)
}

func (s *server) stop() {
	s.admin.Close()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(3 * time.Second):
		s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
	}
	os.RemoveAll(s.dir)
}

func (s *server) flush(tb testing.TB) {
	tb.Helper()
	if err := s.admin.FlushAll(context.Background()).Err(); err != nil {
		tb.Fatalf("FLUSHALL: %v", err)
	}
}

// commandUsec is the server's total command execution time so far, in µs
// (the sum of usec over INFO commandstats).
func (s *server) commandUsec(tb testing.TB) int64 {
	tb.Helper()
	info, err := s.admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatalf("INFO commandstats: %v", err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		_, rest, ok := strings.Cut(line, "usec=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			tb.Fatalf("INFO commandstats line %q: %v", line, err)
		}
		total += n
	}
	return total
}
