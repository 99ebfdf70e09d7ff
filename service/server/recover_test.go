package server

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/service/metrics"
)

func TestRecover(t *testing.T) {
	var buf bytes.Buffer
	m := metrics.New()
	h := Recover(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/before":
			panic("before the header")
		case "/after":
			w.Write([]byte("partial"))
			w.(http.Flusher).Flush() // on the wire: the client cannot retry
			panic("after the header")
		case "/abort":
			panic(http.ErrAbortHandler)
		}
		w.Write([]byte("ok"))
	}), slog.New(slog.NewTextHandler(&buf, nil)), m)
	srv := httptest.NewServer(h)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/before")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(b), `"status":500`) {
		t.Errorf("a panic before any write = %d %q %s, want a 500 problem", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	// After the status was sent, the response is cut short.
	if resp, err := http.Get(srv.URL + "/after"); err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Error("a panic after the first write gave a complete response, want it cut short")
		}
	}
	if resp, err := http.Get(srv.URL + "/abort"); err == nil {
		resp.Body.Close()
		t.Errorf("http.ErrAbortHandler answered %d, want the response aborted", resp.StatusCode)
	}
	if resp, err := http.Get(srv.URL + "/fine"); err != nil || resp.StatusCode != 200 {
		t.Errorf("GET /fine after the panics: %v", err)
	} else {
		resp.Body.Close()
	}
	// The handler of a response cut short may still be logging and
	// counting when its client has seen the end: Close waits for it.
	srv.Close()
	if n := counterValue(t, m, "sluice_panics_total", "server", "http"); n != 2 {
		t.Errorf("sluice_panics_total{server=http} = %v, want 2 (ErrAbortHandler is not a panic to count)", n)
	}
	if log := buf.String(); !strings.Contains(log, `panic="before the header"`) || !strings.Contains(log, "recover_test.go") {
		t.Errorf("log lacks the panic and its stack:\n%s", log)
	}
}
