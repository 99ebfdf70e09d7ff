package storeapi_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice"
	storev1 "github.com/sluicehq/sluice/api/sluice/store/v1"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/remotestore"
	"github.com/sluicehq/sluice/service/admin"
	"github.com/sluicehq/sluice/service/certs/certstest"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/storeapi"
)

var bg = context.Background()

// start serves a store API over a memory store on a loopback port, with
// opts and the gRPC server options extra, until the test ends.
func start(t *testing.T, extra []grpc.ServerOption, opts ...storeapi.Option) string {
	t.Helper()
	m := memstore.New()
	t.Cleanup(func() { m.Close() })
	return startOver(t, m, extra, opts...)
}

// startOver serves a store API over store, as start does.
func startOver(t *testing.T, store sluice.Store, extra []grpc.ServerOption, opts ...storeapi.Option) string {
	t.Helper()
	srv, err := storeapi.New(store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(append(extra, srv.ServerOptions()...)...)
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { g.Serve(lis); close(done) }()
	t.Cleanup(func() { g.Stop(); <-done })
	return lis.Addr().String()
}

// raw is a client of the generated stubs, on a plaintext connection.
func raw(t *testing.T, addr string, opts ...grpc.DialOption) storev1.StoreClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return storev1.NewStoreClient(conn)
}

func limitPB(alg storev1.Algorithm, rate int64, period time.Duration) *storev1.Limit {
	return &storev1.Limit{Algorithm: alg, Rate: rate, PeriodNanos: int64(period)}
}

// checkInvalid checks that err is InvalidArgument with an Error detail
// naming field.
func checkInvalid(t *testing.T, what string, err error, field string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != codes.InvalidArgument {
		t.Errorf("%s: %v, want InvalidArgument naming %s", what, err, field)
		return
	}
	for _, d := range st.Details() {
		if e, ok := d.(*storev1.Error); ok {
			if e.GetField() != field {
				t.Errorf("%s: detail names %q (%s), want %q", what, e.GetField(), e.GetReason(), field)
			}
			return
		}
	}
	t.Errorf("%s: %v has no Error detail", what, err)
}

// TestBounds: the server's bounds and the library's are checked before
// the store is called, each an InvalidArgument naming the field; values
// the wire can carry but Go's types cannot (an enum beyond uint8) are
// refused, never taken for another.
func TestBounds(t *testing.T) {
	b := engine.Bounds{MaxRate: 1000, MaxLogRate: 100, MaxBurst: 200, MaxPeriod: time.Hour, MaxHits: 50, MaxPermits: 10, MaxPermitLease: time.Minute}
	spy := &spyStore{Store: memstore.New()}
	t.Cleanup(func() { spy.Close() })
	c := raw(t, startOver(t, spy, nil, storeapi.WithBounds(b)))
	lim := limitPB(storev1.Algorithm_ALGORITHM_GCRA, 10, time.Second)
	key := []byte("k")
	// byStore: a bound of the library that the store checks itself, before
	// any lock or script, with the error it gives any caller; the others
	// are the server's, and never reach the store.
	tests := []struct {
		name    string
		req     *storev1.AllowNRequest
		field   string
		byStore bool
	}{
		{"rate", &storev1.AllowNRequest{Key: key, Limit: limitPB(storev1.Algorithm_ALGORITHM_GCRA, 1001, time.Second), N: 1}, "Rate", false},
		{"sliding log rate", &storev1.AllowNRequest{Key: key, Limit: limitPB(storev1.Algorithm_ALGORITHM_SLIDING_LOG, 101, time.Second), N: 1}, "Rate", false},
		{"burst", &storev1.AllowNRequest{Key: key, Limit: &storev1.Limit{Algorithm: storev1.Algorithm_ALGORITHM_GCRA, Rate: 1, PeriodNanos: 1e9, Burst: 201}, N: 1}, "Burst", false},
		{"period", &storev1.AllowNRequest{Key: key, Limit: limitPB(storev1.Algorithm_ALGORITHM_GCRA, 1, time.Hour+time.Second), N: 1}, "Period", false},
		{"hits", &storev1.AllowNRequest{Key: key, Limit: lim, N: 51}, "N", false},
		{"huge n", &storev1.AllowNRequest{Key: key, Limit: lim, N: 1 << 62}, "N", false},
		{"negative n", &storev1.AllowNRequest{Key: key, Limit: lim, N: -1}, "N", true},
		{"algorithm beyond uint8", &storev1.AllowNRequest{Key: key, Limit: limitPB(300+storev1.Algorithm_ALGORITHM_GCRA, 1, time.Second), N: 1}, "Algorithm", false},
		{"negative algorithm", &storev1.AllowNRequest{Key: key, Limit: limitPB(-1, 1, time.Second), N: 1}, "Algorithm", false},
		{"failure mode beyond uint8", &storev1.AllowNRequest{Key: key, Limit: &storev1.Limit{Algorithm: storev1.Algorithm_ALGORITHM_GCRA, Rate: 1, PeriodNanos: 1e9, FailureMode: 258}, N: 1}, "FailureMode", false},
		{"counting beyond uint8", &storev1.AllowNRequest{Key: key, Limit: &storev1.Limit{Algorithm: storev1.Algorithm_ALGORITHM_GCRA, Rate: 1, PeriodNanos: 1e9, Counting: 257}, N: 1}, "Counting", false},
		{"rate beyond int64 range of int", &storev1.AllowNRequest{Key: key, Limit: limitPB(storev1.Algorithm_ALGORITHM_GCRA, 1<<62, time.Second), N: 1}, "Rate", false},
		{"no limit", &storev1.AllowNRequest{Key: key, N: 1}, "Algorithm", true},
		{"negative period", &storev1.AllowNRequest{Key: key, Limit: limitPB(storev1.Algorithm_ALGORITHM_GCRA, 1, -time.Second), N: 1}, "Period", true},
		{"no key", &storev1.AllowNRequest{Limit: lim, N: 1}, "Key", false},
		{"long key", &storev1.AllowNRequest{Key: make([]byte, sluice.MaxKeyLen+1), Limit: lim, N: 1}, "Key", false},
	}
	for _, tt := range tests {
		before := spy.calls.Load()
		_, err := c.AllowN(bg, tt.req)
		checkInvalid(t, "AllowN "+tt.name, err, tt.field)
		_, err = c.Reserve(bg, &storev1.ReserveRequest{Key: tt.req.Key, Limit: tt.req.Limit, N: tt.req.N})
		checkInvalid(t, "Reserve "+tt.name, err, tt.field)
		_, err = c.AllowMulti(bg, &storev1.AllowMultiRequest{Requests: []*storev1.Request{{Key: []byte("other"), Limit: lim, N: 1}, {Key: tt.req.Key, Limit: tt.req.Limit, N: tt.req.N}}})
		checkInvalid(t, "AllowMulti "+tt.name, err, tt.field)
		if n := spy.calls.Load() - before; !tt.byStore && n != 0 {
			t.Errorf("%s: the store was called %d times, want the server's bound checked before any call", tt.name, n)
		}
	}
	// A key of 0 bytes up to the bound, of any bytes, is a key.
	if r, err := c.AllowN(bg, &storev1.AllowNRequest{Key: []byte{0, 0xff, '{'}, Limit: lim, N: 1}); err != nil || !r.GetDecision().GetAllowed() {
		t.Errorf("AllowN(binary key) = %v, %v", r, err)
	}
	logs := []*storev1.Request{
		{Key: []byte("a"), Limit: limitPB(storev1.Algorithm_ALGORITHM_SLIDING_LOG, 100, time.Second), N: 50},
		{Key: []byte("b"), Limit: limitPB(storev1.Algorithm_ALGORITHM_SLIDING_LOG, 100, time.Second), N: 50},
	}
	if _, err := c.AllowMulti(bg, &storev1.AllowMultiRequest{Requests: logs}); err != nil {
		t.Errorf("AllowMulti of 100 sliding-log units: %v", err)
	}
	// A concurrency limit's Max of 0: the store's own check.
	_, err := c.Acquire(bg, &storev1.AcquireRequest{Key: key, Holder: []byte("h")})
	checkInvalid(t, "Acquire no limit", err, "Max")

	// From here on, nothing reaches the store.
	spy.calls.Store(0)
	defer func() {
		if n := spy.calls.Load(); n != 0 {
			t.Errorf("the store was called %d times by requests beyond the server's bounds", n)
		}
	}()

	many := make([]*storev1.Request, sluice.MaxMultiRequests+1)
	for i := range many {
		many[i] = &storev1.Request{Key: key, Limit: lim, N: 1}
	}
	_, err = c.AllowMulti(bg, &storev1.AllowMultiRequest{Requests: many})
	checkInvalid(t, "AllowMulti of 17", err, "Requests")
	_, err = c.AllowMulti(bg, &storev1.AllowMultiRequest{Requests: []*storev1.Request{{Key: key, Limit: lim, N: 1}, {Key: key, Limit: lim, N: 1 << 40}}})
	checkInvalid(t, "AllowMulti with a huge n", err, "N")

	climit := &storev1.ConcurrencyLimit{Max: 2, TtlNanos: int64(time.Second)}
	_, err = c.Acquire(bg, &storev1.AcquireRequest{Key: key, Limit: &storev1.ConcurrencyLimit{Max: 11, TtlNanos: int64(time.Second)}, Holder: []byte("h")})
	checkInvalid(t, "Acquire max 11", err, "Max")
	_, err = c.Acquire(bg, &storev1.AcquireRequest{Key: key, Limit: &storev1.ConcurrencyLimit{Max: 1 << 62, TtlNanos: int64(time.Second)}, Holder: []byte("h")})
	checkInvalid(t, "Acquire max 2^62", err, "Max")
	_, err = c.Acquire(bg, &storev1.AcquireRequest{Key: key, Limit: climit, Holder: make([]byte, sluice.MaxHolderLen+1)})
	checkInvalid(t, "Acquire long holder", err, "Holder")
	_, err = c.Acquire(bg, &storev1.AcquireRequest{Key: key, Limit: climit})
	checkInvalid(t, "Acquire no holder", err, "Holder")
	_, err = c.Release(bg, &storev1.ReleaseRequest{Key: key})
	checkInvalid(t, "Release no holder", err, "Holder")
	_, err = c.Return(bg, &storev1.ReturnRequest{Key: key, Limit: lim, N: 51})
	checkInvalid(t, "Return 51", err, "N")
	_, err = c.Reset(bg, &storev1.ResetRequest{Key: key, Limit: limitPB(storev1.Algorithm_ALGORITHM_GCRA, 1001, time.Second)})
	checkInvalid(t, "Reset rate 1001", err, "Rate")
	_, err = c.Acquire(bg, &storev1.AcquireRequest{Key: key, Limit: &storev1.ConcurrencyLimit{Max: 1, TtlNanos: int64(time.Minute + time.Millisecond)}, Holder: []byte("h")})
	checkInvalid(t, "Acquire TTL beyond --max-permit-lease", err, "TTL")
	_, err = c.Extend(bg, &storev1.ExtendRequest{Key: key, Limit: &storev1.ConcurrencyLimit{Max: 1, TtlNanos: int64(time.Hour)}, Holder: []byte("h")})
	checkInvalid(t, "Extend TTL beyond --max-permit-lease", err, "TTL")
	_, err = c.Extend(bg, &storev1.ExtendRequest{Key: key, Limit: &storev1.ConcurrencyLimit{Max: 11, TtlNanos: int64(time.Second)}, Holder: []byte("h")})
	checkInvalid(t, "Extend max 11", err, "Max")
	_, err = c.Release(bg, &storev1.ReleaseRequest{Key: make([]byte, sluice.MaxKeyLen+1), Holder: []byte("h")})
	checkInvalid(t, "Release long key", err, "Key")
}

// spyStore counts the calls that reach a memory store.
type spyStore struct {
	*memstore.Store
	calls atomic.Int64
}

func (s *spyStore) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	s.calls.Add(1)
	return s.Store.AllowN(ctx, key, lim, n)
}

func (s *spyStore) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	s.calls.Add(1)
	return s.Store.AllowMulti(ctx, reqs)
}

func (s *spyStore) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	s.calls.Add(1)
	return s.Store.Reserve(ctx, key, lim, n)
}

func (s *spyStore) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	s.calls.Add(1)
	return s.Store.Return(ctx, key, lim, n, at)
}

func (s *spyStore) Reset(ctx context.Context, key string, lim sluice.Limit) error {
	s.calls.Add(1)
	return s.Store.Reset(ctx, key, lim)
}

func (s *spyStore) Acquire(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	s.calls.Add(1)
	return s.Store.Acquire(ctx, key, lim, holder)
}

func (s *spyStore) Release(ctx context.Context, key, holder string) error {
	s.calls.Add(1)
	return s.Store.Release(ctx, key, holder)
}

func (s *spyStore) Extend(ctx context.Context, key string, lim sluice.ConcurrencyLimit, holder string) (sluice.PermitDecision, error) {
	s.calls.Add(1)
	return s.Store.Extend(ctx, key, lim, holder)
}

// TestMessageSize: a request beyond MaxMessageSize is refused unread
// (ResourceExhausted), and so is metadata beyond MaxHeaderListSize.
func TestMessageSize(t *testing.T) {
	c := raw(t, start(t, nil))
	lim := limitPB(storev1.Algorithm_ALGORITHM_GCRA, 10, time.Second)
	_, err := c.AllowN(bg, &storev1.AllowNRequest{Key: make([]byte, storeapi.MaxMessageSize), Limit: lim, N: 1})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("AllowN(a key of MaxMessageSize bytes) = %v, want ResourceExhausted", err)
	}
	md := metadata.Pairs("authorization", "Bearer "+strings.Repeat("x", storeapi.MaxHeaderListSize))
	_, err = c.AllowN(metadata.NewOutgoingContext(bg, md), &storev1.AllowNRequest{Key: []byte("k"), Limit: lim, N: 1})
	if err == nil {
		t.Error("AllowN with metadata beyond MaxHeaderListSize answered")
	}
	if r, err := c.AllowN(bg, &storev1.AllowNRequest{Key: []byte("k"), Limit: lim, N: 1}); err != nil || !r.GetDecision().GetAllowed() {
		t.Errorf("AllowN after them = %v, %v", r, err)
	}
}

// TestTokenAuth: with a token file, a call without a token, with a
// malformed or unknown one is Unauthenticated; a token of the file is
// answered, and a rotated file is read again.
func TestTokenAuth(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	writeFile(t, file, "region-eu:0123456789abcdef0123\n")
	a, err := admin.NewAuthenticator(admin.Auth{TokenFile: file}, "the store API's methods", nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	addr := start(t, nil, storeapi.WithAuthenticator(a), storeapi.WithMetrics(reg))
	c := raw(t, addr)
	lim := limitPB(storev1.Algorithm_ALGORITHM_GCRA, 10, time.Second)
	call := func(auth string) error {
		ctx := bg
		if auth != "" {
			ctx = metadata.NewOutgoingContext(bg, metadata.Pairs("authorization", auth))
		}
		_, err := c.AllowN(ctx, &storev1.AllowNRequest{Key: []byte("k"), Limit: lim, N: 1})
		return err
	}
	for _, auth := range []string{"", "Basic abc", "Bearer", "Bearer wrong-token-0123456789", "Bearer " + strings.Repeat("x", 2000)} {
		if err := call(auth); status.Code(err) != codes.Unauthenticated {
			t.Errorf("authorization %.30q: %v, want Unauthenticated", auth, err)
		}
	}
	if err := call("Bearer 0123456789abcdef0123"); err != nil {
		t.Errorf("the file's token: %v", err)
	}
	writeFile(t, file, "region-eu:fedcba9876543210fedcba\n# rotated\n")
	if err := call("Bearer 0123456789abcdef0123"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("the old token after a rotation: %v, want Unauthenticated", err)
	}
	// remotestore's WithTokenFile, over plaintext on loopback.
	tok := filepath.Join(dir, "token")
	writeFile(t, tok, "# the store API's token\nfedcba9876543210fedcba\n")
	rs, err := remotestore.Dial(addr, remotestore.WithInsecure(), remotestore.WithTokenFile(tok))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if d, err := rs.AllowN(bg, "k", sluice.PerSecond(10), 1); err != nil || !d.Allowed {
		t.Errorf("remotestore with the token file: %+v, %v", d, err)
	}
	if got := counter(t, reg, "sluice_store_api_requests_total", "AllowN", "Unauthenticated"); got != 6 {
		t.Errorf("sluice_store_api_requests_total{method=AllowN,code=Unauthenticated} = %v, want 6", got)
	}
	if got := counter(t, reg, "sluice_store_api_requests_total", "AllowN", "OK"); got != 2 {
		t.Errorf("sluice_store_api_requests_total{method=AllowN,code=OK} = %v, want 2", got)
	}
}

// counter returns the value of the counter name{method, code} in reg.
func counter(t *testing.T, reg *prometheus.Registry, name, method, code string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["method"] == method && labels["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestMTLS: over TLS with a client CA, a certificate of that CA is
// answered; one of another CA, or none, is Unauthenticated.
func TestMTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := certstest.NewCA(t, "store API CA"), certstest.NewCA(t, "other CA")
	caFile := ca.Write(t, dir, "ca")
	cfg := &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "127.0.0.1", "127.0.0.1").TLS}, ClientAuth: tls.RequestClientCert}
	a, err := admin.NewAuthenticator(admin.Auth{ClientCAFile: caFile}, "the store API's methods", nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := start(t, []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}, storeapi.WithAuthenticator(a))
	dial := func(leaf *certstest.Leaf) error {
		tc := &tls.Config{RootCAs: ca.Pool()}
		if leaf != nil {
			tc.Certificates = []tls.Certificate{leaf.TLS}
		}
		rs, err := remotestore.Dial(addr, remotestore.WithTLSConfig(tc))
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		_, err = rs.AllowN(bg, "k", sluice.PerSecond(10), 1)
		return err
	}
	if err := dial(ca.Client(t, "region-eu")); err != nil {
		t.Errorf("a client of the CA: %v", err)
	}
	for name, leaf := range map[string]*certstest.Leaf{"none": nil, "another CA's": other.Client(t, "intruder")} {
		err := dial(leaf)
		var le *sluice.LimitError
		if status.Code(errors.Unwrap(err)) != codes.Unauthenticated || errors.As(err, &le) {
			t.Errorf("client certificate %s: %v, want Unauthenticated (a failure of the store, not of the request)", name, err)
		}
	}
}

// TestTokenOrCertificate: with a token file and a client CA, a caller
// presents either: a certificate of the CA, or a token of the file (with
// no certificate, or one of another CA); with neither valid it is
// Unauthenticated.
func TestTokenOrCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, other := certstest.NewCA(t, "store API CA"), certstest.NewCA(t, "other CA")
	caFile := ca.Write(t, dir, "ca")
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, "library:0123456789abcdef0123\n")
	cfg := &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "127.0.0.1", "127.0.0.1").TLS}, ClientAuth: tls.RequestClientCert}
	a, err := admin.NewAuthenticator(admin.Auth{ClientCAFile: caFile, TokenFile: tokens}, "the store API's methods", nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := start(t, []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}, storeapi.WithAuthenticator(a))
	for _, tt := range []struct {
		name  string
		leaf  *certstest.Leaf
		token string
		ok    bool
	}{
		{"certificate", ca.Client(t, "region-eu"), "", true},
		{"token", nil, "0123456789abcdef0123", true},
		{"token and another CA's certificate", other.Client(t, "x"), "0123456789abcdef0123", true},
		{"certificate and a wrong token", ca.Client(t, "region-eu"), "wrong-token-0123456789", true},
		{"neither", nil, "", false},
		{"a wrong token", nil, "wrong-token-0123456789", false},
		{"another CA's certificate", other.Client(t, "intruder"), "", false},
		{"another CA's certificate and a wrong token", other.Client(t, "intruder"), "wrong-token-0123456789", false},
	} {
		tc := &tls.Config{RootCAs: ca.Pool()}
		if tt.leaf != nil {
			tc.Certificates = []tls.Certificate{tt.leaf.TLS}
		}
		opts := []remotestore.Option{remotestore.WithTLSConfig(tc)}
		if tt.token != "" {
			opts = append(opts, remotestore.WithToken(tt.token))
		}
		rs, err := remotestore.Dial(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = rs.AllowN(bg, "k", sluice.PerSecond(100), 1)
		rs.Close()
		if tt.ok && err != nil {
			t.Errorf("%s: %v, want answered", tt.name, err)
		}
		if !tt.ok && status.Code(errors.Unwrap(err)) != codes.Unauthenticated {
			t.Errorf("%s: %v, want Unauthenticated", tt.name, err)
		}
	}
}

// TestLoopbackOnly: without a token file or a client CA, the store API
// answers loopback callers only.
func TestLoopbackOnly(t *testing.T) {
	a, err := admin.NewAuthenticator(admin.Auth{}, "the store API's methods", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(admin.Credentials{RemoteAddr: "127.0.0.1:5000"}); err != nil {
		t.Errorf("loopback: %v", err)
	}
	_, err = a.Authenticate(admin.Credentials{RemoteAddr: "192.0.2.1:5000"})
	var ae *admin.AuthError
	if !errors.As(err, &ae) || !ae.Forbidden || !strings.Contains(ae.Msg, "the store API's methods answer only loopback") {
		t.Errorf("another address: %v, want forbidden", err)
	}
	c := raw(t, start(t, nil))
	if _, err := c.Capabilities(bg, &storev1.CapabilitiesRequest{}); err != nil {
		t.Errorf("Capabilities from loopback: %v", err)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// spyGranter counts the grants that reach a memory store.
type spyGranter struct {
	*memstore.Store
	calls atomic.Int64
}

func (s *spyGranter) Grant(ctx context.Context, key string, lim sluice.Limit, r sluice.GrantRequest) (sluice.Grant, error) {
	s.calls.Add(1)
	return s.Store.Grant(ctx, key, lim, r)
}

// TestGrantBounds: every field of a Grant is checked before the granter
// is called, the server's bounds and the library's alike, each an
// InvalidArgument naming the field; a store that cannot grant is
// Unimplemented with ErrGrantUnsupported's kind, and says so in
// Capabilities.
func TestGrantBounds(t *testing.T) {
	b := engine.Bounds{MaxRate: 1000, MaxBurst: 200, MaxPeriod: time.Hour, MaxHits: 50}
	spy := &spyGranter{Store: memstore.New()}
	t.Cleanup(func() { spy.Close() })
	c := raw(t, startOver(t, spy.Store, nil, storeapi.WithBounds(b), storeapi.WithGranter(spy)))
	if caps, err := c.Capabilities(bg, &storev1.CapabilitiesRequest{}); err != nil || !caps.GetGrant() {
		t.Fatalf("Capabilities = %v, %v; want grant", caps, err)
	}
	lim := limitPB(storev1.Algorithm_ALGORITHM_FIXED_WINDOW, 100, time.Second)
	ok := func() *storev1.GrantRequest {
		return &storev1.GrantRequest{Key: []byte("k"), Limit: lim, Holder: []byte("eu"), N: 10, Demand: 100, Allowance: 30, TtlNanos: int64(time.Second)}
	}
	if r, err := c.Grant(bg, ok()); err != nil || r.GetUnits() != 10 || !r.GetDecision().GetAllowed() {
		t.Fatalf("a valid Grant = %v, %v; want 10 units", r, err)
	}
	spy.calls.Store(0)
	badTime := &timestamppb.Timestamp{Seconds: 1, Nanos: -1}
	for _, tt := range []struct {
		name  string
		set   func(*storev1.GrantRequest)
		field string
	}{
		{"no key", func(r *storev1.GrantRequest) { r.Key = nil }, "Key"},
		{"long key", func(r *storev1.GrantRequest) { r.Key = make([]byte, sluice.MaxKeyLen+1) }, "Key"},
		{"no limit", func(r *storev1.GrantRequest) { r.Limit = nil }, "Algorithm"},
		{"rate beyond --max-rate", func(r *storev1.GrantRequest) {
			r.Limit = limitPB(storev1.Algorithm_ALGORITHM_FIXED_WINDOW, 1001, time.Second)
		}, "Rate"},
		{"period beyond --max-period", func(r *storev1.GrantRequest) {
			r.Limit = limitPB(storev1.Algorithm_ALGORITHM_FIXED_WINDOW, 10, 2*time.Hour)
		}, "Period"},
		{"sliding log", func(r *storev1.GrantRequest) {
			r.Limit = limitPB(storev1.Algorithm_ALGORITHM_SLIDING_LOG, 10, time.Second)
		}, "Algorithm"},
		{"counting all", func(r *storev1.GrantRequest) {
			r.Limit = &storev1.Limit{Algorithm: storev1.Algorithm_ALGORITHM_FIXED_WINDOW, Rate: 10, PeriodNanos: 1e9, Counting: storev1.Counting_COUNTING_ALL}
		}, "Counting"},
		{"no holder", func(r *storev1.GrantRequest) { r.Holder = nil }, "Holder"},
		{"long holder", func(r *storev1.GrantRequest) { r.Holder = make([]byte, sluice.MaxGrantHolderLen+1) }, "Holder"},
		{"n beyond --max-hits", func(r *storev1.GrantRequest) { r.N = 51 }, "N"},
		{"n beyond the capacity", func(r *storev1.GrantRequest) {
			r.Limit = limitPB(storev1.Algorithm_ALGORITHM_FIXED_WINDOW, 20, time.Second)
			r.N = 21
		}, "N"},
		{"huge n", func(r *storev1.GrantRequest) { r.N = 1 << 62 }, "N"},
		{"negative n", func(r *storev1.GrantRequest) { r.N = -1 }, "N"},
		{"negative demand", func(r *storev1.GrantRequest) { r.Demand = -1 }, "Demand"},
		{"demand beyond MaxCharge", func(r *storev1.GrantRequest) { r.Demand = sluice.MaxCharge + 1 }, "Demand"},
		{"allowance beyond the rate", func(r *storev1.GrantRequest) { r.Allowance = 101 }, "Allowance"},
		{"huge allowance", func(r *storev1.GrantRequest) { r.Allowance = 1 << 62 }, "Allowance"},
		{"negative allowance", func(r *storev1.GrantRequest) { r.Allowance = -1 }, "Allowance"},
		{"no ttl", func(r *storev1.GrantRequest) { r.TtlNanos = 0 }, "TTL"},
		{"ttl beyond an hour", func(r *storev1.GrantRequest) { r.TtlNanos = int64(time.Hour + 1) }, "TTL"},
		{"spent beyond the rate", func(r *storev1.GrantRequest) { r.Spent = 101 }, "Spent"},
		{"negative spent", func(r *storev1.GrantRequest) { r.Spent = -1 }, "Spent"},
		{"invalid not_after", func(r *storev1.GrantRequest) { r.NotAfter = badTime }, "NotAfter"},
		{"invalid spent_window", func(r *storev1.GrantRequest) { r.SpentWindow = badTime }, "SpentWindow"},
	} {
		r := ok()
		tt.set(r)
		_, err := c.Grant(bg, r)
		checkInvalid(t, "Grant "+tt.name, err, tt.field)
	}
	if n := spy.calls.Load(); n != 0 {
		t.Errorf("the granter was called %d times by invalid requests, want 0", n)
	}

	// A store that cannot grant.
	c2 := raw(t, startOver(t, plainStore{spy.Store}, nil))
	if caps, err := c2.Capabilities(bg, &storev1.CapabilitiesRequest{}); err != nil || caps.GetGrant() {
		t.Fatalf("Capabilities of a store that cannot grant = %v, %v; want no grant", caps, err)
	}
	_, err := c2.Grant(bg, ok())
	st, _ := status.FromError(err)
	if st.Code() != codes.Unimplemented {
		t.Fatalf("Grant of a store that cannot grant = %v, want Unimplemented", err)
	}
	if len(st.Details()) != 1 || st.Details()[0].(*storev1.Error).GetKind() != storev1.Error_KIND_GRANT_UNSUPPORTED {
		t.Errorf("Grant of a store that cannot grant: details %v, want KIND_GRANT_UNSUPPORTED", st.Details())
	}
}

// plainStore is a store with AllowN only.
type plainStore struct{ s *memstore.Store }

func (p plainStore) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	return p.s.AllowN(ctx, key, lim, n)
}
