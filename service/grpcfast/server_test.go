package grpcfast_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/service/grpcfast"
	"github.com/sluicehq/sluice/service/rls"
	"github.com/sluicehq/sluice/service/rlswire"
)

// The servers every conformance case runs against: grpc-go's own, and
// grpcfast in front of it, with calls on workers and inline.
var kinds = []string{"grpc-go", "lean", "lean-inline"}

// testService answers ShouldRateLimit by the request's domain, so that
// each case can ask for the behaviour it checks.
type testService struct {
	pb.UnimplementedRateLimitServiceServer
	ctxErr chan error // how a "wait" call's context ended
	calls  atomic.Int64
}

func newTestService() *testService { return &testService{ctxErr: make(chan error, 16)} }

func (s *testService) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	s.calls.Add(1)
	ok := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}
	for _, d := range req.Descriptors {
		ok.Statuses = append(ok.Statuses, &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: uint32(len(d.GetEntries()))})
	}
	hdr := func(kv ...string) *pb.RateLimitResponse {
		for i := 0; i+1 < len(kv); i += 2 {
			ok.ResponseHeadersToAdd = append(ok.ResponseHeadersToAdd, &core.HeaderValue{Key: kv[i], Value: kv[i+1]})
		}
		return ok
	}
	switch req.Domain {
	case "ok":
		return ok, nil
	case "echo-md":
		md, _ := metadata.FromIncomingContext(ctx)
		keys := make([]string, 0, len(md))
		for k := range md {
			if k != "user-agent" {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			hdr(k, strings.Join(md[k], ","))
		}
		return ok, nil
	case "wait":
		<-ctx.Done()
		s.ctxErr <- ctx.Err()
		return nil, ctx.Err()
	case "status":
		return nil, status.Error(codes.Code(req.HitsAddend), "status "+strconv.Itoa(int(req.HitsAddend))+" µ%\n")
	case "details":
		st, err := status.New(codes.FailedPrecondition, "with details").WithDetails(&pb.RateLimitRequest{Domain: "detail"})
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	case "plain":
		return nil, errors.New("plain error")
	case "canceled":
		return nil, context.Canceled
	case "panic":
		panic("test panic")
	case "headers":
		if err := grpc.SetHeader(ctx, metadata.Pairs("x-h", "h1", "x-h-bin", "\x00\x01")); err != nil {
			return nil, err
		}
		if err := grpc.SetTrailer(ctx, metadata.Pairs("x-t", "t1")); err != nil {
			return nil, err
		}
		return ok, nil
	case "sendheader":
		if err := grpc.SendHeader(ctx, metadata.Pairs("x-h", "early")); err != nil {
			return nil, err
		}
		err := grpc.SetHeader(ctx, metadata.Pairs("x-late", "1"))
		return hdr("set-after-send", status.Code(err).String()), nil
	case "peer":
		p, _ := peer.FromContext(ctx)
		m, _ := grpc.Method(ctx)
		tlsOn := false
		if p != nil {
			_, tlsOn = p.AuthInfo.(credentials.TLSInfo)
		}
		addr := ""
		if p != nil && p.Addr != nil {
			addr = p.Addr.String()
		}
		return hdr("peer", addr, "method", m, "tls", strconv.FormatBool(tlsOn)), nil
	case "deadline":
		d, has := ctx.Deadline()
		return hdr("has", strconv.FormatBool(has), "future", strconv.FormatBool(time.Until(d) > 0)), nil
	case "big":
		v := strings.Repeat("b", 1000)
		for range int(req.HitsAddend) {
			hdr("k", v)
		}
		return ok, nil
	}
	return nil, status.Error(codes.NotFound, "no such domain "+req.Domain)
}

// serverOpts are the bounds a case sets, on either server.
type serverOpts struct {
	maxRecv       int
	maxStreams    uint32
	maxHeaderList uint32
	connTimeout   time.Duration
	kep           keepalive.EnforcementPolicy
	kp            keepalive.ServerParameters
	tls           *tls.Config
	// Only grpcfast's (grpc-go's server has no such bounds).
	firstMessage time.Duration
	pendingBytes int64
}

// target is a running server.
type target struct {
	kind     string
	addr     string
	svc      *testService
	health   *health.Server
	panicked *atomic.Int64
	stop     func()   // Stop
	graceful func()   // GracefulStop
	expired  *counter // grpcfast's FirstMessageTimeout
	refused  *counter // grpcfast's MaxPendingHeaderBytes
	gs       *grpc.Server
	fast     *grpcfast.Server // nil for grpc-go's
	// transportPanics counts grpcfast's own recovered panics, apart from
	// the handlers' (panicked counts both).
	transportPanics atomic.Int64
	// codec is grpcfast's codec, the rate-limit service's as sluice serve
	// sets it, counting the messages it decoded and encoded itself.
	codec *countingCodec
}

type countingCodec struct {
	rlswire.Codec
	decoded, encoded atomic.Int64
}

func (c *countingCodec) UnmarshalMessage(msg []byte, v any) bool {
	ok := c.Codec.UnmarshalMessage(msg, v)
	if ok {
		c.decoded.Add(1)
	}
	return ok
}

func (c *countingCodec) AppendMessage(b []byte, v any) []byte {
	c.encoded.Add(1)
	return c.Codec.AppendMessage(b, v)
}

type counter struct{ n atomic.Int64 }

func (c *counter) Inc() { c.n.Add(1) }

// startServer starts a server of kind with o on a loopback port; it
// stops with the test.
func startServer(t testing.TB, kind string, o serverOpts) *target {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if o.tls != nil {
		l = tls.NewListener(l, o.tls)
	}
	tg := &target{kind: kind, addr: l.Addr().String(), svc: newTestService(), panicked: new(atomic.Int64), expired: &counter{}, refused: &counter{}, codec: &countingCodec{}}
	guard := rls.Guard(nil, func() { tg.panicked.Add(1) }, 0)
	opts := []grpc.ServerOption{grpc.UnaryInterceptor(guard), grpc.StreamInterceptor(rls.RecoverStream(nil, func() { tg.panicked.Add(1) }))}
	if o.maxRecv > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(o.maxRecv))
	}
	if o.maxStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(o.maxStreams))
	}
	if o.maxHeaderList > 0 {
		opts = append(opts, grpc.MaxHeaderListSize(o.maxHeaderList))
	}
	if o.connTimeout > 0 {
		opts = append(opts, grpc.ConnectionTimeout(o.connTimeout))
	}
	opts = append(opts, grpc.KeepaliveEnforcementPolicy(o.kep), grpc.KeepaliveParams(o.kp))
	gs := grpc.NewServer(opts...)
	tg.gs = gs
	pb.RegisterRateLimitServiceServer(gs, tg.svc)
	tg.health = health.NewServer()
	healthpb.RegisterHealthServer(gs, tg.health)
	reflection.Register(gs)
	var serve func(net.Listener) error
	switch kind {
	case "grpc-go":
		serve, tg.stop, tg.graceful = gs.Serve, gs.Stop, gs.GracefulStop
	case "lean", "lean-inline":
		fs := grpcfast.New(gs, grpcfast.Options{
			MaxRecvMsgSize: o.maxRecv, MaxConcurrentStreams: o.maxStreams, MaxHeaderListSize: o.maxHeaderList,
			ConnectionTimeout: o.connTimeout, Keepalive: o.kp, KeepalivePolicy: o.kep,
			FirstMessageTimeout: o.firstMessage, MaxPendingHeaderBytes: o.pendingBytes,
			Expired: tg.expired, Refused: tg.refused,
			UnaryInterceptor: guard, Workers: 4, Inline: kind == "lean-inline", Codec: tg.codec,
			Panicked: func() { tg.panicked.Add(1); tg.transportPanics.Add(1) },
		})
		fs.RegisterService(&pb.RateLimitService_ServiceDesc, tg.svc)
		if kind == "lean" {
			// As sluice serve does; lean-inline keeps the generated
			// handler, so that both ways of calling are checked.
			h := func(ctx context.Context, req any) (any, error) {
				return tg.svc.ShouldRateLimit(ctx, req.(*pb.RateLimitRequest))
			}
			if err := fs.HandleUnary(pb.RateLimitService_ShouldRateLimit_FullMethodName, rls.NewRequest, h); err != nil {
				t.Fatal(err)
			}
		}
		tg.fast = fs
		serve, tg.stop, tg.graceful = fs.Serve, fs.Stop, fs.GracefulStop
	default:
		t.Fatalf("kind %q", kind)
	}
	done := make(chan error, 1)
	go func() { done <- serve(l) }()
	t.Cleanup(func() {
		tg.stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("%s: Serve: %v", kind, err)
		}
	})
	return tg
}

// forKinds runs f against a fresh server of each kind.
func forKinds(t *testing.T, o serverOpts, f func(t *testing.T, tg *target)) {
	for _, k := range kinds {
		t.Run(k, func(t *testing.T) { f(t, startServer(t, k, o)) })
	}
}

// req is a ShouldRateLimit request for domain, one descriptor of n
// entries.
func req(domain string, n int) *pb.RateLimitRequest {
	d := &rlpb.RateLimitDescriptor{}
	for i := range n {
		d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: "k" + strconv.Itoa(i), Value: "v"})
	}
	return &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlpb.RateLimitDescriptor{d}}
}

// headersOf is a response's response_headers_to_add as key=value lines.
func headersOf(r *pb.RateLimitResponse) string {
	var b strings.Builder
	for _, h := range r.GetResponseHeadersToAdd() {
		fmt.Fprintf(&b, "%s=%s\n", h.Key, h.Value)
	}
	return b.String()
}

// TestHandleUnary checks the call HandleUnary makes: the interceptor sees
// the method's info (the registered server, the full name) and a decoded
// request, and a method that is not registered is refused.
func TestHandleUnary(t *testing.T) {
	gs := grpc.NewServer()
	svc := newTestService()
	pb.RegisterRateLimitServiceServer(gs, svc)
	var mu sync.Mutex // the calls run on the connection's reader
	var infos []*grpc.UnaryServerInfo
	in := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		mu.Lock()
		infos = append(infos, info)
		mu.Unlock()
		if d := req.(*pb.RateLimitRequest).GetDomain(); d != "ok" {
			return nil, fmt.Errorf("request domain %q, want ok", d)
		}
		return h(ctx, req)
	}
	fs := grpcfast.New(gs, grpcfast.Options{UnaryInterceptor: in, Inline: true})
	fs.RegisterService(&pb.RateLimitService_ServiceDesc, svc)
	if err := fs.HandleUnary("/envoy.service.ratelimit.v3.RateLimitService/Nope", rls.NewRequest, nil); err == nil {
		t.Error("HandleUnary of a method not registered: no error")
	}
	var handled atomic.Int64
	h := func(ctx context.Context, req any) (any, error) {
		handled.Add(1)
		return svc.ShouldRateLimit(ctx, req.(*pb.RateLimitRequest))
	}
	if err := fs.HandleUnary(pb.RateLimitService_ShouldRateLimit_FullMethodName, rls.NewRequest, h); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go fs.Serve(l)
	defer fs.Stop()
	tg := &target{addr: l.Addr().String()}
	c := rlsClient(t, tg)
	for i := range 2 {
		resp, err := c.ShouldRateLimit(ctx5(t), req("ok", i+1))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetStatuses()[0].GetLimitRemaining(); got != uint32(i+1) {
			t.Errorf("call %d: limit_remaining %d, want %d", i, got, i+1)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if handled.Load() != 2 || len(infos) != 2 {
		t.Fatalf("handler ran %d times, interceptor %d, want 2 and 2", handled.Load(), len(infos))
	}
	if infos[0] != infos[1] || infos[0].FullMethod != pb.RateLimitService_ShouldRateLimit_FullMethodName || infos[0].Server != svc {
		t.Errorf("info %+v then %+v: want one info, of %s and the registered server", infos[0], infos[1], pb.RateLimitService_ShouldRateLimit_FullMethodName)
	}
}
