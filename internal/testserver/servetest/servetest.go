// Package servetest builds the sluice command and runs sluice serve on
// loopback ports for the tests of the examples and the documentation. Each
// process started here is killed and reaped in t.Cleanup, by its pid.
//
// It is a normal package so that tests of any package in the module can
// import it; nothing outside tests should.
package servetest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
	buildOut  []byte
)

// Binary builds ./cmd/sluice once per test process and returns its path.
// The directory is removed by Cleanup, which the caller's TestMain runs.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "sluice-bin-")
		if buildErr != nil {
			return
		}
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..", "..")
		cmd := exec.Command("go", "build", "-o", filepath.Join(buildDir, "sluice"), "./cmd/sluice")
		cmd.Dir = root
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("go build ./cmd/sluice: %v\n%s", buildErr, buildOut)
	}
	return filepath.Join(buildDir, "sluice")
}

// Cleanup removes the binary built by Binary; call it from TestMain after
// m.Run.
func Cleanup() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// Output collects a process's output: a bytes.Buffer safe for exec's
// copying goroutine while the test reads it.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Output) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Output) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Server is a running sluice serve.
type Server struct {
	HTTP string // host:port of the HTTP listener
	GRPC string // host:port of the gRPC listener
	// Admin is host:port of the admin listener, when args have --admin.
	Admin string
	// StoreAPI is host:port of the store API, when args have
	// --store-api-addr.
	StoreAPI string
	cmd      *exec.Cmd
	out      *Output
}

// Log returns what the server wrote to stderr so far.
func (s *Server) Log() string { return s.out.String() }

// Start runs sluice serve with args on loopback ports (its --http and --grpc
// come first, so args may not repeat them) and waits until it listens.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return StartIn(t, "", args...)
}

// StartIn is Start with dir as the working directory ("" for the test's).
func StartIn(t testing.TB, dir string, args ...string) *Server {
	t.Helper()
	bin := Binary(t)
	ready := filepath.Join(t.TempDir(), "ready.json")
	args = append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--ready-file", ready, "--reload-interval", "0"}, args...)
	s := &Server{cmd: exec.Command(bin, args...), out: &Output{}}
	s.cmd.Stderr = s.out
	s.cmd.Dir = dir
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("sluice serve %v stderr:\n%s", args, s.out)
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; {
		if b, err := os.ReadFile(ready); err == nil {
			var addrs struct {
				HTTP, GRPC, Admin string
				StoreAPI          string `json:"store_api"`
			}
			if err := json.Unmarshal(b, &addrs); err != nil {
				t.Fatalf("ready file %q: %v", b, err)
			}
			s.HTTP, s.GRPC, s.Admin, s.StoreAPI = addrs.HTTP, addrs.GRPC, addrs.Admin, addrs.StoreAPI
			return s
		}
		select {
		case <-done:
			t.Fatalf("sluice serve exited before listening:\n%s", s.out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice serve did not listen within 20s:\n%s", s.out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
