package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

const skipMessage = "set SLUICE_REFERENCE to envoyproxy/ratelimit's service_cmd: make compat builds it and runs this test"

// sluiceBin is the sluice command, built once by TestMain when the
// reference is available.
var sluiceBin string

func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_REFERENCE") == "" {
		os.Exit(m.Run()) // every test skips: nothing to build
	}
	dir, err := os.MkdirTemp("", "sluice-compat-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sluiceBin = filepath.Join(dir, "sluice")
	// Build in sluice's own module (two levels up from bench/compat), with
	// its go.mod and go.sum: the binary that ships, not one resolved
	// through the bench module's requirements.
	build := exec.Command("go", "build", "-o", sluiceBin, "./cmd/sluice")
	build.Dir = filepath.Join("..", "..")
	out, err := build.CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build sluice: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// referenceBin returns the reference's service_cmd, or skips the test.
func referenceBin(t *testing.T) string {
	t.Helper()
	p := os.Getenv("SLUICE_REFERENCE")
	if p == "" {
		t.Skip(skipMessage)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("SLUICE_REFERENCE: %v", err)
	}
	return p
}

// syncBuffer keeps the last outputLimit bytes of a process's output for
// the test's log (the reference logs a line per call with USE_STATSD=false).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

const outputLimit = 64 << 10

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len()+len(p) > 2*outputLimit {
		keep := s.b.Bytes()[max(s.b.Len()-outputLimit, 0):]
		s.b = *bytes.NewBuffer(append([]byte(nil), keep...))
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// service is one running rate limit service (reference or sluice) and its
// gRPC client.
type service struct {
	name    string
	cmd     *exec.Cmd
	out     *syncBuffer
	done    chan struct{}
	exitErr error
	rls     pb.RateLimitServiceClient
	// http is the base URL of the service's HTTP listener (POST /json).
	http string
}

// callTimeout bounds one ShouldRateLimit call.
const callTimeout = 5 * time.Second

// should sends req and returns the answer or the error.
func (s *service) should(req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return s.rls.ShouldRateLimit(ctx, req)
}

// httpClient sends the HTTP requests of the test: keep-alive connections,
// enough idle ones for the concurrent subtests.
var httpClient = &http.Client{
	Timeout:   callTimeout,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
}

// httpReply is one HTTP answer.
type httpReply struct {
	code        int
	contentType string
	body        []byte
}

// send sends an HTTP request with body to path on the service's HTTP
// listener; contentType is not set when empty.
func (s *service) send(method, path, contentType string, body []byte) (httpReply, error) {
	req, err := http.NewRequest(method, s.http+path, bytes.NewReader(body))
	if err != nil {
		return httpReply{}, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return httpReply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return httpReply{}, err
	}
	return httpReply{code: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: b}, nil
}

// exited reports whether the process has ended.
func (s *service) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// run starts cmd as the service name, stopped (SIGKILL, by its pid) when the
// test ends; its output is logged if the test failed.
func run(t *testing.T, name string, cmd *exec.Cmd) *service {
	t.Helper()
	s := &service{name: name, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { s.exitErr = cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.done
		if t.Failed() {
			t.Logf("%s (pid %d) output:\n%s", name, cmd.Process.Pid, tail(s.out.String(), 4000))
		}
	})
	return s
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// connect dials addr and waits until the service answers a call that
// counts nothing (an unknown domain).
func (s *service) connect(t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.rls = pb.NewRateLimitServiceClient(conn)
	probe := &pb.RateLimitRequest{Domain: "compat-probe", Descriptors: []*rlpb.RateLimitDescriptor{
		{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "probe", Value: "1"}}},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.rls.ShouldRateLimit(ctx, probe, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("%s on %s does not answer: %v (exited: %v %v)\n%s", s.name, addr, err, s.exited(), s.exitErr, tail(s.out.String(), 4000))
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// referenceEnv is the reference's environment: its listeners on the given
// loopback ports, its configuration below root (ratelimit/config), its
// redis-server at redisAddr, statsd off, the RateLimit-* headers on; extra
// settings follow.
func referenceEnv(root, redisAddr, httpPort, grpcPort, debugPort string, extra ...string) []string {
	return minimalEnv(append([]string{
		"HOST=127.0.0.1", "PORT=" + httpPort,
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + grpcPort,
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + debugPort,
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"LIMIT_RESPONSE_HEADERS_ENABLED=true",
	}, extra...)...)
}

// minimalEnv is the environment of the services: PATH and HOME only, so
// that nothing from the caller's environment (REDIS_URL, SLUICE_*, ...)
// configures them.
func minimalEnv(extra ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, extra...)
}

// startReference runs the reference on its own redis-server with the YAML
// file yaml, response headers on (LIMIT_RESPONSE_HEADERS_ENABLED), and
// waits until it is healthy and answers gRPC.
func startReference(t *testing.T, yaml string, env ...string) *service {
	t.Helper()
	return startRefEnv(t, "reference", referenceBin(t), nil, yaml, env...)
}

// startReferenceOn is startReference on the redis-server rd.
func startReferenceOn(t *testing.T, rd *redistest.Instance, yaml string, env ...string) *service {
	t.Helper()
	return startRefEnvOn(t, "reference", referenceBin(t), nil, rd, yaml, env...)
}

// startRefEnv runs the command bin with args, named name, as the reference
// runs: configured by the reference's environment only (referenceEnv, with
// its own redis-server and ports, then env), its configuration the YAML
// file yaml; and waits until it is healthy on /healthcheck and answers
// gRPC.
func startRefEnv(t *testing.T, name, bin string, args []string, yaml string, env ...string) *service {
	t.Helper()
	return startRefEnvOn(t, name, bin, args, redistest.Server(t), yaml, env...)
}

// startRefEnvOn is startRefEnv on the redis-server rd.
func startRefEnvOn(t *testing.T, name, bin string, args []string, rd *redistest.Instance, yaml string, env ...string) *service {
	t.Helper()
	root := t.TempDir()
	cfgDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(yaml)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, filepath.Base(yaml)), b, 0o644); err != nil {
		t.Fatal(err)
	}
	httpPort, grpcPort, debugPort := uniquePort(t), uniquePort(t), uniquePort(t)
	cmd := exec.Command(bin, args...)
	cmd.Dir = root
	cmd.Env = referenceEnv(root, rd.Addr, httpPort, grpcPort, debugPort, env...)
	s := run(t, name, cmd)
	health := "http://127.0.0.1:" + httpPort + "/healthcheck"
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get(health)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if s.exited() {
			t.Fatalf("%s exited before it was healthy: %v\n%s", name, s.exitErr, tail(s.out.String(), 4000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not healthy on %s within 30s (last: %v)", name, health, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.http = "http://127.0.0.1:" + httpPort
	target := "127.0.0.1:" + grpcPort
	for _, e := range env {
		if path, ok := strings.CutPrefix(e, "GRPC_UDS="); ok {
			target = "unix://" + path // gRPC on that socket only
		}
	}
	s.connect(t, target)
	return s
}

// startSluice runs sluice serve with the YAML file yaml and extra flags,
// response headers on, and waits until it answers gRPC. Its --max-hits is
// raised above the hits_addend the random sequences send (up to 2^32 and a
// little more, beyond a uint32): the reference takes any, sluice refuses
// more than --max-hits (1e9 by default) as InvalidArgument, a documented
// difference (docs/compatibility.md) that would otherwise end every
// sequence that draws one. --max-descriptor-entries is raised for the same
// reason: the configuration corpus nests up to 64 levels, the default is 16.
func startSluice(t *testing.T, name, yaml string, extra ...string) *service {
	t.Helper()
	return startSluiceArgs(t, name, append([]string{"--config", yaml}, extra...)...)
}

// startSluiceArgs is startSluice with its configuration in args: --config,
// or --xds-server.
func startSluiceArgs(t *testing.T, name string, extra ...string) *service {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready.json")
	args := append([]string{"serve",
		"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--ready-file", ready,
		"--log-level", "warn", "--response-headers", "--reload-interval", "0", "--max-hits", "1099511627776", "--max-descriptor-entries", "128"}, extra...)
	cmd := exec.Command(sluiceBin, args...)
	cmd.Env = minimalEnv()
	s := run(t, name, cmd)
	var addrs struct{ HTTP, GRPC string }
	for deadline := time.Now().Add(30 * time.Second); ; {
		b, err := os.ReadFile(ready)
		if err == nil {
			if err := json.Unmarshal(b, &addrs); err != nil {
				t.Fatalf("ready file %q: %v", b, err)
			}
			break
		}
		if s.exited() {
			t.Fatalf("%s exited before listening: %v\n%s", name, s.exitErr, tail(s.out.String(), 4000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen within 30s", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.HasPrefix(addrs.GRPC, "127.0.0.1:") || !strings.HasPrefix(addrs.HTTP, "127.0.0.1:") {
		t.Fatalf("%s listens on %q and %q, not loopback", name, addrs.GRPC, addrs.HTTP)
	}
	s.http = "http://" + addrs.HTTP
	s.connect(t, addrs.GRPC)
	return s
}
