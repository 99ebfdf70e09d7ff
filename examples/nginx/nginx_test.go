//go:build linux

// Package nginx tests examples/nginx/nginx.conf with a real nginx in front
// of a real sluice.
package nginx

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testserver/servetest"
	"github.com/sluicehq/sluice/internal/testserver/window"
)

// nginxBinary finds nginx, or skips the test (fails it under CI=true).
func nginxBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	msg := "nginx not found (scripts/ensure-nginx.sh installs it)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " [CI=true: failing instead of skipping]")
	}
	t.Skip(msg)
	return ""
}

// syncBuffer collects a process's output.
type syncBuffer = servetest.Output

// run starts cmd, killed with the test binary and stopped (sig, then
// SIGKILL after 5 s) when the test ends; done closes when it exits.
func run(t *testing.T, name string, cmd *exec.Cmd, sig syscall.Signal) (out *syncBuffer, done chan struct{}) {
	t.Helper()
	out, done = &syncBuffer{}, make(chan struct{})
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(sig)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out)
		}
	})
	return out, done
}

// startSluice builds and starts sluice serve with args on loopback and
// returns its HTTP address.
func startSluice(t *testing.T, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/sluice").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ready := filepath.Join(dir, "ready.json")
	args = append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--ready-file", ready}, args...)
	out, done := run(t, "sluice", exec.Command(bin, args...), syscall.SIGTERM)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil {
			var addrs struct{ HTTP string }
			if err := json.Unmarshal(b, &addrs); err != nil {
				t.Fatalf("ready file %s: %v", b, err)
			}
			return addrs.HTTP
		}
		select {
		case <-done:
			t.Fatalf("sluice exited before listening:\n%s", out)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice did not listen within 20s:\n%s", out)
		}
	}
}

// freePort returns a port that was free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// nginxConf is nginx.conf with its addresses and paths replaced for the
// test: each replaced text must be in the file exactly once (or, for the
// directories, at least once), so that the file cannot drift from what is
// tested.
func nginxConf(t *testing.T, prefix, sluiceAddr, appAddr string, port int) string {
	t.Helper()
	b, err := os.ReadFile("nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	for _, r := range [][2]string{
		{"listen 80;", fmt.Sprintf("listen 127.0.0.1:%d;", port)},
		{"server 127.0.0.1:8080;", "server " + sluiceAddr + ";"},
		{"server 127.0.0.1:3000;", "server " + appAddr + ";"},
	} {
		if n := strings.Count(conf, r[0]); n != 1 {
			t.Fatalf("nginx.conf has %q %d times, want once", r[0], n)
		}
		conf = strings.Replace(conf, r[0], r[1], 1)
	}
	for _, dir := range []string{"/var/log/nginx/", "/var/lib/nginx/"} {
		if !strings.Contains(conf, dir) {
			t.Fatalf("nginx.conf does not name %s", dir)
		}
		conf = strings.ReplaceAll(conf, dir, prefix+"/")
	}
	return conf
}

// startNginx runs nginx with the example configuration in the foreground
// (daemon off) with its prefix, pid file and logs in a temporary
// directory, and waits until it accepts connections on port.
func startNginx(t *testing.T, sluiceAddr, appAddr string) string {
	t.Helper()
	bin := nginxBinary(t)
	prefix := t.TempDir()
	port := freePort(t)
	confPath := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(nginxConf(t, prefix, sluiceAddr, appAddr, port)), 0o644); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(prefix, "nginx.pid")
	// No -e (nginx 1.19.5 and later): the configuration's error_log, in
	// prefix, takes over once it is read.
	cmd := exec.Command(bin, "-p", prefix+"/", "-c", confPath, "-g", "daemon off; pid "+pidFile+";")
	out, done := run(t, "nginx", cmd, syscall.SIGQUIT)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(prefix, "error.log"))
			t.Logf("nginx error.log:\n%s", b)
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		pid, _ := os.ReadFile(pidFile)
		if strings.TrimSpace(string(pid)) == strconv.Itoa(cmd.Process.Pid) {
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				return "http://" + addr
			}
		}
		select {
		case <-done:
			b, _ := os.ReadFile(filepath.Join(prefix, "error.log"))
			t.Fatalf("nginx exited:\n%s\n%s", out, b)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not listen on %s within 10s:\n%s", addr, out)
		}
	}
}

// clientFrom is an HTTP client whose connections come from the loopback
// address local, a client address of its own for nginx.
func clientFrom(local string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
	}}
}

type reply struct {
	code                  int
	body                  string
	remaining, retryAfter string
	contentType           string
}

func get(t *testing.T, c *http.Client, url string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, string(b), resp.Header.Get("RateLimit-Remaining"), resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type")}
}

// TestNginxAuthRequest runs a client → nginx (nginx.conf) → application
// chain with sluice deciding each request through auth_request, at three
// requests a minute per client address (ratelimit.yaml).
func TestNginxAuthRequest(t *testing.T) {
	nginxBinary(t)
	var mu sync.Mutex
	var seen []string // X-Forwarded-For of the requests the application served
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("X-Forwarded-For"))
		mu.Unlock()
		if r.URL.Path == "/forbidden" {
			http.Error(w, "forbidden by the application", http.StatusForbidden)
			return
		}
		io.WriteString(w, "hello from the application\n")
	}))
	t.Cleanup(app.Close)
	// The flags of nginx.conf's header comment.
	sluiceAddr := startSluice(t, "--config", "ratelimit.yaml", "--auth-domain", "web",
		"--auth-deny-status", "403", "--trusted-proxies", "127.0.0.1,::1")
	base := startNginx(t, sluiceAddr, strings.TrimPrefix(app.URL, "http://"))

	// sluice counts in windows of the wall clock's minute: the sequence
	// runs within one, on fresh client addresses if a slow machine made
	// it straddle a boundary.
	window.Run(t, time.Minute, 10*time.Second, func(f *window.Findings, attempt int) {
		mu.Lock()
		seen = nil
		mu.Unlock()
		// Client A spoofs every forwarding header, differently each
		// time: all four requests count against A's address.
		addrA, addrB := fmt.Sprintf("127.0.0.%d", 2+2*attempt), fmt.Sprintf("127.0.0.%d", 3+2*attempt)
		a := clientFrom(addrA)
		for i := range 3 {
			spoof := fmt.Sprintf("10.9.0.%d", i)
			got := get(t, a, base+"/", "X-Forwarded-For", spoof, "X-Real-IP", spoof, "Forwarded", "for="+spoof)
			if got.code != 200 || got.body != "hello from the application\n" || got.remaining != strconv.Itoa(2-i) {
				f.Errorf("request %d from %s = %+v, want 200 from the application with RateLimit-Remaining %d", i+1, addrA, got, 2-i)
				return
			}
		}
		got := get(t, a, base+"/", "X-Forwarded-For", "10.9.0.99", "X-Real-IP", "10.9.0.99", "Forwarded", "for=10.9.0.99")
		ra, err := strconv.Atoi(got.retryAfter)
		if got.code != 429 || err != nil || ra < 1 || ra > 60 || got.remaining != "0" || got.contentType != "application/problem+json" {
			f.Errorf("4th request from %s = %+v, want 429 with Retry-After in 1..60, RateLimit-Remaining 0 and a problem body", addrA, got)
		}
		// Without any spoofing, still limited: the key is the address.
		if got := get(t, a, base+"/other"); got.code != 429 {
			f.Errorf("5th request from %s = %+v, want 429", addrA, got)
		}

		// Another client has its own quota: requests are not keyed by
		// nginx's address either.
		b := clientFrom(addrB)
		if got := get(t, b, base+"/", "X-Forwarded-For", addrA); got.code != 200 || got.remaining != "2" {
			f.Errorf("first request from %s (claiming %s) = %+v, want 200 with RateLimit-Remaining 2", addrB, addrA, got)
		}
		// The application's own 403 reaches the client as it is.
		if got := get(t, b, base+"/forbidden"); got.code != 403 || !strings.Contains(got.body, "forbidden by the application") {
			f.Errorf("application 403 through nginx = %+v, want the application's 403", got)
		}

		mu.Lock()
		defer mu.Unlock()
		if first := "10.9.0.0, " + addrA; len(seen) != 5 || seen[0] != first {
			f.Errorf("the application served X-Forwarded-For %q, want 5 requests, the first with %q", seen, first)
		}
	})
}
