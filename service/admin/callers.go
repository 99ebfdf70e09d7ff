package admin

import (
	"crypto/x509"
	"log/slog"
	"net/http"
)

// Credentials are what a caller presents, whatever its protocol: the
// admin handler reads them from an HTTP request, the store API from a
// gRPC call's metadata and TLS state.
type Credentials struct {
	// Authorization is the Authorization header's value (gRPC metadata
	// "authorization"): "Bearer <token>".
	Authorization string
	// PeerCertificates is the client's TLS certificate chain, leaf first;
	// empty without TLS or without a client certificate.
	PeerCertificates []*x509.Certificate
	// RemoteAddr is the caller's address, host:port.
	RemoteAddr string
}

// AuthError is a refused caller: Forbidden for a caller that may not call
// at all (not loopback, and no credential is configured), otherwise one
// without a valid credential (HTTP 401, gRPC Unauthenticated).
type AuthError struct {
	Forbidden bool
	Msg       string
}

func (e *AuthError) Error() string { return e.Msg }

// Authenticator authenticates the callers of another API than the admin
// handler's (the store API) by the same rules and files: a bearer token of
// Auth.TokenFile or a client certificate of Auth.ClientCAFile, either one;
// with neither configured, loopback callers only. Both files are re-read
// when they change. It is safe for concurrent use.
type Authenticator struct{ a *authenticator }

// NewAuthenticator loads the files of o (its Metrics is not used). what
// names the API in refusals, as the subject of "answer": "the store API's methods".
func NewAuthenticator(o Auth, what string, log *slog.Logger) (*Authenticator, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a, err := newAuthenticator(o, what, log)
	if err != nil {
		return nil, err
	}
	return &Authenticator{a: a}, nil
}

// Authenticate returns the name of the caller of c (a certificate's
// subject, a token's name, or "loopback"), or an *AuthError.
func (a *Authenticator) Authenticate(c Credentials) (string, error) {
	who, code, msg := a.a.authenticate(c)
	if code != 0 {
		return "", &AuthError{Forbidden: code == http.StatusForbidden, Msg: msg}
	}
	return who, nil
}
