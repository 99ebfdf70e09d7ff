package remotestore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Option configures Dial or New. An invalid value is an error of Dial or
// New.
type Option func(*config) error

type config struct {
	tls      *tls.Config // nil: the system's CAs
	insecure bool
	token    tokenSource // nil: no token
	timeout  time.Duration
	dialOpts []grpc.DialOption
}

// WithTLSConfig sets the TLS configuration of Dial's connection: its
// RootCAs verify the server (the system's when nil), and its Certificates
// or GetClientCertificate present a client certificate (mTLS). Without
// it, and without WithInsecure, Dial uses TLS with the system's CAs.
func WithTLSConfig(c *tls.Config) Option {
	return func(cfg *config) error {
		if c == nil {
			return errors.New("remotestore: WithTLSConfig(nil)")
		}
		cfg.tls = c.Clone()
		return nil
	}
}

// WithInsecure makes Dial's connection plaintext: for a server on
// loopback, or one reached through a proxy or mesh that encrypts. A token
// (WithToken) is then sent in the clear.
func WithInsecure() Option {
	return func(cfg *config) error { cfg.insecure = true; return nil }
}

// WithToken sends token as "authorization: Bearer <token>" with every
// call, for a server that authenticates by a token file. Over a
// connection that is not TLS, calls fail unless WithInsecure was chosen.
func WithToken(token string) Option {
	return func(cfg *config) error {
		if err := checkToken(token); err != nil {
			return err
		}
		cfg.token = staticToken(token)
		return nil
	}
}

// WithTokenFile is WithToken with the token read from a file (its first
// line that is neither blank nor a # comment), and read again when the
// file changes (checked at most once a second), so that a rotated token
// is sent from the next call on.
func WithTokenFile(path string) Option {
	return func(cfg *config) error {
		t := &fileToken{path: path}
		if err := t.load(); err != nil {
			return err
		}
		cfg.token = t
		return nil
	}
}

// WithTimeout gives every call a deadline of d (when the caller's context
// has none sooner). By default a call waits as long as its context
// allows; in front of a failover store, failover's own timeout applies.
func WithTimeout(d time.Duration) Option {
	return func(cfg *config) error {
		if d <= 0 {
			return fmt.Errorf("remotestore: WithTimeout(%v): want > 0", d)
		}
		cfg.timeout = d
		return nil
	}
}

// WithDialOptions adds gRPC dial options to Dial's (keepalive, a
// resolver, interceptors); they come after the ones this package sets.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(cfg *config) error { cfg.dialOpts = append(cfg.dialOpts, opts...); return nil }
}

// dialOptions are the gRPC options of cfg.
func (cfg *config) dialOptions() []grpc.DialOption {
	var opts []grpc.DialOption
	switch {
	case cfg.insecure:
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	case cfg.tls != nil:
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg.tls)))
	default:
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})))
	}
	if cfg.token != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{src: cfg.token, secure: !cfg.insecure}))
	}
	opts = append(opts, grpc.WithConnectParams(reconnect))
	return append(opts, cfg.dialOpts...)
}

// reconnect is how Dial's connection reconnects to a server that went
// away: an attempt at least once a second (gRPC's default waits up to two
// minutes between attempts), so that a store back after an outage of any
// length is used again within about a second, and the breaker of a
// failover store in front closes then. A connection attempt may take 5 s,
// a TLS handshake across any WAN included.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 5 * time.Second,
}

// maxTokenLen is the longest token sent: the server's bound
// (admin.MaxTokenLen).
const maxTokenLen = 1024

func checkToken(t string) error {
	switch {
	case t == "":
		return errors.New("remotestore: empty token")
	case len(t) > maxTokenLen:
		return fmt.Errorf("remotestore: token of %d bytes, longer than %d", len(t), maxTokenLen)
	case strings.ContainsAny(t, " \t\r\n"):
		return errors.New("remotestore: a token holds no blank")
	}
	return nil
}

// tokenSource gives the token of each call.
type tokenSource interface{ token() string }

type staticToken string

func (t staticToken) token() string { return string(t) }

// fileToken is a token file, read again when it changes.
type fileToken struct {
	path string

	mu      sync.Mutex
	tok     string
	checked time.Time
	size    int64
	mtime   time.Time
}

// maxTokenFileSize bounds the token file read.
const maxTokenFileSize = 64 << 10

// load reads the token file: a regular file of at most maxTokenFileSize
// bytes. Anything else at the path (a named pipe, whose opening would
// wait for a writer; a device, which never ends) is refused without
// being opened or read.
func (t *fileToken) load() error {
	fi, err := os.Stat(t.path)
	if err != nil {
		return fmt.Errorf("remotestore: token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("remotestore: token file %s is not a regular file (%v)", t.path, fi.Mode().Type())
	}
	if fi.Size() > maxTokenFileSize {
		return fmt.Errorf("remotestore: token file %s is larger than %d bytes", t.path, maxTokenFileSize)
	}
	f, err := os.Open(t.path)
	if err != nil {
		return fmt.Errorf("remotestore: token file: %w", err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("remotestore: token file %s is not a regular file", t.path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFileSize+1))
	if err != nil {
		return fmt.Errorf("remotestore: token file: %w", err)
	}
	if len(b) > maxTokenFileSize {
		return fmt.Errorf("remotestore: token file %s is larger than %d bytes", t.path, maxTokenFileSize)
	}
	tok := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && line[0] != '#' {
			tok = line
			break
		}
	}
	if err := checkToken(tok); err != nil {
		return fmt.Errorf("token file %s: %w", t.path, err)
	}
	t.tok, t.size, t.mtime = tok, fi.Size(), fi.ModTime()
	return nil
}

func (t *fileToken) token() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now := time.Now(); now.Sub(t.checked) >= time.Second {
		t.checked = now
		if fi, err := os.Stat(t.path); err == nil && (fi.Size() != t.size || !fi.ModTime().Equal(t.mtime)) {
			_ = t.load() // a file that does not load (being rewritten) keeps the token in force
		}
	}
	return t.tok
}

// bearer is the per-call credential of a token.
type bearer struct {
	src    tokenSource
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.src.token()}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }
