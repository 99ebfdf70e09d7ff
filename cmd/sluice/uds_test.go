package main

import (
	"context"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// socketDir is a short temporary directory: a socket's path is at most
// 107 bytes, and t.TempDir's can be longer.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sluice-uds-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestListenUnix(t *testing.T) {
	dir := socketDir(t)
	path := filepath.Join(dir, "rl.sock")
	l, err := listenUnix(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != fs.ModeSocket {
		t.Errorf("socket file %v, %v; want a socket of mode 0600", fi.Mode(), err)
	}
	// A live socket is another process's: refused, left alone.
	if _, err := listenUnix(path, 0o600); err == nil || !strings.Contains(err.Error(), "another process serves") {
		t.Errorf("listen on a live socket: %v, want refused", err)
	}
	l.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("after Close the socket file is still there: %v", err)
	}

	// A stale socket (its process ended without removing it) is removed.
	stale := filepath.Join(dir, "stale.sock")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	ul.Close()
	l, err = listenUnix(stale, 0o660)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	l.Close()

	// A file that is not a socket is never removed.
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := listenUnix(plain, 0o660); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("listen on a regular file: %v, want refused", err)
	}
	if b, _ := os.ReadFile(plain); string(b) != "keep" {
		t.Error("the regular file was changed")
	}
}

func TestServeFlagGRPCUDS(t *testing.T) {
	testFlag(t, "listen.grpcUDS", func(f serveFlags) string { return f.listen.grpcUDS }, []flagCase[string]{
		{"default", nil, nil, "", 0, ""},
		{"path", nil, []string{"--grpc-uds", "/run/rl.sock"}, "/run/rl.sock", 0, ""},
		{"too long", nil, []string{"--grpc-uds", "/" + strings.Repeat("x", 120)}, "/" + strings.Repeat("x", 120), 2, "longer than a Unix socket's path may be"},
		{"abstract", nil, []string{"--grpc-uds", "@rl"}, "@rl", 2, "abstract sockets"},
	})
	testFlag(t, "listen.udsMode", func(f serveFlags) socketMode { return f.listen.udsMode }, []flagCase[socketMode]{
		{"default", nil, nil, 0o660, 0, ""},
		{"octal", nil, []string{"--grpc-uds-mode", "0666"}, 0o666, 0, ""},
		{"not octal", nil, []string{"--grpc-uds-mode", "rw"}, 0, 2, "want octal permission bits"},
	})
}

// gRPC on the Unix socket only, as envoyproxy/ratelimit's GRPC_UDS; HTTP
// and its health checks stay on the TCP port.
func TestE2EGRPCUDS(t *testing.T) {
	path := filepath.Join(socketDir(t), "rl.sock")
	p := start(t, nil, "--grpc-uds", path, "--grpc-uds-mode", "0600")
	if p.grpc != path {
		t.Fatalf("ready file's grpc %q, want the socket %q", p.grpc, path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "example", Descriptors: rlsDescriptors("remote_address", "10.0.0.1")})
	if err != nil || resp.OverallCode != pb.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit over the socket = %v, %v", resp, err)
	}
	if h, err := healthpb.NewHealthClient(p.conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health over the socket = %v, %v", h, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, %v; want 0600", fi.Mode(), err)
	}
	r, err := http.Get(p.http + "/healthcheck")
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("/healthcheck on HTTP = %v, %v", r, err)
	}
	r.Body.Close()
}
