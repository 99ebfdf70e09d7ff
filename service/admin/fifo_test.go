//go:build unix

package admin

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/memstore"
)

// TestTokenFileNamedPipe: a named pipe put at the token file's path (whose
// opening would block until a writer comes) is refused at once: requests
// are answered with the tokens in force, and the next regular file loads.
func TestTokenFileNamedPipe(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, file, "alice:aaaaaaaaaaaaaaaaaaaa\n")
	f := newFixture(t, memstore.New(), Auth{TokenFile: file})
	caller := func(tok string) int {
		code, _, _ := f.do(t, "GET", "/admin/extra", "", "Authorization", "Bearer "+tok, "RemoteAddr", "10.0.0.9:1")
		return code
	}
	if code := caller("aaaaaaaaaaaaaaaaaaaa"); code != http.StatusOK {
		t.Fatalf("alice's token = %d", code)
	}
	pipe := file + ".pipe"
	if err := syscall.Mkfifo(pipe, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(pipe, file); err != nil {
		t.Fatal(err)
	}
	answered := make(chan int, 2)
	for range 2 {
		go func() { answered <- caller("aaaaaaaaaaaaaaaaaaaa") }()
	}
	for range 2 {
		select {
		case code := <-answered:
			if code != http.StatusOK {
				t.Errorf("with a named pipe at the token file, alice's token = %d, want 200 (kept)", code)
			}
		case <-time.After(time.Minute):
			t.Fatal("with a named pipe at the token file, a request still waits after a minute")
		}
	}
	if !strings.Contains(f.log.String(), "not a regular file") {
		t.Errorf("the log does not tell the named pipe: %s", f.log)
	}
	writeFile(t, file, "bob:bbbbbbbbbbbbbbbbbbbb\n")
	if code := caller("bbbbbbbbbbbbbbbbbbbb"); code != http.StatusOK {
		t.Errorf("bob's token once a regular file is back = %d, want 200", code)
	}
}
