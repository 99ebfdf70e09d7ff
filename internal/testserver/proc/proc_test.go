package proc

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// sleeper starts a process that runs until it is signalled.
func sleeper(t *testing.T, p *Process) <-chan struct{} {
	t.Helper()
	bin, err := exec.LookPath("sleep")
	if err != nil {
		t.Skipf("no sleep binary: %v", err)
	}
	done, err := p.Start(exec.Command(bin, "3600"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return done
}

func TestZero(t *testing.T) {
	var p Process
	if p.Pid() != 0 || p.Running() {
		t.Fatalf("zero Process: pid %d, running %v", p.Pid(), p.Running())
	}
	p.Kill()
	p.Stop(time.Second)
	if err := p.Pause(); err == nil {
		t.Fatal("Pause without a process: no error")
	}
}

func TestPauseResumeKill(t *testing.T) {
	var p Process
	done := sleeper(t, &p)
	if p.Pid() == 0 || !p.Running() {
		t.Fatalf("after Start: pid %d, running %v", p.Pid(), p.Running())
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if all, ok := ThreadsStopped(p.Pid()); ok && !all {
		t.Fatal("Pause returned with a thread still running")
	}
	if !p.Running() {
		t.Fatal("a paused process is not Running")
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if all, ok := ThreadsStopped(p.Pid()); ok && all {
		t.Fatal("Resume returned with every thread stopped")
	}
	p.Kill()
	select {
	case <-done:
	default:
		t.Fatal("Kill returned before the process was reaped")
	}
	if p.Running() {
		t.Fatal("Running after Kill")
	}
	if err := p.Signal(syscall.SIGCONT); err == nil {
		t.Fatal("Signal to an exited process: no error")
	}
}

func TestStopEndsAPausedProcess(t *testing.T) {
	var p Process
	sleeper(t, &p)
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	p.Stop(time.Minute) // SIGTERM ends sleep once SIGCONT lets it run
	if p.Running() {
		t.Fatal("Running after Stop")
	}
}

func TestAlive(t *testing.T) {
	var p Process
	sleeper(t, &p)
	pid := p.Pid()
	if !Alive(pid) {
		t.Fatalf("Alive(%d) = false for a running process", pid)
	}
	p.Kill()
	if Alive(pid) {
		t.Fatalf("Alive(%d) = true after Kill", pid)
	}
	if Alive(0) || Alive(-1) {
		t.Fatal("Alive of pid 0 or -1")
	}
}
