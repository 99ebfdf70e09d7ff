package hostile

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	testproc "github.com/sluicehq/sluice/internal/testserver/proc"
	"github.com/sluicehq/sluice/internal/testserver/servetest"
)

// flagArg is one flag of sluice serve, given as --name=value.
type flagArg struct{ name, value string }

// shutdownTimeout is the --shutdown-timeout of every process, and
// shutdownMargin what SIGTERM may take beyond it.
const (
	shutdownTimeout = time.Second
	shutdownMargin  = 10 * time.Second // generous: a process that exits is not waited for
)

// commonFlags are given to every process: short transport limits, so that
// the slow and idle classes end within seconds, and no GC heap floor, so
// that RSS follows the live heap.
var commonFlags = []flagArg{
	{"http-read-header-timeout", "1s"},
	{"http-read-timeout", "2s"},
	{"http-write-timeout", "2s"},
	{"http-idle-timeout", "5s"},
	{"max-connections", "64"},
	{"grpc-max-concurrent-streams", "100"},
	{"grpc-handshake-timeout", "1s"},
	{"request-timeout", "5s"},
	{"shutdown-timeout", shutdownTimeout.String()},
	{"gc-heap-floor", "0"},
	{"log-level", "info"},
}

// hostileConfig is the configuration of every process: domain hostile.
const hostileConfig = `domain: hostile
descriptors:
  - key: probe
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: hostile
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: f
    rate_limit: {unit: hour, requests_per_unit: 1000000}
  - key: remote_address
    rate_limit: {algorithm: sliding_log, window: 1h, requests_per_unit: 3}
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 1000}
`

// dialTimeout bounds the suite's own connects: generous, so that a busy
// machine running the suite late is not taken for a server's refusal.
const dialTimeout = 5 * time.Second

// rssLimit is the resident size at which the suite kills a process (sluice
// or redis-server) so that a runaway allocation cannot take the machine.
const rssLimit = 1 << 30

// syncBuffer collects a process's output.
type syncBuffer = servetest.Output

// proc is a running sluice serve.
type proc struct {
	cmd      *exec.Cmd
	stderr   *syncBuffer
	httpAddr string // host:port
	grpcAddr string
	admin    string // the admin listener's host:port, "" when off
	// storeAPIAddr is the store API's host:port, with --store-api-addr.
	storeAPIAddr string
	done         chan struct{}
	exitErr      error

	// Clients opened right after start and kept warm: the probes' and the
	// sampler's, as Envoy's and Prometheus' long-lived connections are.
	probeHTTP, metricsHTTP *http.Client
	conn                   *grpc.ClientConn
	rls                    pb.RateLimitServiceClient

	killMu sync.Mutex
	killed string // why the suite killed it, if it did
}

// start runs sluice serve with the common flags, then args, on loopback
// ports and waits until it listens. A flag the binary does not know fails
// the test naming it (or, with HOSTILE_DROP_UNKNOWN_FLAGS=1, is dropped).
func start(t *testing.T, args []flagArg) *proc {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "hostile.yaml")
	if err := os.WriteFile(cfg, []byte(hostileConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	flags := append(append([]flagArg{}, commonFlags...), args...)
	flags = append(flags, flagArg{"config", cfg})
	return startOnce(t, dir, flags)
}

// startOnce starts one process with flags (knownFlags of them).
func startOnce(t *testing.T, dir string, flags []flagArg) *proc {
	t.Helper()
	flags = knownFlags(t, flags)
	ready := filepath.Join(dir, "ready.json")
	os.Remove(ready)
	args := []string{"serve", "--http=127.0.0.1:0", "--grpc=127.0.0.1:0", "--ready-file=" + ready}
	for _, f := range flags {
		args = append(args, "--"+f.name+"="+f.value)
	}
	p := &proc{cmd: exec.Command(binary, args...), stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stderr = p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Started and waited on one locked thread, whose exit alone would
	// send the Pdeathsig (a process killed mid-class, exit -1, at load 15).
	if err := testproc.StartHeld(p.cmd, func(err error) { p.exitErr = err; close(p.done) }); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := os.ReadFile(ready)
		if err == nil {
			var addrs struct {
				HTTP, GRPC, Admin string
				StoreAPI          string `json:"store_api"`
			}
			if err := json.Unmarshal(b, &addrs); err != nil {
				p.kill("bad ready file")
				t.Fatalf("ready file %s: %v", b, err)
			}
			p.httpAddr, p.grpcAddr, p.admin, p.storeAPIAddr = addrs.HTTP, addrs.GRPC, addrs.Admin, addrs.StoreAPI
			break
		}
		select {
		case <-p.done:
			t.Fatalf("sluice exited before listening: %v\n%s", p.exitErr, p.stderr)
		default:
		}
		if time.Now().After(deadline) {
			p.kill("did not listen")
			t.Fatalf("sluice did not listen within 20s:\n%s", p.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() {
		p.kill("")
		if t.Failed() {
			log, _, _ := strings.Cut(p.stderr.String(), "SIGQUIT: quit")
			t.Logf("sluice stderr (last 4 KiB, without its goroutine dump):\n%s", tail(log, 4096))
		}
	})
	p.probeHTTP = warmClient()
	p.metricsHTTP = warmClient()
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		p.probeHTTP.CloseIdleConnections()
		p.metricsHTTP.CloseIdleConnections()
	})
	p.conn, p.rls = conn, pb.NewRateLimitServiceClient(conn)
	return p
}

// warmClient is an HTTP client on one keep-alive connection.
func warmClient() *http.Client {
	return &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{}).DialContext,
			MaxConnsPerHost:     1,
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     time.Minute,
		},
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill ends the process with SIGKILL and waits for it; why, when not empty,
// is recorded as the reason.
func (p *proc) kill(why string) {
	if why != "" {
		p.killMu.Lock()
		if p.killed == "" {
			p.killed = why
		}
		p.killMu.Unlock()
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) killReason() string {
	p.killMu.Lock()
	defer p.killMu.Unlock()
	return p.killed
}

// terminate sends SIGTERM and returns how long the process took to exit
// and its exit code; ok is false when it was still running after within.
func (p *proc) terminate(within time.Duration) (took time.Duration, code int, ok bool) {
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return 0, -1, false
	}
	select {
	case <-p.done:
	case <-time.After(within):
		return time.Since(start), -1, false
	}
	took = time.Since(start)
	var ee *exec.ExitError
	if errors.As(p.exitErr, &ee) {
		return took, ee.ExitCode(), true
	}
	return took, 0, true
}

// httpURL is the URL of path on the process' HTTP listener.
func (p *proc) httpURL(path string) string { return "http://" + p.httpAddr + path }

// hostileClient is an HTTP client for attack requests, apart from the warm
// probe connections.
func hostileClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
}

// hostileConn is a gRPC connection for attack calls, apart from the warm
// probe connection; it is closed when the test ends.
func (p *proc) hostileConn(t *testing.T) (*grpc.ClientConn, pb.RateLimitServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, pb.NewRateLimitServiceClient(conn)
}

// rpcCtx is a context for one call of the suite.
func rpcCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// panicLines returns the lines of the process' log that report a panic.
func (p *proc) panicLines() []string {
	var out []string
	for _, l := range strings.Split(p.stderr.String(), "\n") {
		if strings.Contains(strings.ToLower(l), "panic") {
			out = append(out, l)
		}
	}
	return out
}

// dump makes a running process print its goroutines (SIGQUIT) and returns
// the stacks that run sluice's own code.
func (p *proc) dump() string {
	before := len(p.stderr.String())
	p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
	}
	out := p.stderr.String()[before:]
	var keep []string
	for _, g := range strings.Split(out, "\n\n") {
		if !(strings.Contains(g, "sluicehq/sluice") || strings.Contains(g, "\nmain.")) || strings.Contains(g, "signal.signal_recv") {
			continue
		}
		// The goroutine's header and its functions, without runtime
		// frames and file lines.
		var fns []string
		for i, l := range strings.Split(g, "\n") {
			if i == 0 || !strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, "runtime.") && !strings.HasPrefix(l, "created by") {
				fns = append(fns, l)
			}
		}
		keep = append(keep, strings.Join(fns, "\n  "))
	}
	return tail(strings.Join(keep, "\n"), 8192)
}
