// Package reexec runs the test binary again as child processes that start
// their work together and stop when the parent says so, for tests that
// need several OS processes (several clients of one Redis, each with its
// own connections and clock reads).
//
// Nothing here waits on the wall clock: a child reports that it is ready,
// the parent releases every child at once when all are (however long a
// busy machine takes to start them), children send what they observe as
// they go, and the parent decides from those counts when the run has done
// enough and tells them to stop. A slow machine makes a run longer, never
// different.
//
// The parent side:
//
//	g := reexec.Start(t, "TestHelper", []any{cfg0, cfg1})
//	g.Go() // after every child is ready
//	for m := range g.Messages() {
//		... // decode m.Data; g.Stop() once enough was seen
//	}
//	g.Wait()
//
// The child side, in the helper test named above:
//
//	var cfg config
//	c := reexec.Helper(t, &cfg) // skips t in the parent's own run
//	c.Ready() // returns when the parent says go
//	for !c.Stopped() { ... c.Send(observations) }
//
// or, with the work in goroutines, c.SendUntil(&wg, every, take) sends
// what take returns at that pace until they have all returned.
//
// EnvInt and EnvDuration read the knobs of a longer run (more children,
// more goroutines, more time) from the environment.
//
// The package is a normal package so that tests of any package in the
// module can import it; nothing outside tests should.
package reexec

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The environment of a child.
const (
	envHelper = "REEXEC_HELPER" // the helper test's name
	envIndex  = "REEXEC_INDEX"  // the child's index
	envConfig = "REEXEC_CONFIG" // its configuration, JSON
)

// Message is one value a child sent (Send), as JSON.
type Message struct {
	Child int
	Data  json.RawMessage
}

// line is what travels on the report pipe.
type line struct {
	Ready bool            `json:",omitempty"`
	Data  json.RawMessage `json:",omitempty"`
}

// Group is the children of one Start.
type Group struct {
	t        testing.TB
	cmds     []*exec.Cmd
	logs     []string
	ctrl     []*os.File // the parent's ends of the children's control pipes
	events   chan event // readiness and the end of each child's reports
	exited   []chan struct{}
	messages chan Message
	stopOnce sync.Once

	mu     sync.Mutex
	killed map[int]bool // by Kill
}

// event: child i is ready, or its report pipe has closed.
type event struct {
	child  int
	closed bool
}

// Start runs the test binary once per configuration, each child running
// only the test named helper, with its configuration (marshalled to JSON)
// for Child.Config. Each child's output goes to a log file that Wait shows
// when the child fails. Children still running when the test ends are
// killed.
func Start(t testing.TB, helper string, configs []any) *Group {
	t.Helper()
	g := &Group{t: t, events: make(chan event, 2*len(configs)), messages: make(chan Message, 64)}
	dir := t.TempDir()
	var readers sync.WaitGroup
	for i, cfg := range configs {
		raw, err := json.Marshal(cfg)
		if err != nil {
			t.Fatalf("reexec: child %d's configuration: %v", i, err)
		}
		ctrlR, ctrlW, err := os.Pipe()
		if err != nil {
			t.Fatalf("reexec: %v", err)
		}
		repR, repW, err := os.Pipe()
		if err != nil {
			t.Fatalf("reexec: %v", err)
		}
		logPath := filepath.Join(dir, fmt.Sprintf("child%d.log", i))
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatalf("reexec: %v", err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^"+helper+"$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), envHelper+"="+helper, envIndex+"="+strconv.Itoa(i), envConfig+"="+string(raw))
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.ExtraFiles = []*os.File{ctrlR, repW} // fds 3 and 4 in the child
		if err := cmd.Start(); err != nil {
			t.Fatalf("reexec: start child %d: %v", i, err)
		}
		ctrlR.Close()
		repW.Close()
		logf.Close()
		done := make(chan struct{})
		g.cmds = append(g.cmds, cmd)
		g.logs = append(g.logs, logPath)
		g.ctrl = append(g.ctrl, ctrlW)
		g.exited = append(g.exited, done)
		go func() {
			cmd.Wait()
			close(done)
		}()
		readers.Go(func() { g.read(i, repR) })
	}
	go func() {
		readers.Wait()
		close(g.messages)
	}()
	t.Cleanup(func() {
		g.Stop()
		for i, cmd := range g.cmds {
			select {
			case <-g.exited[i]:
			default:
				cmd.Process.Kill()
				<-g.exited[i]
			}
		}
	})
	return g
}

// read forwards child i's report lines until its pipe closes.
func (g *Group) read(i int, r *os.File) {
	defer r.Close()
	defer func() { g.events <- event{child: i, closed: true} }()
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 256<<20)
	ready := false
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			g.t.Errorf("reexec: child %d sent %q: %v", i, sc.Bytes(), err)
			continue
		}
		if l.Ready {
			if !ready {
				ready = true
				g.events <- event{child: i}
			}
			continue
		}
		g.messages <- Message{Child: i, Data: l.Data}
	}
	if err := sc.Err(); err != nil {
		g.t.Errorf("reexec: reading child %d: %v", i, err)
	}
}

// Go waits until every child is ready, however long that takes, and then
// lets them all begin. A child that ends before it is ready fails the
// test with its log.
func (g *Group) Go() {
	g.t.Helper()
	ready := make([]bool, len(g.cmds))
	for n := 0; n < len(g.cmds); {
		e := <-g.events
		if e.closed {
			if !ready[e.child] {
				<-g.exited[e.child]
				g.t.Fatalf("reexec: child %d ended before it was ready: %v\n%s", e.child, g.cmds[e.child].ProcessState, g.log(e.child))
			}
			continue
		}
		ready[e.child] = true
		n++
	}
	for i, w := range g.ctrl {
		if _, err := w.Write([]byte{'g'}); err != nil {
			g.t.Fatalf("reexec: telling child %d to begin: %v\n%s", i, err, g.log(i))
		}
	}
}

// Messages delivers what the children send, in the order each sent it;
// it is closed when every child has exited (or closed its end). Read it
// until it closes: a child blocks when the parent does not read.
func (g *Group) Messages() <-chan Message { return g.messages }

// Stop tells every child to stop (Child.Stopped becomes true, Child.Done
// is closed). It may be called more than once.
func (g *Group) Stop() {
	g.stopOnce.Do(func() {
		for _, w := range g.ctrl {
			w.Close()
		}
	})
}

// Wait stops the children, waits until each has exited, and fails the
// test, with the child's log, when one did not exit with status 0.
func (g *Group) Wait() {
	g.t.Helper()
	g.Stop()
	for range g.messages { // unblock the readers
	}
	for i, cmd := range g.cmds {
		<-g.exited[i]
		g.mu.Lock()
		killed := g.killed[i]
		g.mu.Unlock()
		if !cmd.ProcessState.Success() && !killed {
			g.t.Fatalf("reexec: child %d: %v\n%s", i, cmd.ProcessState, g.log(i))
		}
	}
}

// Kill kills child i (SIGKILL, a crash) and waits until it has exited.
func (g *Group) Kill(i int) {
	g.mu.Lock()
	if g.killed == nil {
		g.killed = map[int]bool{}
	}
	g.killed[i] = true
	g.mu.Unlock()
	g.cmds[i].Process.Kill()
	<-g.exited[i]
}

// Log returns child i's output so far.
func (g *Group) Log(i int) string { return g.log(i) }

func (g *Group) log(i int) string {
	b, err := os.ReadFile(g.logs[i])
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(b) > 8000 {
		b = append([]byte("…"), b[len(b)-8000:]...)
	}
	return string(b)
}

// C is the child's side of a Group.
type C struct {
	t     testing.TB
	Index int // the child's index in the Group
	raw   string
	ctrl  *os.File
	rep   *os.File

	mu   sync.Mutex
	enc  *json.Encoder
	done chan struct{}
}

// Child returns the child's side when this process is a child started by
// Start for the running test, else nil (the caller skips: in the parent's
// run a helper test has nothing to do).
func Child(t testing.TB) *C {
	t.Helper()
	if os.Getenv(envHelper) != t.Name() {
		return nil
	}
	i, err := strconv.Atoi(os.Getenv(envIndex))
	if err != nil {
		t.Fatalf("reexec: %s=%q: %v", envIndex, os.Getenv(envIndex), err)
	}
	c := &C{t: t, Index: i, raw: os.Getenv(envConfig), ctrl: os.NewFile(3, "reexec-control"), rep: os.NewFile(4, "reexec-report"), done: make(chan struct{})}
	c.enc = json.NewEncoder(c.rep)
	t.Cleanup(func() { c.rep.Close() })
	return c
}

// Helper is Child for the body of a helper test: it skips t when this
// process is not its child (in the parent's run a helper test has nothing
// to do), and decodes the child's configuration into cfg.
func Helper(t testing.TB, cfg any) *C {
	t.Helper()
	c := Child(t)
	if c == nil {
		t.Skip("reexec: a helper test, run only in the children its parent test starts")
	}
	c.Config(cfg)
	return c
}

// Config decodes the child's configuration into v.
func (c *C) Config(v any) {
	c.t.Helper()
	if err := json.Unmarshal([]byte(c.raw), v); err != nil {
		c.t.Fatalf("reexec: configuration %s: %v", c.raw, err)
	}
}

// Ready tells the parent that the child is ready and returns when the
// parent lets every child begin; from then on Done is closed when the
// parent says stop. It returns false when the parent stopped the group
// before it began.
func (c *C) Ready() bool {
	c.t.Helper()
	c.write(line{Ready: true})
	var b [1]byte
	_, err := io.ReadFull(c.ctrl, b[:])
	go func() {
		// The parent writes nothing more: the read ends at Stop (EOF)
		// or when the parent dies.
		io.Copy(io.Discard, c.ctrl)
		close(c.done)
	}()
	return err == nil
}

// Done is closed when the parent has said stop.
func (c *C) Done() <-chan struct{} { return c.done }

// Stopped reports whether the parent has said stop.
func (c *C) Stopped() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Send sends v (as JSON) to the parent's Messages. It is safe for
// concurrent use.
func (c *C) Send(v any) {
	c.t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		c.t.Fatalf("reexec: send: %v", err)
	}
	c.write(line{Data: raw})
}

func (c *C) write(l line) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enc.Encode(l); err != nil {
		c.t.Fatalf("reexec: report to the parent: %v", err)
	}
}

// SendUntil sends report() every interval (its observations since the
// last) until every goroutine of wg has returned, and then returns: the
// caller sends what is left, its last report. The interval only paces
// the reports; nothing waits on it.
func (c *C) SendUntil(wg *sync.WaitGroup, every time.Duration, report func() any) {
	c.t.Helper()
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			c.Send(report())
		case <-stopped:
			return
		}
	}
}

// EnvInt is the positive integer in the environment variable name, or
// def when it is unset; anything else fails the test.
func EnvInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// EnvDuration is the duration (0 or more) in the environment variable
// name, or def when it is unset; anything else fails the test.
func EnvDuration(t testing.TB, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		t.Fatalf("%s=%q: want a duration", name, v)
	}
	return d
}
