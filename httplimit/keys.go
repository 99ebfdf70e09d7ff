package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// KeyFunc derives the rate-limit key of a request. When no key can be
// derived it returns an error wrapping ErrNoKey (an empty key with a nil
// error counts as no key): the Middleware then answers 400 with a problem
// body, or uses the key set by WithDefaultKey. Keys are never shared by
// accident: there is no implicit empty or global key.
type KeyFunc func(*http.Request) (string, error)

// ErrNoKey reports a request from which a KeyFunc could not derive a key.
var ErrNoKey = errors.New("httplimit: no rate-limit key")

// Header returns a KeyFunc that uses the value of the named request header,
// such as an API key ("X-API-Key") or a tenant ("X-Tenant"). A missing or
// blank header is ErrNoKey. Only the first value is used.
//
// An API key used as a rate-limit key stays in memory and in the store;
// it is never written to a response unless WithPartitionKey says so.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := strings.TrimSpace(r.Header.Get(name))
		if v == "" {
			return "", fmt.Errorf("%w: header %s is missing or empty", ErrNoKey, name)
		}
		return v, nil
	}
}

// FromContext returns a KeyFunc that uses the request context's value for
// ctxKey, typically a tenant set by an authentication middleware that runs
// first. The value must be a non-empty string or a fmt.Stringer.
func FromContext(ctxKey any) KeyFunc {
	return func(r *http.Request) (string, error) {
		var s string
		switch v := r.Context().Value(ctxKey).(type) {
		case string:
			s = v
		case fmt.Stringer:
			s = v.String()
		case nil:
			return "", fmt.Errorf("%w: no context value for %v", ErrNoKey, ctxKey)
		default:
			return "", fmt.Errorf("%w: context value for %v is a %T, not a string or fmt.Stringer", ErrNoKey, ctxKey, v)
		}
		if s == "" {
			return "", fmt.Errorf("%w: context value for %v is empty", ErrNoKey, ctxKey)
		}
		return s, nil
	}
}

// Route returns a KeyFunc that uses the ServeMux pattern that matched the
// request (Request.Pattern, such as "GET /items/{id}"), so that all items
// share one key rather than one per id. Request.Pattern is set by the mux
// before it calls the route's handler: use Route when the Middleware wraps
// a handler registered on the mux, and RouteOf when it wraps the mux.
func Route() KeyFunc {
	return func(r *http.Request) (string, error) {
		if r.Pattern == "" {
			return "", fmt.Errorf("%w: the request has no ServeMux pattern (does the middleware wrap the mux? use RouteOf)", ErrNoKey)
		}
		return r.Pattern, nil
	}
}

// RouteOf returns a KeyFunc that uses the pattern of mux that matches the
// request (found with mux.Handler, whatever Request.Pattern an outer mux
// set), for a Middleware that wraps the whole mux. A request that matches
// no pattern is ErrNoKey.
func RouteOf(mux *http.ServeMux) KeyFunc {
	return func(r *http.Request) (string, error) {
		if _, p := mux.Handler(r); p != "" {
			return p, nil
		}
		return "", fmt.Errorf("%w: %s %s matches no pattern", ErrNoKey, r.Method, r.URL.Path)
	}
}

// Constant returns a KeyFunc that gives every request the same key: a
// global policy shared by all callers.
func Constant(key string) KeyFunc {
	return func(*http.Request) (string, error) {
		if key == "" {
			return "", fmt.Errorf("%w: Constant key is empty", ErrNoKey)
		}
		return key, nil
	}
}

// Join returns a KeyFunc that composes the keys of fns, as in tenant and
// route: Join(Header("X-Tenant"), Route()). Parts are separated by '|', with
// '|' and '\' inside a part escaped by '\', so that different parts never
// join to the same key. Any part's error is the error.
func Join(fns ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		for i, fn := range fns {
			k, err := fn(r)
			if err == nil && k == "" {
				err = fmt.Errorf("%w: part %d of Join is empty", ErrNoKey, i)
			}
			if err != nil {
				return "", err
			}
			if i > 0 {
				b.WriteByte('|')
			}
			for j := 0; j < len(k); j++ {
				if k[j] == '|' || k[j] == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(k[j])
			}
		}
		if b.Len() == 0 {
			return "", fmt.Errorf("%w: Join of no KeyFunc", ErrNoKey)
		}
		return b.String(), nil
	}
}
