//go:build unix

package remotestore_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/remotestore"
)

// TestTokenFileNotRegular: a token file that is a named pipe (whose
// opening waits for a writer) or a device (which never ends) is refused
// at once, never opened or read; so is one beyond 64 KiB.
func TestTokenFileNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", dev); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("#", 64<<10)+"\n0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, dev, big} {
		if _, err := remotestore.Dial("127.0.0.1:1", remotestore.WithInsecure(), remotestore.WithTokenFile(path)); err == nil {
			t.Errorf("WithTokenFile(%s): no error", filepath.Base(path))
		}
	}
}
