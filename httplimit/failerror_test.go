package httplimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/httplimit"
)

// A failover store under sluice.FailError leaves the decision to the
// middleware's own policy while the store is down: its error handler (503
// by default), or WithFailOpen; the Transport returns the error without
// sending.
func TestFailErrorIsTheCallersPolicy(t *testing.T) {
	fs, err := failover.New(errStore{}, failover.WithStartOpen(nil), failover.WithDefaultMode(sluice.FailError))
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	policies := []httplimit.Policy{{Name: "p", Limit: sluice.PerSecond(1)}}
	for _, tt := range []struct {
		name       string
		opts       []httplimit.Option
		wantStatus int
	}{
		{"default", nil, http.StatusServiceUnavailable},
		{"fail open", []httplimit.Option{httplimit.WithFailOpen()}, http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got error
			opts := append(tt.opts, httplimit.WithObserver(httplimit.ObserverFunc(func(e httplimit.Event) { got = e.Err })))
			mw, err := httplimit.New(sluice.New(fs), policies, opts...)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(mw.Handler(okHandler()))
			defer srv.Close()
			resp, _ := get(t, srv.Client(), srv.URL)
			if resp.StatusCode != tt.wantStatus || !errors.Is(got, sluice.ErrNoDecision) {
				t.Errorf("got %d, observed %v; want %d and an error wrapping ErrNoDecision", resp.StatusCode, got, tt.wantStatus)
			}
		})
	}
	t.Run("transport", func(t *testing.T) {
		sent := false
		upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sent = true }))
		defer upstream.Close()
		c := &http.Client{Transport: &httplimit.Transport{Limiter: sluice.New(fs), Limit: sluice.PerSecond(5)}}
		resp, err := c.Get(upstream.URL)
		if resp != nil {
			resp.Body.Close()
		}
		if !errors.Is(err, sluice.ErrNoDecision) || sent {
			t.Errorf("Get = %v (sent %v), want an error wrapping ErrNoDecision, nothing sent", err, sent)
		}
	})
}
