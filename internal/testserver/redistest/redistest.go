// Package redistest starts real redis-server processes on free loopback
// ports for tests: a single server (Server) and a local Redis Cluster
// (Cluster). Every process is started with no persistence in its own
// t.TempDir, and exactly the processes started here are stopped (SIGTERM,
// then SIGKILL) and reaped in t.Cleanup.
//
// When redis-server is not installed the test is skipped with a message,
// except when the environment has CI=true, where it fails: CI must run the
// Redis tests (scripts/ensure-redis.sh installs Debian's redis-server).
//
// REDISTEST_SERVER names another server binary to run instead of
// redis-server: a path to valkey-server, for example, which runs every
// Redis-backed test on Valkey (make test does, when Valkey is present:
// scripts/valkey-tests.sh). Each server started logs its name and
// version (go test -v, or a failing test's output), and Version reports
// them.
//
// REDISTEST_RECORD names a file to which every test that starts a server
// appends a line, its package's directory and its top-level name, tab
// separated: the list of the Redis-backed tests that the Valkey run
// repeats.
//
// The package is a normal package so that tests of any package in the
// module can import it; nothing outside tests should.
package redistest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testserver/proc"
)

// StartTimeout bounds how long a redis-server may take to answer PING.
const StartTimeout = 10 * time.Second

// stopTimeout bounds how long a server may take to exit after SIGTERM
// before it is killed.
const stopTimeout = 3 * time.Second

// Option configures a server started by Server.
type Option func(*options)

type options struct {
	password  string
	user      string
	userPass  string
	maxmemory string
	policy    string
	args      []string
}

// WithPassword protects the default user with password (requirepass).
func WithPassword(password string) Option {
	return func(o *options) { o.password = password }
}

// WithUser adds an ACL user with every permission and disables the default
// user, so that every connection has to AUTH as name/password. Do
// authenticates as this user.
func WithUser(name, password string) Option {
	return func(o *options) { o.user, o.userPass = name, password }
}

// WithMaxMemory sets maxmemory (for example "8mb") and maxmemory-policy
// (for example "noeviction" or "allkeys-lru"; empty keeps Redis' default).
func WithMaxMemory(maxmemory, policy string) Option {
	return func(o *options) { o.maxmemory, o.policy = maxmemory, policy }
}

// WithArgs appends raw redis-server arguments, for example
// WithArgs("--hz", "100").
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// Instance is one redis-server process started by this package.
type Instance struct {
	// Addr is host:port, always on 127.0.0.1.
	Addr string
	// Port is the TCP port of Addr.
	Port int
	// Dir is the server's working directory (its own t.TempDir).
	Dir string
	// User and Password are the credentials Do uses; both are empty
	// when the server has no authentication. User is empty for
	// WithPassword (the default user).
	User, Password string

	t       testing.TB
	bin     string
	conf    string   // config file given first (sentinel), or ""
	args    []string // without --port
	version string   // "redis 7.0.15", "valkey 8.0.1": set at the first start

	proc proc.Process // the current redis-server
}

// Server starts a redis-server on a free 127.0.0.1 port, waits until it
// answers PING, and stops it when the test ends.
func Server(t testing.TB, opts ...Option) *Instance {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	args := []string{}
	if o.password != "" {
		args = append(args, "--requirepass", o.password)
	}
	i := newInstance(t, args, o)
	if err := i.startFree(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return i
}

// EnvServer names the server binary to run instead of redis-server.
const EnvServer = "REDISTEST_SERVER"

// EnvRecord names the file that lists the tests that start a server.
const EnvRecord = "REDISTEST_RECORD"

// OtherServer reports whether the servers started here are REDISTEST_SERVER
// (the second, Valkey, pass of make test) rather than redis-server. A test
// that runs the same checks on a store without Redis as well as with it can
// leave the former to the first pass: they do not depend on the server.
func OtherServer() bool { return os.Getenv(EnvServer) != "" }

// binary finds the server (REDISTEST_SERVER, else name in PATH), or skips
// (fails under CI=true) the test.
func binary(t testing.TB, name string) string {
	t.Helper()
	if p := os.Getenv(EnvServer); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("redistest: %s=%s: %v", EnvServer, p, err)
		}
		return p
	}
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found in PATH (%v); install Debian's redis-server (scripts/ensure-redis.sh) to run this test", name, err)
	if os.Getenv("CI") == "true" {
		t.Fatal("redistest: " + msg + " [CI=true: failing instead of skipping]")
	}
	t.Skip("redistest: " + msg)
	return ""
}

func newInstance(t testing.TB, extra []string, o options) *Instance {
	t.Helper()
	bin := binary(t, "redis-server")
	record(t)
	dir := t.TempDir()
	args := []string{
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
		"--loglevel", "notice",
	}
	args = append(args, extra...)
	i := &Instance{t: t, bin: bin, Dir: dir}
	if o.password != "" {
		i.Password = o.password
	}
	if o.user != "" {
		// redis-server joins the words after --user into one config
		// line; one argument with spaces would be quoted as one word.
		args = append(args,
			"--user", "default", "off",
			"--user", o.user, "on", ">"+o.userPass, "~*", "&*", "+@all")
		i.User, i.Password = o.user, o.userPass
	}
	if o.maxmemory != "" {
		args = append(args, "--maxmemory", o.maxmemory)
	}
	if o.policy != "" {
		args = append(args, "--maxmemory-policy", o.policy)
	}
	args = append(args, o.args...)
	i.args = args
	t.Cleanup(i.stop)
	return i
}

// record appends the running test to the file REDISTEST_RECORD names.
func record(t testing.TB) {
	t.Helper()
	path := os.Getenv(EnvRecord)
	if path == "" {
		return
	}
	dir, err := os.Getwd() // go test runs a package's tests in its directory
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	top, _, _ := strings.Cut(t.Name(), "/")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatalf("redistest: %s: %v", EnvRecord, err)
	}
	defer f.Close()
	// One short write with O_APPEND: lines of parallel tests and
	// packages do not interleave.
	if _, err := f.WriteString(dir + "\t" + top + "\n"); err != nil {
		t.Fatalf("redistest: %s: %v", EnvRecord, err)
	}
}

// Version is the server's name and version as its INFO reports them, for
// example "redis 7.0.15" or "valkey 8.0.1".
func (i *Instance) Version() string { return i.version }

// serverVersion reads the server's name and version from INFO server.
func serverVersion(info string) string {
	if name := infoField(info, "server_name"); name != "" {
		if v := infoField(info, name+"_version"); v != "" {
			return name + " " + v
		}
	}
	return "redis " + infoField(info, "redis_version")
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

// startFree starts the server on a fresh free port, retrying when another
// process takes the port between the probe and the bind.
func (i *Instance) startFree() error {
	return i.startFreeWith(nil)
}

// startFreeWith is startFree with extra arguments computed per attempt
// (cluster nodes need a free bus port too).
func (i *Instance) startFreeWith(perAttempt func() ([]string, error)) error {
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		var extra []string
		if perAttempt != nil {
			if extra, err = perAttempt(); err != nil {
				return err
			}
		}
		i.Port = port
		i.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		err = i.start(extra)
		if err == nil {
			if extra != nil {
				i.args = append(i.args, extra...)
			}
			return nil
		}
		last = err
		if !errors.Is(err, errExited) {
			return err
		}
	}
	return fmt.Errorf("start redis-server: 5 attempts on free ports failed, last: %w", last)
}

var errExited = errors.New("redis-server exited")

// start runs the server on i.Port and waits until it answers.
func (i *Instance) start(extra []string) error {
	var args []string
	if i.conf != "" {
		args = append(args, i.conf)
	}
	args = append(args, "--port", strconv.Itoa(i.Port))
	args = append(args, i.args...)
	args = append(args, extra...)
	logStart := i.logSize()
	cmd := exec.Command(i.bin, args...)
	cmd.Dir = i.Dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done, err := i.proc.Start(cmd)
	if err != nil {
		return fmt.Errorf("start %s: %w", i.bin, err)
	}
	if err := i.waitReady(cmd, done); err != nil {
		exited := false
		select {
		case <-done:
			exited = true
		default:
			i.proc.Kill()
		}
		// Retry on another port only when someone else won the port.
		if errors.Is(err, errPortRace) || exited && strings.Contains(out.String()+i.logSince(logStart), "already in use") {
			return fmt.Errorf("%w: %s (pid %d): %v: %s%s", errExited, i.Addr, cmd.Process.Pid, err, out.String(), i.logTail())
		}
		return fmt.Errorf("redis-server on %s (pid %d): %v%s", i.Addr, cmd.Process.Pid, err, i.logTail())
	}
	return nil
}

var errPortRace = errors.New("port taken by another process")

// waitReady polls until the server answers PING and reports our pid, so
// that a server of someone else that won the port race is never mistaken
// for ours.
func (i *Instance) waitReady(cmd *exec.Cmd, done <-chan struct{}) error {
	deadline := time.Now().Add(StartTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return errors.New("exited before answering PING")
		default:
		}
		info, err := i.do(time.Second, "INFO", "server")
		if err == nil {
			if pid := infoField(info, "process_id"); pid != strconv.Itoa(cmd.Process.Pid) {
				return fmt.Errorf("%w: port %d answered by pid %s, not ours (%d)", errPortRace, i.Port, pid, cmd.Process.Pid)
			}
			if i.version == "" {
				i.version = serverVersion(info)
				i.t.Logf("redistest: %s (%s) on %s, pid %d", i.version, i.bin, i.Addr, cmd.Process.Pid)
			}
			return nil
		}
		last = err
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("no answer within %v: %v", StartTimeout, last)
}

// infoField returns the value of name in an INFO reply.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

func (i *Instance) logSize() int64 {
	fi, err := os.Stat(filepath.Join(i.Dir, "redis.log"))
	if err != nil {
		return 0
	}
	return fi.Size()
}

func (i *Instance) logSince(off int64) string {
	b, err := os.ReadFile(filepath.Join(i.Dir, "redis.log"))
	if err != nil || int64(len(b)) < off {
		return ""
	}
	return string(b[off:])
}

func (i *Instance) logTail() string {
	b, err := os.ReadFile(filepath.Join(i.Dir, "redis.log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\nredis.log:\n" + string(b)
}

// Pid is the process id of the running (or last) redis-server.
func (i *Instance) Pid() int { return i.proc.Pid() }

// Running reports whether the process has not exited yet (a paused process
// is running).
func (i *Instance) Running() bool { return i.proc.Running() }

// Kill sends SIGKILL and waits until the process is reaped: a crash.
func (i *Instance) Kill() { i.proc.Kill() }

// Pause stops the process with SIGSTOP, and returns once every thread of
// it has stopped (where /proc tells): connections stay open and requests
// hang, like a server stuck in a long command or a GC pause.
func (i *Instance) Pause() {
	i.t.Helper()
	if err := i.proc.Pause(); err != nil {
		i.t.Fatalf("redistest: pause %s: %v", i.Addr, err)
	}
}

// Resume continues a paused process with SIGCONT, and returns once it
// runs again (where /proc tells).
func (i *Instance) Resume() {
	i.t.Helper()
	if err := i.proc.Resume(); err != nil {
		i.t.Fatalf("redistest: resume %s: %v", i.Addr, err)
	}
}

// Restart kills the process if it still runs and starts a new one on the
// same port, with empty data (no persistence), and waits until it answers.
// A cluster node keeps its nodes.conf and so rejoins its cluster.
func (i *Instance) Restart() {
	i.t.Helper()
	i.proc.Kill()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = i.start(nil); err == nil {
			return
		}
		// The old socket may linger for a moment; retry briefly.
		time.Sleep(20 * time.Millisecond)
	}
	i.t.Fatalf("redistest: restart on %s: %v", i.Addr, err)
}

// stop ends the process: SIGTERM (plus SIGCONT, in case it is paused),
// then SIGKILL after stopTimeout, and reaps it.
func (i *Instance) stop() { i.proc.Stop(stopTimeout) }

// URL is a redis:// URL for the server, with credentials when it has any.
func (i *Instance) URL() string {
	switch {
	case i.User != "":
		return fmt.Sprintf("redis://%s:%s@%s", i.User, i.Password, i.Addr)
	case i.Password != "":
		return fmt.Sprintf("redis://:%s@%s", i.Password, i.Addr)
	}
	return "redis://" + i.Addr
}

// Do sends one command on a fresh connection (authenticated when the
// server needs it) and returns the reply as text: a status or bulk string
// as is, an integer in decimal, an array one element per line. A nil
// reply is ErrNil; a Redis error reply is a *ReplyError.
func (i *Instance) Do(args ...string) (string, error) {
	return i.do(5*time.Second, args...)
}

// MustDo is Do that fails the test on an error.
func (i *Instance) MustDo(args ...string) string {
	i.t.Helper()
	s, err := i.Do(args...)
	if err != nil {
		i.t.Fatalf("redistest: %s %q: %v", i.Addr, args, err)
	}
	return s
}

func (i *Instance) do(timeout time.Duration, args ...string) (string, error) {
	c, err := dial(i.Addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.close()
	switch {
	case i.User != "":
		if _, err := c.do("AUTH", i.User, i.Password); err != nil {
			return "", fmt.Errorf("auth as %q: %w", i.User, err)
		}
	case i.Password != "":
		if _, err := c.do("AUTH", i.Password); err != nil {
			return "", fmt.Errorf("auth: %w", err)
		}
	}
	return c.do(args...)
}
