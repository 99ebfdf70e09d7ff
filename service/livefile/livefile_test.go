//go:build unix

package livefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func write(t *testing.T, path, s string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// fifo puts a named pipe at path, in place of what was there.
func fifo(t *testing.T, path string) {
	t.Helper()
	tmp := path + ".fifo"
	if err := syscall.Mkfifo(tmp, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// within runs f and fails the test when it has not returned after a
// minute: what must not block.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s: still blocked after a minute", what)
	}
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "tokens")
	write(t, reg, "abc")
	if b, err := Read(reg, 3); err != nil || string(b) != "abc" {
		t.Fatalf("Read(%s, 3) = %q, %v; want abc", reg, b, err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(link, 3); err != nil || string(b) != "abc" {
		t.Fatalf("Read of a symbolic link = %q, %v; want abc", b, err)
	}
	if _, err := Read(reg, 2); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), reg) {
		t.Fatalf("Read(%s, 2) of 3 bytes: %v, want ErrTooLarge naming the file", reg, err)
	}
	pipe := filepath.Join(dir, "pipe")
	fifo(t, pipe)
	for _, p := range []string{pipe, dir, "/dev/zero"} {
		within(t, "Read("+p+")", func() {
			if _, err := Read(p, 1<<20); !errors.Is(err, ErrNotRegular) {
				t.Errorf("Read(%s): %v, want ErrNotRegular", p, err)
			}
		})
	}
	if _, err := Read(filepath.Join(dir, "missing"), 10); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Read of a missing file: %v", err)
	}
}

func TestValueReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	write(t, path, "one")
	var mu sync.Mutex
	var loaded []string
	var failed []error
	v, err := New([]string{path}, func() (string, error) {
		b, err := Read(path, 16)
		return string(b), err
	}, Hooks[string]{
		Loaded: func(s string) { mu.Lock(); loaded = append(loaded, s); mu.Unlock() },
		Failed: func(err error) { mu.Lock(); failed = append(failed, err); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Current(); got != "one" {
		t.Fatalf("Current() = %q, want one", got)
	}
	write(t, path, "two")
	if got := v.Current(); got != "two" {
		t.Fatalf("Current() after a rewrite = %q, want two", got)
	}
	fifo(t, path)
	within(t, "Current() with a named pipe at the path", func() {
		for range 3 {
			if got := v.Current(); got != "two" {
				t.Errorf("Current() with a named pipe = %q, want two (the value in force)", got)
			}
		}
	})
	write(t, path, "three")
	if got := v.Current(); got != "three" {
		t.Fatalf("Current() after the pipe was replaced = %q, want three", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(loaded, ",") != "two,three" || len(failed) != 1 || !errors.Is(failed[0], ErrNotRegular) {
		t.Fatalf("loaded %v, failed %v; want two and three loaded, the pipe failed once", loaded, failed)
	}
}

// TestValueNeverWaits: while one caller loads (however long its read
// takes), the others get the value in force at once.
func TestValueNeverWaits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	write(t, path, "one")
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	first := true
	v, err := New([]string{path}, func() (string, error) {
		if first {
			first = false
			return "one", nil
		}
		entered <- struct{}{}
		<-release
		return "two", nil
	}, Hooks[string]{})
	if err != nil {
		t.Fatal(err)
	}
	write(t, path, "two")
	got := make(chan string, 1)
	go func() { got <- v.Current() }()
	<-entered
	within(t, "Current() while another loads", func() {
		if s := v.Current(); s != "one" {
			t.Errorf("Current() while another loads = %q, want one", s)
		}
	})
	close(release)
	if s := <-got; s != "two" {
		t.Fatalf("the loader's Current() = %q, want two", s)
	}
	if s := v.Current(); s != "two" {
		t.Fatalf("Current() after the load = %q, want two", s)
	}
}
