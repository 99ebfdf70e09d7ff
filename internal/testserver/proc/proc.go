// Package proc is the process control that the test servers share
// (memcachedtest, redistest): one server's current process, started so
// that it dies with the test binary, reaped by one goroutine, and
// signalled, paused, resumed, killed and stopped by its pid. A server
// that restarts starts a new process in the same Process; every method
// acts on the one started last.
//
// The package is a normal package so that tests of any package in the
// module can import it; nothing outside tests should.
package proc

import (
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// WaitTimeout bounds how long Pause and Resume wait for the process's
// threads to stop or run again: far beyond what a starved machine takes,
// so that it only turns a process that never gets there into an error.
const WaitTimeout = 10 * time.Second

// Process is a server's current process: the one its last Start started.
// The zero Process has none. It is safe for concurrent use.
type Process struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been reaped
}

// Start starts cmd as the current process, so that the kernel kills it
// when the test binary dies (a panic or a -timeout; on Linux), and reaps
// it when it exits: done is closed then.
func (p *Process) Start(cmd *exec.Cmd) (done <-chan struct{}, err error) {
	cmd.SysProcAttr = sysProcAttr()
	c := make(chan struct{})
	if err := StartHeld(cmd, func(error) { close(c) }); err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.cmd, p.done = cmd, c
	p.mu.Unlock()
	return c, nil
}

// StartHeld starts cmd from a goroutine locked to its OS thread until cmd
// has been reaped, then calls exited with Wait's error. The kernel sends a
// process its Pdeathsig when the thread that started it exits, not the
// test binary, and Go ends a thread whose goroutine exits locked to it: a
// process started on an ordinary thread can be killed in the middle of a
// test. The thread is unlocked, not ended, once cmd is reaped.
func StartHeld(cmd *exec.Cmd, exited func(error)) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err != nil {
			return
		}
		exited(cmd.Wait())
	}()
	return <-started
}

func (p *Process) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// Pid is the process id of the current (or last) process, 0 before the
// first Start.
func (p *Process) Pid() int {
	cmd, _ := p.current()
	if cmd == nil || cmd.Process == nil {
		return 0
	}
	return cmd.Process.Pid
}

// Running reports whether the current process has not exited yet (a
// paused process is running).
func (p *Process) Running() bool {
	_, done := p.current()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL (which ends a paused process too) and waits until
// the process is reaped: a crash. Without a process it does nothing.
func (p *Process) Kill() {
	cmd, done := p.current()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Stop ends the process gracefully: SIGTERM (and SIGCONT, in case it is
// paused), then SIGKILL when it has not exited after grace; it returns
// once the process is reaped.
func (p *Process) Stop(grace time.Duration) {
	cmd, done := p.current()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// Signal sends sig to the running process; it is an error when there is
// none (not started, or exited).
func (p *Process) Signal(sig syscall.Signal) error {
	cmd, done := p.current()
	if cmd == nil {
		return fmt.Errorf("%v: not started", sig)
	}
	select {
	case <-done:
		return fmt.Errorf("%v to pid %d: it has exited", sig, cmd.Process.Pid)
	default:
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%v to pid %d: %w", sig, cmd.Process.Pid, err)
	}
	return nil
}

// Pause stops the process with SIGSTOP, and returns once every thread of
// it has stopped (where /proc tells): connections stay open and requests
// hang, like a server stuck in a long command or a GC pause.
func (p *Process) Pause() error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	return p.waitStopped(true)
}

// Resume continues a paused process with SIGCONT, and returns once it
// runs again (where /proc tells).
func (p *Process) Resume() error {
	if err := p.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	return p.waitStopped(false)
}

// waitStopped waits until every thread of the process is stopped (or,
// with stopped false, until one is not), as /proc/<pid>/task/*/stat says;
// without /proc it returns at once.
func (p *Process) waitStopped(stopped bool) error {
	deadline := time.Now().Add(WaitTimeout)
	for time.Now().Before(deadline) {
		all, ok := ThreadsStopped(p.Pid())
		if !ok || all == stopped {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("pid %d: threads not all %s within %v", p.Pid(), map[bool]string{true: "stopped", false: "running"}[stopped], WaitTimeout)
}

// Alive reports whether pid is a live process that is not a zombie: for
// tests that check that no server outlives them.
func Alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	st, ok := procState(pid)
	return !ok || st != 'Z' // without /proc, kill(0) said it exists
}
