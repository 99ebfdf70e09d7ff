package server

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"

	"github.com/sluicehq/sluice/service/metrics"
)

// Recover returns h with every panic of a request recovered: the client
// gets a 500 problem (when no header has been written yet), log an error
// line with the panic value and the stack, and m (when not nil) counts it in
// sluice_panics_total{server="http"}. A panic with http.ErrAbortHandler is
// passed on: net/http then aborts the response quietly, as it is meant to.
func Recover(h http.Handler, log *slog.Logger, m *metrics.Metrics) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &recoverWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(v)
			}
			m.Panicked("http")
			log.Error("panic serving HTTP request; answered 500", "method", r.Method, "path", r.URL.Path,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if !rw.wrote {
				writeProblem(w, http.StatusInternalServerError, "", "internal error")
				return
			}
			// The status is sent: only cutting the response short tells
			// the client that it is incomplete.
			panic(http.ErrAbortHandler)
		}()
		h.ServeHTTP(rw, r)
	})
}

// recoverWriter records whether the response has started.
type recoverWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *recoverWriter) WriteHeader(code int) {
	if code >= 200 {
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recoverWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *recoverWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher when the underlying writer does.
func (w *recoverWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		w.wrote = true
		f.Flush()
	}
}

// Hijack implements http.Hijacker when the underlying writer does.
func (w *recoverWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if hj, ok := w.ResponseWriter.(http.Hijacker); ok {
		w.wrote = true
		return hj.Hijack()
	}
	return nil, nil, http.ErrNotSupported
}
