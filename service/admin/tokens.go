package admin

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/service/livefile"
)

// Bounds of a token file.
const (
	// MaxTokenFileSize is the largest token file read, in bytes.
	MaxTokenFileSize = 64 << 10
	// MaxTokens is the most tokens a token file may hold.
	MaxTokens = 1000
	// MinTokenLen is the shortest token accepted, in bytes: a token is a
	// secret, not a password to remember (openssl rand -hex 32).
	MinTokenLen = 16
	// MaxTokenLen is the longest token, and MaxTokenNameLen the longest
	// name, in bytes.
	MaxTokenLen     = 1024
	MaxTokenNameLen = 128
)

// token is one token of a token file: its name and the SHA-256 of its
// secret (compared in constant time).
type token struct {
	name string
	sum  [sha256.Size]byte
}

// tokenFile is a token file, re-read when it changes.
type tokenFile struct{ v *livefile.Value[[]token] }

func openTokenFile(path string, log *slog.Logger) (*tokenFile, error) {
	ts, err := readTokens(path)
	if err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("admin: token file %s holds no token", path)
	}
	first := true
	v, err := livefile.New([]string{path}, func() ([]token, error) {
		if first { // read above
			first = false
			return ts, nil
		}
		return readTokens(path)
	}, livefile.Hooks[[]token]{
		Loaded: func(ts []token) { log.Info("token file reloaded", "file", path, "tokens", len(ts)) },
		Failed: func(err error) {
			log.Error("token file changed but does not load; keeping the previous tokens", "err", err)
		},
	})
	if err != nil {
		return nil, err
	}
	return &tokenFile{v: v}, nil
}

// current returns the tokens in force, re-reading the file first when it
// changed. A file that changed but does not load keeps the previous
// tokens; a read never blocks (a named pipe at the path is refused), and
// no caller waits for another's read.
func (t *tokenFile) current() []token { return t.v.Current() }

// lookup returns the name of the token tok. Every token is compared, in
// constant time, whether one matched or not.
func (t *tokenFile) lookup(tok string) (string, bool) {
	if tok == "" || len(tok) > MaxTokenLen {
		return "", false
	}
	sum := sha256.Sum256([]byte(tok))
	name, found := "", false
	for _, k := range t.current() {
		if subtle.ConstantTimeCompare(sum[:], k.sum[:]) == 1 && !found {
			name, found = k.name, true
		}
	}
	return name, found
}

// readTokens reads and parses a token file.
func readTokens(path string) ([]token, error) {
	b, err := livefile.Read(path, MaxTokenFileSize)
	if errors.Is(err, livefile.ErrTooLarge) {
		return nil, fmt.Errorf("admin: token file %s is larger than %d bytes", path, MaxTokenFileSize)
	}
	if err != nil {
		return nil, fmt.Errorf("admin: token file: %w", err)
	}
	ts, err := parseTokens(b)
	if err != nil {
		return nil, fmt.Errorf("admin: token file %s: %w", path, err)
	}
	return ts, nil
}

// parseTokens parses a token file's lines: name:token, a bare token, a
// blank line or a # comment.
func parseTokens(b []byte) ([]token, error) {
	var ts []token
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), MaxTokenFileSize)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, secret, named := strings.Cut(line, ":")
		if !named {
			name, secret = "line "+strconv.Itoa(n), line
		}
		name, secret = strings.TrimSpace(name), strings.TrimSpace(secret)
		switch {
		case name == "":
			return nil, fmt.Errorf("line %d: empty token name before ':'", n)
		case len(name) > MaxTokenNameLen:
			return nil, fmt.Errorf("line %d: token name longer than %d bytes", n, MaxTokenNameLen)
		case names[name]:
			return nil, fmt.Errorf("line %d: token name %q given twice", n, name)
		case len(secret) < MinTokenLen:
			return nil, fmt.Errorf("line %d: token shorter than %d bytes", n, MinTokenLen)
		case len(secret) > MaxTokenLen:
			return nil, fmt.Errorf("line %d: token longer than %d bytes", n, MaxTokenLen)
		case strings.ContainsAny(secret, " \t"):
			return nil, fmt.Errorf("line %d: a token holds no blank", n)
		case len(ts) == MaxTokens:
			return nil, fmt.Errorf("more than %d tokens", MaxTokens)
		}
		names[name] = true
		ts = append(ts, token{name: name, sum: sha256.Sum256([]byte(secret))})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return ts, nil
}
