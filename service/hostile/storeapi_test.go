package hostile

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice"
	storev1 "github.com/sluicehq/sluice/api/sluice/store/v1"
	"github.com/sluicehq/sluice/remotestore"
)

// storeAPIClass: the store API (--store-api-addr, with a token file)
// attacked as the other listeners are. Callers without the token, with a
// wrong, malformed or huge one are Unauthenticated, also a thousand at
// once; garbage messages (random bytes to every method) get an error,
// never a hang; a key past its bound, a huge n, rate, burst, period or
// max, and an AllowMulti past its size or its sliding-log units are
// InvalidArgument naming the field, before the store is called; a message
// past the store API's 64 KiB and metadata past its 16 KiB are refused
// unread; the heaviest valid AllowMulti is decided within a second (on
// Redis, without a slow script); idle connections are closed by
// --grpc-handshake-timeout, and idle streams past
// --grpc-max-concurrent-streams refused; a panicking store answers
// Internal and the process goes on. Then a normal call through
// remotestore answers within the probe bound.
var storeAPIClass = class{
	name: "store-api", panics: true, peakGoroutines: storeAPIPeak,
	setup: storeAPISetup, run: runStoreAPI,
}

const (
	storeAPIToken = "hostile-store-api-0123456789"
	storeAPIPath  = "/sluice.store.v1.Store/"
	// storeAPIPeak: the idle connections (the cap, --max-connections) and
	// the idle streams (--grpc-max-concurrent-streams), one after the
	// other, with room for the probes.
	storeAPIPeak = 2*maxConns + 100
	// storeAPIPanics is how many panics the class provokes.
	storeAPIPanics = 3
)

func storeAPISetup(t *testing.T) []flagArg {
	file := filepath.Join(t.TempDir(), "store-api-tokens")
	if err := os.WriteFile(file, []byte("suite:"+storeAPIToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []flagArg{{"store-api-addr", "127.0.0.1:0"}, {"store-api-token-file", file}}
}

// storeAPICall is one raw call of the store API.
type storeAPICall struct {
	conn *grpc.ClientConn
}

// invoke sends msg, as it is, to method with the authorization auth ("":
// none) and returns the status code and message.
func (c storeAPICall) invoke(method string, msg []byte, auth string) (codes.Code, string, time.Duration) {
	st, took := c.call(method, msg, auth)
	return st.Code(), st.Message(), took
}

// field is the field that an InvalidArgument of the store API names.
func field(st *status.Status) string {
	for _, d := range st.Details() {
		if e, ok := d.(*storev1.Error); ok {
			return e.GetField()
		}
	}
	return ""
}

// call is invoke's, returning the status.
func (c storeAPICall) call(method string, msg []byte, auth string) (*status.Status, time.Duration) {
	ctx, cancel := rpcCtx(5 * time.Second)
	defer cancel()
	if auth != "" {
		ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", auth))
	}
	start := time.Now()
	var out []byte
	err := c.conn.Invoke(ctx, storeAPIPath+method, msg, &out, grpc.ForceCodec(rawCodec{}))
	return status.Convert(err), time.Since(start)
}

func runStoreAPI(t *testing.T, h *harness) {
	addr := h.p.storeAPIAddr
	if addr == "" {
		t.Fatal("the ready file has no store_api address")
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := storeAPICall{conn}
	bearer := "Bearer " + storeAPIToken
	storeAPIWarm(t, c, bearer)
	if h.redis != nil {
		h.redis.resetSlowlog(t) // the scripts' first calls compile them: a cost of their size, not of the input
	}

	t.Run("auth", func(t *testing.T) { storeAPIAuth(t, c) })
	t.Run("garbage", func(t *testing.T) { storeAPIGarbage(t, c, bearer) })
	t.Run("bounds", func(t *testing.T) { storeAPIBounds(t, c, bearer) })
	t.Run("idle", func(t *testing.T) { storeAPIIdle(t, addr) })
	t.Run("panic", func(t *testing.T) { storeAPIPanic(t, h, c, bearer) })

	// A normal caller still answers at once.
	rs, err := remotestore.Dial(addr, remotestore.WithInsecure(), remotestore.WithToken(storeAPIToken), remotestore.WithTimeout(probeHang))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	best := time.Hour
	for range 3 {
		start := time.Now()
		d, err := rs.AllowN(context.Background(), "store-api-probe-"+h.sameKey, sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Second}, 1)
		if err != nil || !d.Allowed {
			t.Fatalf("a normal store API call after the attacks: %+v, %v", d, err)
		}
		best = min(best, time.Since(start))
		time.Sleep(probeRetryGap)
	}
	if best > probeBound {
		t.Errorf("a normal store API call took at least %v after the attacks, want within %v", best, probeBound)
	}
}

// storeAPIWarm calls every method of the store API once, one at a time,
// on every algorithm: each of the store's scripts then has run once.
func storeAPIWarm(t *testing.T, c storeAPICall, bearer string) {
	climit := &storev1.ConcurrencyLimit{Max: 5, TtlNanos: int64(time.Second)}
	calls := []warmCall{
		{"Capabilities", &storev1.CapabilitiesRequest{}},
		{"Acquire", &storev1.AcquireRequest{Key: []byte("warm"), Limit: climit, Holder: []byte("h")}},
		{"Extend", &storev1.ExtendRequest{Key: []byte("warm"), Limit: climit, Holder: []byte("h")}},
		{"Release", &storev1.ReleaseRequest{Key: []byte("warm"), Holder: []byte("h")}},
	}
	for a := storev1.Algorithm_ALGORITHM_FIXED_WINDOW; a <= storev1.Algorithm_ALGORITHM_GCRA; a++ {
		for _, counting := range []storev1.Counting{storev1.Counting_COUNTING_ADMITTED, storev1.Counting_COUNTING_ALL} {
			if a == storev1.Algorithm_ALGORITHM_SLIDING_LOG && counting == storev1.Counting_COUNTING_ALL {
				continue
			}
			lim := &storev1.Limit{Algorithm: a, Rate: 100, PeriodNanos: int64(time.Minute), Counting: counting}
			key := []byte("warm-" + a.String() + counting.String())
			calls = append(calls,
				warmCall{"AllowN", &storev1.AllowNRequest{Key: key, Limit: lim, N: 1}},
				warmCall{"AllowMulti", &storev1.AllowMultiRequest{Requests: []*storev1.Request{{Key: key, Limit: lim, N: 1}, {Key: append(key, '2'), Limit: lim, N: 1}}}},
				warmCall{"Reserve", &storev1.ReserveRequest{Key: key, Limit: lim, N: 1}},
				warmCall{"Return", &storev1.ReturnRequest{Key: key, Limit: lim, N: 1}},
				warmCall{"Reset", &storev1.ResetRequest{Key: key, Limit: lim}},
			)
		}
	}
	for _, call := range calls {
		if code, m, _ := c.invoke(call.method, mustMarshal(t, call.msg), bearer); code != codes.OK {
			t.Fatalf("warming the store API: %s: %v %q", call.method, code, m)
		}
	}
}

type warmCall struct {
	method string
	msg    proto.Message
}

// storeAPIAuth: no token, a malformed, unknown or huge one: each
// Unauthenticated, also 1,000 calls from 8 callers at once.
func storeAPIAuth(t *testing.T, c storeAPICall) {
	msg := mustMarshal(t, &storev1.AllowNRequest{Key: []byte("k"), Limit: gcraPB(10), N: 1})
	for _, auth := range []string{"", "Basic dXNlcjpwYXNz", "Bearer", "Bearer wrong-token-0123456789", "bearer  " + storeAPIToken + "x", "Bearer " + strings.Repeat("x", 4000)} {
		if code, m, took := c.invoke("AllowN", msg, auth); code != codes.Unauthenticated {
			t.Errorf("authorization %.40q: %v %q after %v, want Unauthenticated", auth, code, m, took.Round(time.Millisecond))
		}
	}
	var wrong atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 125 {
				auth := ""
				if i%2 == 1 {
					auth = "Bearer guess-" + string(rune('a'+g)) + strings.Repeat("0", 20)
				}
				if code, _, _ := c.invoke("AllowN", msg, auth); code != codes.Unauthenticated {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Errorf("%d of 1000 unauthenticated calls were not refused Unauthenticated", n)
	}
}

// storeAPIGarbage: random bytes, and valid requests with random bytes
// changed, to every method answer an error (or, when they decode to a
// valid request, an answer), never a hang.
func storeAPIGarbage(t *testing.T, c storeAPICall, bearer string) {
	methods := []string{"Capabilities", "AllowN", "AllowMulti", "Reserve", "Return", "Reset", "Acquire", "Release", "Extend"}
	lim := &storev1.Limit{Algorithm: storev1.Algorithm_ALGORITHM_SLIDING_WINDOW, Rate: 100, PeriodNanos: int64(time.Minute), Counting: storev1.Counting_COUNTING_ALL}
	climit := &storev1.ConcurrencyLimit{Max: 5, TtlNanos: int64(time.Second)}
	valid := [][]byte{
		mustMarshal(t, &storev1.CapabilitiesRequest{}),
		mustMarshal(t, &storev1.AllowNRequest{Key: []byte("garbage"), Limit: lim, N: 1}),
		mustMarshal(t, multiPB(3, lim, 2)),
		mustMarshal(t, &storev1.ReserveRequest{Key: []byte("garbage"), Limit: lim, N: 1}),
		mustMarshal(t, &storev1.ReturnRequest{Key: []byte("garbage"), Limit: lim, N: 1}),
		mustMarshal(t, &storev1.ResetRequest{Key: []byte("garbage"), Limit: lim}),
		mustMarshal(t, &storev1.AcquireRequest{Key: []byte("garbage"), Limit: climit, Holder: []byte("h")}),
		mustMarshal(t, &storev1.ReleaseRequest{Key: []byte("garbage"), Holder: []byte("h")}),
		mustMarshal(t, &storev1.ExtendRequest{Key: []byte("garbage"), Limit: climit, Holder: []byte("h")}),
	}
	r := rand.New(rand.NewPCG(1, 2))
	counts := map[codes.Code]int{}
	for i := range 900 {
		var b []byte
		switch i % 3 {
		case 0: // random bytes
			b = make([]byte, 1+r.IntN(4096))
			for j := range b {
				b[j] = byte(r.UintN(256))
			}
		case 1: // a valid request with a few bytes changed
			b = append([]byte(nil), valid[i%len(valid)]...)
			for range 1 + r.IntN(3) {
				if len(b) > 0 {
					b[r.IntN(len(b))] = byte(r.UintN(256))
				}
			}
		case 2: // cut short, or a field longer than the message
			b = append([]byte(nil), valid[i%len(valid)]...)
			if len(b) > 1 && r.IntN(2) == 0 {
				b = b[:r.IntN(len(b))]
			} else {
				b = append(b, 0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f)
			}
		}
		method := methods[i%len(methods)]
		code, m, took := c.invoke(method, b, bearer)
		counts[code]++
		switch code {
		case codes.OK, codes.InvalidArgument, codes.Internal:
		default:
			t.Errorf("%s with %d random bytes: %v %q, want an answer, InvalidArgument or Internal (undecodable)", method, len(b), code, m)
		}
		if took > probeHang {
			t.Errorf("%s with %d random bytes took %v", method, len(b), took)
		}
	}
	t.Logf("900 garbage messages: %v", counts)
}

// storeAPIBounds: values past every bound are InvalidArgument naming the
// field; messages and metadata past their size are refused unread.
func storeAPIBounds(t *testing.T, c storeAPICall, bearer string) {
	big := int64(1) << 62
	invalid := []struct {
		name, method string
		msg          proto.Message
		field        string
	}{
		{"a key of 60 KiB", "AllowN", &storev1.AllowNRequest{Key: make([]byte, 60<<10), Limit: gcraPB(10), N: 1}, "Key"},
		{"n 2^62", "AllowN", &storev1.AllowNRequest{Key: []byte("k"), Limit: gcraPB(10), N: big}, "N"},
		{"n -2^62", "Reserve", &storev1.ReserveRequest{Key: []byte("k"), Limit: gcraPB(10), N: -big}, "N"},
		{"rate 2^62", "AllowN", &storev1.AllowNRequest{Key: []byte("k"), Limit: gcraPB(big), N: 1}, "Rate"},
		{"burst 2^62", "AllowN", &storev1.AllowNRequest{Key: []byte("k"), Limit: &storev1.Limit{Algorithm: storev1.Algorithm_ALGORITHM_GCRA, Rate: 1, PeriodNanos: 1e9, Burst: big}, N: 1}, "Burst"},
		{"period 2^62 ns", "AllowN", &storev1.AllowNRequest{Key: []byte("k"), Limit: &storev1.Limit{Algorithm: storev1.Algorithm_ALGORITHM_GCRA, Rate: 1, PeriodNanos: big}, N: 1}, "Period"},
		{"algorithm 2^30", "AllowN", &storev1.AllowNRequest{Key: []byte("k"), Limit: &storev1.Limit{Algorithm: 1 << 30, Rate: 1, PeriodNanos: 1e9}, N: 1}, "Algorithm"},
		{"a charge of 2^62", "Return", &storev1.ReturnRequest{Key: []byte("k"), Limit: gcraPB(10), N: big}, "N"},
		{"max 2^62", "Acquire", &storev1.AcquireRequest{Key: []byte("k"), Limit: &storev1.ConcurrencyLimit{Max: big, TtlNanos: 1e9}, Holder: []byte("h")}, "Max"},
		{"a holder of 4 KiB", "Acquire", &storev1.AcquireRequest{Key: []byte("k"), Limit: &storev1.ConcurrencyLimit{Max: 1, TtlNanos: 1e9}, Holder: make([]byte, 4096)}, "Holder"},
		{"a TTL of 2^62 ns", "Extend", &storev1.ExtendRequest{Key: []byte("k"), Limit: &storev1.ConcurrencyLimit{Max: 1, TtlNanos: big}, Holder: []byte("h")}, "TTL"},
		{"17 requests", "AllowMulti", multiPB(17, gcraPB(10), 1), "Requests"},
		{"a sliding log of rate 501 (--max-log-rate 500)", "AllowMulti", multiPB(16, &storev1.Limit{Algorithm: storev1.Algorithm_ALGORITHM_SLIDING_LOG, Rate: 501, PeriodNanos: 1e9}, 1), "Rate"},
		{"a TTL of 11 minutes (--max-permit-lease 10m)", "Acquire", &storev1.AcquireRequest{Key: []byte("k"), Limit: &storev1.ConcurrencyLimit{Max: 1, TtlNanos: int64(11 * time.Minute)}, Holder: []byte("h")}, "TTL"},
	}
	for _, tt := range invalid {
		st, took := c.call(tt.method, mustMarshal(t, tt.msg), bearer)
		if st.Code() != codes.InvalidArgument || field(st) != tt.field {
			t.Errorf("%s %s: %v %q (field %q) after %v, want InvalidArgument naming %s", tt.method, tt.name, st.Code(), trim(st.Message()), field(st), took.Round(time.Millisecond), tt.field)
		}
	}
	for _, tt := range []struct {
		name string
		msg  proto.Message
	}{
		{"a message of 1 MiB", &storev1.AllowNRequest{Key: make([]byte, 1<<20), Limit: gcraPB(10), N: 1}},
		{"20,000 requests", multiPB(20000, gcraPB(10), 1)},
	} {
		if code, m, _ := c.invoke("AllowMulti", mustMarshal(t, tt.msg), bearer); code != codes.ResourceExhausted {
			t.Errorf("AllowMulti with %s: %v %q, want ResourceExhausted", tt.name, code, trim(m))
		}
	}
	if code, _, _ := c.invoke("AllowN", mustMarshal(t, &storev1.AllowNRequest{Key: []byte("k"), Limit: gcraPB(10), N: 1}), bearer+strings.Repeat(" ", 32<<10)); code == codes.OK {
		t.Error("AllowN with 32 KiB of metadata answered OK, want it refused")
	}
	// The heaviest valid call: 16 sliding logs at --max-log-rate, each
	// asked its whole rate, decided within a second.
	heavy := &storev1.AllowMultiRequest{}
	for i := range 16 {
		lim := &storev1.Limit{Algorithm: storev1.Algorithm_ALGORITHM_SLIDING_LOG, Rate: 500, PeriodNanos: int64(time.Hour)}
		heavy.Requests = append(heavy.Requests, &storev1.Request{Key: []byte("heavy-" + string(rune('a'+i))), Limit: lim, N: 500})
	}
	code, m, took := c.invoke("AllowMulti", mustMarshal(t, heavy), bearer)
	if code != codes.OK || took > time.Second {
		t.Errorf("the heaviest valid AllowMulti: %v %q after %v, want an answer within 1s", code, trim(m), took.Round(time.Millisecond))
	}
}

// storeAPIIdle: idle TCP connections are closed by the handshake timeout
// (the cap holds meanwhile); idle streams past the concurrent-stream bound
// are refused.
func storeAPIIdle(t *testing.T, addr string) {
	var conns []net.Conn
	opened := time.Now()
	for i := range 150 {
		nc, err := net.DialTimeout("tcp", addr, dialTimeout)
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		conns = append(conns, nc)
	}
	var closed atomic.Int64
	var wg sync.WaitGroup
	for _, nc := range conns {
		wg.Go(func() {
			if serverClosedBy(nc, io.Discard, opened.Add(time.Second+idleMargin)) {
				closed.Add(1)
			}
			nc.Close()
		})
	}
	wg.Wait()
	if n := closed.Load(); n < maxConns {
		t.Errorf("150 idle connections to the store API: the server closed %d within --grpc-handshake-timeout 1s + %v, want at least the %d it may hold", n, idleMargin, maxConns)
	}

	hc, err := dialH2(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	// A write may fail (a reset) once the server has closed, before the
	// reader has seen the close: an error only if the connection stays open.
	if err := hc.openStreamsOn(storeAPIPath+"AllowN", 300); err != nil && !hc.closedWithin(idleMargin) {
		t.Fatalf("%v, and the connection still open", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for hc.refused.Load() < 200 && time.Now().Before(deadline) && !hc.isClosed() {
		time.Sleep(20 * time.Millisecond)
	}
	if n := hc.refused.Load(); n < 200 && !hc.isClosed() {
		t.Errorf("300 idle streams on one connection: %d refused, want at least 200 (--grpc-max-concurrent-streams 100)", n)
	}
}

// storeAPIPanic: a store that panics answers Internal, each time, and the
// log says so once per panic.
func storeAPIPanic(t *testing.T, h *harness, c storeAPICall, bearer string) {
	before := strings.Count(h.p.stderr.String(), "panic serving gRPC call")
	msg := mustMarshal(t, &storev1.AllowNRequest{Key: []byte(panicKey + "-store-api"), Limit: gcraPB(10), N: 1})
	for range storeAPIPanics {
		if code, m, _ := c.invoke("AllowN", msg, bearer); code != codes.Internal {
			t.Errorf("AllowN on a panicking store: %v %q, want Internal", code, m)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(h.p.stderr.String(), "panic serving gRPC call")-before < storeAPIPanics && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(h.p.stderr.String(), "panic serving gRPC call") - before; n != storeAPIPanics {
		t.Errorf("the log reports %d panics of the store API, want %d", n, storeAPIPanics)
	}
	if lines := h.p.panicLines(); len(lines) != storeAPIPanics {
		t.Errorf("the log has %d lines about panics, want the %d provoked: %q", len(lines), storeAPIPanics, lines)
	}
}

func gcraPB(rate int64) *storev1.Limit {
	return &storev1.Limit{Algorithm: storev1.Algorithm_ALGORITHM_GCRA, Rate: rate, PeriodNanos: int64(time.Second)}
}

func multiPB(n int, lim *storev1.Limit, cost int64) *storev1.AllowMultiRequest {
	r := &storev1.AllowMultiRequest{Requests: make([]*storev1.Request, n)}
	for i := range r.Requests {
		r.Requests[i] = &storev1.Request{Key: []byte("multi-" + string(rune('a'+i%26))), Limit: lim, N: cost}
	}
	return r
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
