// Package memcachedtest starts real memcached processes on free loopback
// ports for tests. Every process runs in its own t.TempDir, and exactly the
// processes started here are stopped (SIGTERM, then SIGKILL) by their pid
// and reaped in t.Cleanup.
//
// When memcached is not installed the test is skipped with a message,
// except when the environment has CI=true, where it fails: CI must run the
// memcached tests (scripts/ensure-memcached.sh installs Debian's memcached).
//
// The package is a normal package so that tests of any package in the
// module can import it; nothing outside tests should.
package memcachedtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testserver/proc"
)

// StartTimeout bounds how long a memcached may take to answer.
const StartTimeout = 10 * time.Second

// Option configures a server started by Server.
type Option func(*options)

type options struct {
	args []string
	tls  *TLSFiles
}

// WithArgs appends raw memcached arguments, for example WithArgs("-C")
// (no CAS) or WithArgs("-m", "8", "-M") (8 MB, no evictions).
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// TLSFiles are the PEM files of a TLS memcached.
type TLSFiles struct {
	Cert, Key string // the server's certificate chain and key
	CA        string // CA of the client certificates
	// VerifyClients requires a client certificate signed by CA.
	VerifyClients bool
}

// WithTLS makes the server serve TLS on TLSAddr with f's files; Addr
// stays plain, for the readiness check and for Do.
func WithTLS(f TLSFiles) Option {
	return func(o *options) { o.tls = &f }
}

// Instance is one memcached process started by this package.
type Instance struct {
	// Addr is host:port, always on 127.0.0.1, without TLS.
	Addr string
	// Port is the TCP port of Addr.
	Port int
	// TLSAddr is the TLS listener's host:port (WithTLS), else "".
	TLSAddr string
	// Dir is the server's working directory (its own t.TempDir).
	Dir string

	t       testing.TB
	bin     string
	args    []string // without the listeners
	tls     *TLSFiles
	tlsPort int

	proc proc.Process // the current memcached
}

// Server starts a memcached on a free 127.0.0.1 port, waits until it
// answers, and stops it when the test ends.
func Server(t testing.TB, opts ...Option) *Instance {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	i := &Instance{t: t, bin: binary(t), Dir: t.TempDir(), tls: o.tls}
	i.args = []string{"-U", "0", "-t", "2", "-c", "1024"}
	if os.Geteuid() == 0 {
		i.args = append(i.args, "-u", "root") // memcached refuses root otherwise
	}
	if o.tls != nil {
		mode := "0"
		if o.tls.VerifyClients {
			mode = "2"
		}
		i.args = append(i.args, "-Z", "-o", fmt.Sprintf("ssl_chain_cert=%s,ssl_key=%s,ssl_ca_cert=%s,ssl_verify_mode=%s", o.tls.Cert, o.tls.Key, o.tls.CA, mode))
	}
	i.args = append(i.args, o.args...)
	t.Cleanup(i.stop)
	if err := i.startFree(); err != nil {
		t.Fatalf("memcachedtest: %v", err)
	}
	return i
}

// binary finds memcached, or skips (fails under CI=true) the test.
func binary(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("memcached")
	if err == nil {
		return p
	}
	if _, serr := os.Stat("/usr/bin/memcached"); serr == nil {
		return "/usr/bin/memcached"
	}
	msg := fmt.Sprintf("memcached not found in PATH (%v); install Debian's memcached (scripts/ensure-memcached.sh) to run this test", err)
	if os.Getenv("CI") == "true" {
		t.Fatal("memcachedtest: " + msg + " [CI=true: failing instead of skipping]")
	}
	t.Skip("memcachedtest: " + msg)
	return ""
}

// freePort returns a port that was free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startFree starts the server on fresh free ports, retrying when another
// process takes a port between the probe and the bind.
func (i *Instance) startFree() error {
	var last error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return err
		}
		i.Port, i.Addr = port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if i.tls != nil {
			if i.tlsPort, err = freePort(); err != nil {
				return err
			}
			i.TLSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(i.tlsPort))
		}
		if last = i.start(); last == nil {
			return nil
		}
		if !errors.Is(last, errPortRace) {
			return last
		}
	}
	return fmt.Errorf("start memcached: 5 attempts on free ports failed, last: %w", last)
}

var errPortRace = errors.New("port taken by another process")

// listenArgs are the listener arguments for the instance's ports.
func (i *Instance) listenArgs() []string {
	if i.tls == nil {
		return []string{"-l", "127.0.0.1", "-p", strconv.Itoa(i.Port)}
	}
	return []string{"-l", "notls:" + i.Addr, "-l", i.TLSAddr}
}

// start runs the server on i's ports and waits until it answers.
func (i *Instance) start() error {
	args := append(i.listenArgs(), i.args...)
	cmd := exec.Command(i.bin, args...)
	cmd.Dir = i.Dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done, err := i.proc.Start(cmd)
	if err != nil {
		return fmt.Errorf("start %s: %w", i.bin, err)
	}
	if err := i.waitReady(cmd, done); err != nil {
		i.proc.Kill() // reaped: out is complete
		text := out.String()
		if errors.Is(err, errPortRace) || strings.Contains(text, "in use") {
			return fmt.Errorf("%w: %s (pid %d): %v: %s", errPortRace, i.Addr, cmd.Process.Pid, err, text)
		}
		return fmt.Errorf("memcached on %s (pid %d): %v: %s", i.Addr, cmd.Process.Pid, err, text)
	}
	return nil
}

// waitReady polls until the server answers stats with our pid, so that a
// server of someone else that won the port race is never taken for ours.
func (i *Instance) waitReady(cmd *exec.Cmd, done <-chan struct{}) error {
	deadline := time.Now().Add(StartTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return errors.New("exited before answering")
		default:
		}
		stats, err := i.do(time.Second, "stats")
		if err == nil {
			if pid := statField(stats, "pid"); pid != strconv.Itoa(cmd.Process.Pid) {
				return fmt.Errorf("%w: port %d answered by pid %s, not ours (%d)", errPortRace, i.Port, pid, cmd.Process.Pid)
			}
			return nil
		}
		last = err
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("no answer within %v: %v", StartTimeout, last)
}

// statField returns the value of name in a stats reply.
func statField(stats, name string) string {
	for _, line := range strings.Split(stats, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "STAT "+name+" "); ok {
			return v
		}
	}
	return ""
}

// Pid is the process id of the running (or last) memcached.
func (i *Instance) Pid() int { return i.proc.Pid() }

// Running reports whether the process has not exited yet (a paused process
// is running).
func (i *Instance) Running() bool { return i.proc.Running() }

// Kill sends SIGKILL and waits until the process is reaped: a crash. Its
// items are gone.
func (i *Instance) Kill() { i.proc.Kill() }

// Pause stops the process with SIGSTOP, and returns once every thread of
// it has stopped (where /proc tells): connections stay open and requests
// hang.
func (i *Instance) Pause() {
	i.t.Helper()
	if err := i.proc.Pause(); err != nil {
		i.t.Fatalf("memcachedtest: pause %s: %v", i.Addr, err)
	}
}

// Resume continues a paused process with SIGCONT, and returns once it
// runs again (where /proc tells).
func (i *Instance) Resume() {
	i.t.Helper()
	if err := i.proc.Resume(); err != nil {
		i.t.Fatalf("memcachedtest: resume %s: %v", i.Addr, err)
	}
}

// Restart kills the process if it still runs and starts a new one on the
// same ports, empty, and waits until it answers.
func (i *Instance) Restart() {
	i.t.Helper()
	i.proc.Kill()
	var err error
	for range 50 {
		if err = i.start(); err == nil {
			return
		}
		// The old socket may linger for a moment; retry briefly.
		time.Sleep(20 * time.Millisecond)
	}
	i.t.Fatalf("memcachedtest: restart on %s: %v", i.Addr, err)
}

// Start starts a server that was killed (Kill) on the same ports, empty,
// and waits until it answers. It is Restart for a stopped server.
func (i *Instance) Start() { i.t.Helper(); i.Restart() }

// stop ends the process with SIGKILL (memcached keeps nothing to save,
// and takes most of a second to exit on SIGTERM) and reaps it.
func (i *Instance) stop() { i.proc.Kill() }

// Do sends one text-protocol command (without its final "\r\n"; a storage
// command's data follows after "\r\n") on a fresh plain connection and
// returns the reply: its lines, "\r\n" removed, joined by "\n", up to and
// including the first line that ends it (END, STORED, a number, an
// error...). A VALUE line's data is kept as its own line.
func (i *Instance) Do(cmd string) (string, error) {
	return i.do(5*time.Second, cmd)
}

// MustDo is Do that fails the test on an error.
func (i *Instance) MustDo(cmd string) string {
	i.t.Helper()
	s, err := i.Do(cmd)
	if err != nil {
		i.t.Fatalf("memcachedtest: %s %q: %v", i.Addr, cmd, err)
	}
	return s
}

func (i *Instance) do(timeout time.Duration, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", i.Addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	var lines []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return strings.Join(lines, "\n"), err
		}
		line = strings.TrimSuffix(line, "\r\n")
		lines = append(lines, line)
		switch {
		case strings.HasPrefix(line, "VALUE "):
			f := strings.Fields(line)
			n, err := strconv.Atoi(f[3])
			if err != nil {
				return "", fmt.Errorf("bad VALUE line %q", line)
			}
			data := make([]byte, n+2)
			if _, err := io.ReadFull(r, data); err != nil {
				return "", err
			}
			lines = append(lines, string(data[:n]))
		case strings.HasPrefix(line, "STAT "):
		default:
			return strings.Join(lines, "\n"), nil
		}
	}
}
