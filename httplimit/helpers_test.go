package httplimit_test

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// newClock returns a settable clock for memstore.WithClock.
func newClock(t time.Time) *sluicetest.Clock { return sluicetest.NewClock(t) }

// t0 is 250 ms into a second and into a UTC day.
var t0 = time.Date(2026, 11, 29, 0, 0, 0, 250_000_000, time.UTC)

func newMemStore(t testing.TB, opts ...memstore.Option) *memstore.Store {
	t.Helper()
	s := memstore.New(append([]memstore.Option{memstore.WithSweepInterval(0)}, opts...)...)
	t.Cleanup(func() { s.Close() })
	return s
}

// errStore fails every decision.
type errStore struct{}

var errDown = errors.New("store is down")

func (errStore) AllowN(context.Context, string, sluice.Limit, int) (sluice.Decision, error) {
	return sluice.Decision{}, errDown
}

func (errStore) AllowMulti(context.Context, []sluice.Request) ([]sluice.Decision, error) {
	return nil, errDown
}

// singleStore hides memstore's AllowMulti.
type singleStore struct{ s sluice.Store }

func (s singleStore) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	return s.s.AllowN(ctx, key, lim, n)
}

// trackedBody is a request body that records Close.
type trackedBody struct {
	io.Reader
	closed atomic.Int32
}

func (b *trackedBody) Close() error { b.closed.Add(1); return nil }

// roundTripFunc adapts a function to http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func memstoreClock(c *sluicetest.Clock) memstore.Option { return memstore.WithClock(c.Now) }

func encodeB64(p []byte) string { return base64.StdEncoding.EncodeToString(p) }
