package admin

import (
	"context"
	"crypto/x509"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice/service/certs"
	"github.com/sluicehq/sluice/service/livefile"
)

// Auth is how the admin endpoints authenticate their callers. With a
// TokenFile, a ClientCAFile or both, a caller presents either credential;
// with neither, only loopback callers are answered.
type Auth struct {
	// TokenFile holds the bearer tokens, one a line, as name:token or a
	// bare token (named by its line, "line N"); # starts a comment line. It
	// is re-read when it changes (checked on each request), so a token is
	// rotated by rewriting the file. At most MaxTokenFileSize bytes and
	// MaxTokens tokens, each at least MinTokenLen bytes.
	TokenFile string
	// ClientCAFile holds the PEM CAs that a client certificate must chain
	// to (with client-auth usage); the caller is the certificate's subject.
	// The listener must be TLS and ask for client certificates. Re-read
	// when it changes.
	ClientCAFile string
	// Metrics puts GET /metrics behind the authentication too (a Prometheus
	// scrape_config with authorization or tls_config); otherwise /metrics
	// answers anyone who reaches the listener.
	Metrics bool
}

// callerKey is the context key of the authenticated caller's name.
type callerKey struct{}

// Caller returns the name of the caller that a request under the admin
// handler authenticated as: a certificate's subject, a token's name, or
// "loopback". "" outside the admin handler.
func Caller(ctx context.Context) string {
	s, _ := ctx.Value(callerKey{}).(string)
	return s
}

type authenticator struct {
	tokens *tokenFile // nil without a token file
	ca     *caFile    // nil without a client CA
	what   string     // what it guards, in messages: "the admin endpoints"
}

func newAuthenticator(o Auth, what string, log *slog.Logger) (*authenticator, error) {
	a := &authenticator{what: what}
	if o.TokenFile != "" {
		t, err := openTokenFile(o.TokenFile, log)
		if err != nil {
			return nil, err
		}
		a.tokens = t
	}
	if o.ClientCAFile != "" {
		c, err := openCAFile(o.ClientCAFile, log)
		if err != nil {
			return nil, err
		}
		a.ca = c
	}
	return a, nil
}

// wrap answers h's requests from authenticated callers only.
func (a *authenticator) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := Credentials{Authorization: r.Header.Get("Authorization"), RemoteAddr: r.RemoteAddr}
		if r.TLS != nil {
			c.PeerCertificates = r.TLS.PeerCertificates
		}
		who, code, msg := a.authenticate(c)
		if code != 0 {
			if code == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="sluice admin"`)
			}
			writeProblem(w, code, "", msg)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, who)))
	})
}

// authenticate returns the caller's name, or the status and message of a
// refusal.
func (a *authenticator) authenticate(c Credentials) (who string, code int, msg string) {
	if a.tokens == nil && a.ca == nil {
		if loopback(c.RemoteAddr) {
			return "loopback", 0, ""
		}
		return "", http.StatusForbidden, a.what + " answer only loopback callers when neither a token file nor a client CA is configured"
	}
	if a.ca != nil && len(c.PeerCertificates) > 0 {
		if subject, err := a.ca.verify(c.PeerCertificates); err == nil {
			return subject, 0, ""
		} else if a.tokens == nil {
			return "", http.StatusUnauthorized, "client certificate: " + err.Error()
		}
	}
	if a.tokens != nil {
		h := c.Authorization
		scheme, tok, ok := strings.Cut(h, " ")
		if h == "" {
			return "", http.StatusUnauthorized, a.want()
		}
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "", http.StatusUnauthorized, "Authorization: want Bearer <token>"
		}
		if name, ok := a.tokens.lookup(strings.TrimSpace(tok)); ok {
			return name, 0, ""
		}
		return "", http.StatusUnauthorized, "unknown bearer token"
	}
	return "", http.StatusUnauthorized, a.want()
}

func (a *authenticator) want() string {
	switch {
	case a.tokens != nil && a.ca != nil:
		return "authentication required: a client certificate or Authorization: Bearer <token>"
	case a.tokens != nil:
		return "authentication required: Authorization: Bearer <token>"
	default:
		return "authentication required: a client certificate"
	}
}

// loopback reports whether a request's remote address is a loopback
// address (127.0.0.0/8, ::1).
func loopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// caFile is a client CA file, re-read when it changes (as the token
// file: a read never blocks, no caller waits for another's).
type caFile struct {
	v *livefile.Value[*x509.CertPool]
}

func openCAFile(path string, log *slog.Logger) (*caFile, error) {
	v, err := livefile.New([]string{path}, func() (*x509.CertPool, error) { return certs.LoadPool(path) }, livefile.Hooks[*x509.CertPool]{
		Loaded: func(*x509.CertPool) { log.Info("client CA file reloaded", "file", path) },
		Failed: func(err error) {
			log.Error("client CA file changed but does not load; keeping the previous CAs", "err", err)
		},
	})
	if err != nil {
		return nil, err
	}
	return &caFile{v: v}, nil
}

func (c *caFile) current() *x509.CertPool { return c.v.Current() }

// verify checks a client's chain against the CAs and returns the leaf's
// subject.
func (c *caFile) verify(chain []*x509.Certificate) (string, error) {
	inter := x509.NewCertPool()
	for _, ic := range chain[1:] {
		inter.AddCert(ic)
	}
	leaf := chain[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.current(), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return "", err
	}
	return leaf.Subject.String(), nil
}
