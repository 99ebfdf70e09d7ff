package grpcfast_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
)

// The conformance suite: the same gRPC behaviours, through grpc-go's
// client, against grpc-go's server and grpcfast's, with the same
// expectations. raw_test.go does the same with raw HTTP/2 frames for
// what a well-behaved client never sends.

func dial(t *testing.T, tg *target, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cc, err := grpc.NewClient(tg.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func rlsClient(t *testing.T, tg *target, opts ...grpc.DialOption) pb.RateLimitServiceClient {
	return pb.NewRateLimitServiceClient(dial(t, tg, opts...))
}

func ctx5(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestUnary(t *testing.T) {
	forKinds(t, serverOpts{}, func(t *testing.T, tg *target) {
		c := rlsClient(t, tg)
		for i := range 3 {
			resp, err := c.ShouldRateLimit(ctx5(t), req("ok", i+1))
			if err != nil {
				t.Fatal(err)
			}
			want := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OK, LimitRemaining: uint32(i + 1)}}}
			if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
		}
		// grpcfast decodes and encodes the rate-limit service's messages
		// with its codec; the other cases check that it changes nothing.
		if tg.fast != nil && (tg.codec.decoded.Load() != 3 || tg.codec.encoded.Load() != 3) {
			t.Errorf("the codec decoded %d requests and encoded %d responses of 3 calls, want 3 and 3", tg.codec.decoded.Load(), tg.codec.encoded.Load())
		}
	})
}

func TestMetadata(t *testing.T) {
	forKinds(t, serverOpts{}, func(t *testing.T, tg *target) {
		ctx := metadata.AppendToOutgoingContext(ctx5(t), "x-a", "1", "x-a", "2", "x-b-bin", "\x00\x7f", "traceparent", "00-abc-def-01")
		resp, err := rlsClient(t, tg).ShouldRateLimit(ctx, req("echo-md", 1))
		if err != nil {
			t.Fatal(err)
		}
		want := ":authority=" + tg.addr + "\ncontent-type=application/grpc\ngrpc-accept-encoding=gzip\ntraceparent=00-abc-def-01\nx-a=1,2\nx-b-bin=\x00\x7f\n"
		if got := headersOf(resp); got != want {
			t.Errorf("metadata the server saw:\n%q\nwant\n%q", got, want)
		}
		// A call of few header fields (grpcfast keeps them in its stream).
		resp, err = rlsClient(t, tg).ShouldRateLimit(ctx5(t), req("echo-md", 1))
		if err != nil {
			t.Fatal(err)
		}
		want = ":authority=" + tg.addr + "\ncontent-type=application/grpc\ngrpc-accept-encoding=gzip\n"
		if got := headersOf(resp); got != want {
			t.Errorf("metadata the server saw:\n%q\nwant\n%q", got, want)
		}
	})
}

func TestHeadersAndTrailers(t *testing.T) {
	forKinds(t, serverOpts{}, func(t *testing.T, tg *target) {
		c := rlsClient(t, tg)
		var hdr, trl metadata.MD
		if _, err := c.ShouldRateLimit(ctx5(t), req("headers", 1), grpc.Header(&hdr), grpc.Trailer(&trl)); err != nil {
			t.Fatal(err)
		}
		if got := hdr.Get("x-h"); len(got) != 1 || got[0] != "h1" {
			t.Errorf("header x-h = %q, want h1", got)
		}
		if got := hdr.Get("x-h-bin"); len(got) != 1 || got[0] != "\x00\x01" {
			t.Errorf("header x-h-bin = %q", got)
		}
		if got := trl.Get("x-t"); len(got) != 1 || got[0] != "t1" {
			t.Errorf("trailer x-t = %q, want t1", got)
		}
		hdr = nil
		resp, err := c.ShouldRateLimit(ctx5(t), req("sendheader", 1), grpc.Header(&hdr))
		if err != nil {
			t.Fatal(err)
		}
		if got := hdr.Get("x-h"); len(got) != 1 || got[0] != "early" {
			t.Errorf("sent header x-h = %q, want early", got)
		}
		if got, want := headersOf(resp), "set-after-send=Internal\n"; got != want {
			t.Errorf("SetHeader after SendHeader: %q, want %q", got, want)
		}
	})
}

func TestStatuses(t *testing.T) {
	forKinds(t, serverOpts{}, func(t *testing.T, tg *target) {
		c := rlsClient(t, tg)
		for _, code := range []codes.Code{codes.InvalidArgument, codes.Unavailable, codes.ResourceExhausted, codes.NotFound, codes.Internal} {
			r := req("status", 1)
			r.HitsAddend = uint32(code)
			_, err := c.ShouldRateLimit(ctx5(t), r)
			st := status.Convert(err)
			if st.Code() != code || st.Message() != "status "+strconv.Itoa(int(code))+" µ%\n" {
				t.Errorf("status %v: got %v %q", code, st.Code(), st.Message())
			}
		}
		_, err := c.ShouldRateLimit(ctx5(t), req("details", 1))
		st := status.Convert(err)
		if st.Code() != codes.FailedPrecondition || len(st.Details()) != 1 {
			t.Fatalf("details: %v %v", st.Code(), st.Details())
		}
		if d, ok := st.Details()[0].(*pb.RateLimitRequest); !ok || d.Domain != "detail" {
			t.Errorf("detail = %v", st.Details()[0])
		}
		for domain, want := range map[string]codes.Code{"plain": codes.Unknown, "canceled": codes.Canceled, "nope": codes.NotFound} {
			if _, err := c.ShouldRateLimit(ctx5(t), req(domain, 1)); status.Code(err) != want {
				t.Errorf("%s: %v, want %v", domain, err, want)
			}
		}
	})
}

func TestPanicRecovered(t *testing.T) {
	forKinds(t, serverOpts{}, func(t *testing.T, tg *target) {
		c := rlsClient(t, tg)
		_, err := c.ShouldRateLimit(ctx5(t), req("panic", 1))
		if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != "internal error" {
			t.Errorf("a handler's panic: %v, want Internal internal error", err)
		}
		if n := tg.panicked.Load(); n != 1 {
			t.Errorf("panics counted: %d, want 1", n)
		}
		if _, err := c.ShouldRateLimit(ctx5(t), req("ok", 1)); err != nil {
			t.Errorf("after a panic: %v", err)
		}
	})
}

func TestDeadline(t *testing.T) {
	forKinds(t, serverOpts{}, func(t *testing.T, tg *target) {
		c := rlsClient(t, tg)
		resp, err := c.ShouldRateLimit(ctx5(t), req("deadline", 1))
		if err != nil || headersOf(resp) != "has=true\nfuture=true\n" {
			t.Errorf("the call's deadline on the server: %v %q", err, headersOf(resp))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if _, err := c.ShouldRateLimit(ctx, req("wait", 1)); status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("a call past its deadline: %v, want DeadlineExceeded", err)
		}
		// The client resets the stream at its deadline, about when the
		// server's passes: the handler's context ends either way.
		if err := <-tg.svc.ctxErr; err != context.DeadlineExceeded && err != context.Canceled {
			t.Errorf("the handler's context ended with %v, want DeadlineExceeded or Canceled", err)
		}
	})
}

// handlersWait skips a case whose handler waits for the client to end the
// call: a handler run inline holds its connection's reader, which reads the
// client's RST_STREAM only once the handler returns (Options.Inline is for
// handlers that never wait).
func handlersWait(t *testing.T, tg *target) {
	if tg.kind == "lean-inline" {
		t.Skip("an inline handler that waits for its client holds the reader that would read the client's reset")
	}
}

func TestCancel(t *testing.T) {
	forKinds(t, serverOpts{}, func(t *testing.T, tg *target) {
		handlersWait(t, tg)
		c := rlsClient(t, tg)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := c.ShouldRateLimit(ctx, req("wait", 1))
			done <- err
		}()
		for tg.svc.calls.Load() == 0 { // the call reached the handler
			time.Sleep(time.Millisecond)
		}
		cancel()
		if err := <-done; status.Code(err) != codes.Canceled {
			t.Errorf("a cancelled call: %v, want Canceled", err)
		}
		if err := <-tg.svc.ctxErr; err != context.Canceled {
			t.Errorf("the handler's context ended with %v, want Canceled", err)
		}
	})
}

func TestMaxRecvMsgSize(t *testing.T) {
	forKinds(t, serverOpts{maxRecv: 4 << 10}, func(t *testing.T, tg *target) {
		c := rlsClient(t, tg)
		r := req("ok", 1)
		r.Descriptors[0].Entries[0].Value = strings.Repeat("x", 5000)
		_, err := c.ShouldRateLimit(ctx5(t), r)
		if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "grpc: received message larger than max (") {
			t.Errorf("a 5 KB request with a 4 KiB bound: %v, want ResourceExhausted", err)
		}
		if _, err := c.ShouldRateLimit(ctx5(t), req("ok", 1)); err != nil {
			t.Errorf("after: %v", err)
		}
	})
}

func TestBigResponse(t *testing.T) {
	forKinds(t, serverOpts{}, func(t *testing.T, tg *target) {
		c := rlsClient(t, tg)
		r := req("big", 1)
		r.HitsAddend = 1500 // about 1.5 MB: many DATA frames, window updates
		resp, err := c.ShouldRateLimit(ctx5(t), r)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(resp.ResponseHeadersToAdd); n != 1500 {
			t.Errorf("%d headers, want 1500", n)
		}
	})
}

func TestPeerAndMethod(t *testing.T) {
	forKinds(t, serverOpts{}, func(t *testing.T, tg *target) {
		cc := dial(t, tg)
		resp, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx5(t), req("peer", 1))
		if err != nil {
			t.Fatal(err)
		}
		h := headersOf(resp)
		if !strings.Contains(h, "peer=127.0.0.1:") || !strings.Contains(h, "method=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit\n") || !strings.Contains(h, "tls=false") {
			t.Errorf("peer and method: %q", h)
		}
	})
}

func TestHealth(t *testing.T) {
	forKinds(t, serverOpts{}, func(t *testing.T, tg *target) {
		hc := healthpb.NewHealthClient(dial(t, tg))
		resp, err := hc.Check(ctx5(t), &healthpb.HealthCheckRequest{})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check: %v %v", resp, err)
		}
		if _, err := hc.Check(ctx5(t), &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
			t.Errorf("Check of an unknown service: %v, want NotFound", err)
		}
		w, err := hc.Watch(ctx5(t), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := w.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Watch: %v %v", r, err)
		}
		tg.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		if r, err := w.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("Watch after the change: %v %v", r, err)
		}
	})
}

func TestReflection(t *testing.T) {
	forKinds(t, serverOpts{}, func(t *testing.T, tg *target) {
		st, err := rpb.NewServerReflectionClient(dial(t, tg)).ServerReflectionInfo(ctx5(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.Name)
		}
		if got := strings.Join(names, " "); !strings.Contains(got, "envoy.service.ratelimit.v3.RateLimitService") || !strings.Contains(got, "grpc.health.v1.Health") {
			t.Errorf("services %q", got)
		}
		// A file descriptor: a response of several KB.
		if err := st.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "envoy.service.ratelimit.v3.RateLimitService"}}); err != nil {
			t.Fatal(err)
		}
		if resp, err = st.Recv(); err != nil || len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
			t.Fatalf("file containing the service: %v %v", resp, err)
		}
		st.CloseSend()
		if _, err := st.Recv(); err != io.EOF {
			t.Errorf("after CloseSend: %v, want EOF", err)
		}
	})
}

func TestUnknownMethod(t *testing.T) {
	forKinds(t, serverOpts{}, func(t *testing.T, tg *target) {
		cc := dial(t, tg)
		for method, want := range map[string]string{
			"/envoy.service.ratelimit.v3.RateLimitService/Nope": "unknown method Nope for service envoy.service.ratelimit.v3.RateLimitService",
			"/nope.Service/Call": "unknown service nope.Service",
		} {
			err := cc.Invoke(ctx5(t), method, &pb.RateLimitRequest{}, &pb.RateLimitResponse{})
			if st := status.Convert(err); st.Code() != codes.Unimplemented || st.Message() != want {
				t.Errorf("%s: %v, want Unimplemented %q", method, err, want)
			}
		}
	})
}

func TestCompression(t *testing.T) {
	forKinds(t, serverOpts{}, func(t *testing.T, tg *target) {
		c := rlsClient(t, tg)
		resp, err := c.ShouldRateLimit(ctx5(t), req("ok", 3), grpc.UseCompressor(gzip.Name))
		if err != nil || len(resp.Statuses) != 1 || resp.Statuses[0].LimitRemaining != 3 {
			t.Errorf("a gzip call: %v %v", resp, err)
		}
	})
}

func TestConcurrentCalls(t *testing.T) {
	forKinds(t, serverOpts{maxStreams: 10}, func(t *testing.T, tg *target) {
		c := rlsClient(t, tg)
		var wg sync.WaitGroup
		var failed atomic.Int64
		for i := range 300 {
			wg.Go(func() {
				resp, err := c.ShouldRateLimit(ctx5(t), req("ok", i%5+1))
				if err != nil || resp.Statuses[0].LimitRemaining != uint32(i%5+1) {
					failed.Add(1)
				}
			})
		}
		wg.Wait()
		if n := failed.Load(); n != 0 {
			t.Errorf("%d of 300 concurrent calls failed", n)
		}
	})
}

func TestLargeMetadata(t *testing.T) {
	// Past the server's header list bound the stream is reset: grpc-go's
	// client reports Internal, on both servers.
	forKinds(t, serverOpts{maxHeaderList: 8 << 10}, func(t *testing.T, tg *target) {
		c := rlsClient(t, tg)
		ctx := metadata.AppendToOutgoingContext(ctx5(t), "x-big", strings.Repeat("a", 6<<10))
		if _, err := c.ShouldRateLimit(ctx, req("ok", 1)); err != nil {
			t.Errorf("6 KiB of metadata under an 8 KiB bound: %v", err)
		}
		ctx = metadata.AppendToOutgoingContext(ctx5(t), "x-big", strings.Repeat("a", 10<<10))
		_, err := c.ShouldRateLimit(ctx, req("ok", 1))
		if code := status.Code(err); code != codes.Internal && code != codes.Unavailable {
			t.Errorf("10 KiB of metadata over an 8 KiB bound: %v, want Internal or Unavailable", err)
		}
		if _, err := c.ShouldRateLimit(ctx5(t), req("ok", 1)); err != nil {
			t.Errorf("after: %v", err)
		}
	})
}

func TestTLS(t *testing.T) {
	pki := newPKI(t)
	for _, mtls := range []bool{false, true} {
		name := "tls"
		if mtls {
			name = "mtls"
		}
		t.Run(name, func(t *testing.T) {
			// A server certificate read anew at each handshake, as
			// service/certs rotates it: the second one is served from the
			// connection after the swap.
			var serial atomic.Int64
			cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"},
				GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
					return pki.server(t, serial.Load()), nil
				}}
			if mtls {
				cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, pki.pool
			}
			forKinds(t, serverOpts{tls: cfg}, func(t *testing.T, tg *target) {
				serial.Store(1)
				creds := func(cert bool) grpc.DialOption {
					cc := &tls.Config{RootCAs: pki.pool, ServerName: "localhost"}
					if cert {
						cc.Certificates = []tls.Certificate{pki.client(t)}
					}
					return grpc.WithTransportCredentials(credentials.NewTLS(cc))
				}
				var serverSerial int64
				vc := &tls.Config{RootCAs: pki.pool, ServerName: "localhost", Certificates: []tls.Certificate{pki.client(t)},
					VerifyConnection: func(cs tls.ConnectionState) error {
						serverSerial = cs.PeerCertificates[0].SerialNumber.Int64()
						return nil
					}}
				resp, err := rlsClient(t, tg, grpc.WithTransportCredentials(credentials.NewTLS(vc))).ShouldRateLimit(ctx5(t), req("peer", 1))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(headersOf(resp), "peer=127.0.0.1:") || serverSerial != 1 {
					t.Errorf("over TLS: %q, certificate %d", headersOf(resp), serverSerial)
				}
				serial.Store(2)
				if _, err := rlsClient(t, tg, grpc.WithTransportCredentials(credentials.NewTLS(vc))).ShouldRateLimit(ctx5(t), req("ok", 1)); err != nil || serverSerial != 2 {
					t.Errorf("after the certificate changed: %v, certificate %d, want 2", err, serverSerial)
				}
				if _, err := rlsClient(t, tg, creds(false)).ShouldRateLimit(ctx5(t), req("ok", 1)); mtls != (err != nil) {
					t.Errorf("without a client certificate (mTLS %v): %v", mtls, err)
				}
				hc := healthpb.NewHealthClient(dial(t, tg, creds(true)))
				if r, err := hc.Check(ctx5(t), &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
					t.Errorf("health over TLS: %v %v", r, err)
				}
			})
		})
	}
}

func TestGracefulStop(t *testing.T) {
	forKinds(t, serverOpts{}, func(t *testing.T, tg *target) {
		c := rlsClient(t, tg)
		if _, err := c.ShouldRateLimit(ctx5(t), req("ok", 1)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := c.ShouldRateLimit(ctx, req("wait", 1))
			done <- err
		}()
		for tg.svc.calls.Load() < 2 {
			time.Sleep(time.Millisecond)
		}
		stopped := make(chan struct{})
		go func() { tg.graceful(); close(stopped) }()
		// The call in flight runs to its end (its deadline), then the
		// server stops.
		if err := <-done; status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("the call in flight during GracefulStop: %v, want DeadlineExceeded", err)
		}
		<-stopped
		if _, err := c.ShouldRateLimit(ctx5(t), req("ok", 1), grpc.WaitForReady(false)); status.Code(err) != codes.Unavailable {
			t.Errorf("a call after GracefulStop: %v, want Unavailable", err)
		}
	})
}

func TestStopCancelsCalls(t *testing.T) {
	forKinds(t, serverOpts{}, func(t *testing.T, tg *target) {
		c := rlsClient(t, tg)
		done := make(chan error, 1)
		go func() {
			_, err := c.ShouldRateLimit(ctx5(t), req("wait", 1))
			done <- err
		}()
		for tg.svc.calls.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		tg.stop()
		if err := <-done; status.Code(err) != codes.Unavailable {
			t.Errorf("a call in flight at Stop: %v, want Unavailable", err)
		}
		if err := <-tg.svc.ctxErr; !errors.Is(err, context.Canceled) {
			t.Errorf("its handler's context: %v, want Canceled", err)
		}
	})
}

// pki is a test CA with server and client certificates.
type pki struct {
	ca    *x509.Certificate
	key   any
	pool  *x509.CertPool
	certs sync.Map // serial -> *tls.Certificate
}

func (p *pki) server(t *testing.T, serial int64) *tls.Certificate {
	if c, ok := p.certs.Load(serial); ok {
		return c.(*tls.Certificate)
	}
	c := p.issue(t, serial, false)
	p.certs.Store(serial, c)
	return c
}

func (p *pki) client(t *testing.T) tls.Certificate { return *p.issue(t, 100, true) }
