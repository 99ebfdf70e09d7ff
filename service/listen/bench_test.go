package listen

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// BenchmarkStreams is a unary call on a loopback connection, with the
// stream limits (a timer and a budget per call) and without.
func BenchmarkStreams(b *testing.B) {
	for _, tt := range []struct {
		name   string
		limits bool
	}{{"limits=off", false}, {"limits=on", true}} {
		b.Run(tt.name, func(b *testing.B) {
			var opts []grpc.ServerOption
			if tt.limits {
				s := NewStreams(StreamLimits{FirstMessage: 10 * time.Second, MaxPendingHeaderBytes: 256 << 10})
				opts = append(s.ServerOptions(), grpc.ChainUnaryInterceptor(s.UnaryInterceptor()), grpc.ChainStreamInterceptor(s.StreamInterceptor()))
			}
			gs := grpc.NewServer(opts...)
			healthpb.RegisterHealthServer(gs, health.NewServer())
			ln, err := Listen("127.0.0.1:0", Options{WriteTimeout: 10 * time.Second}, nil)
			if err != nil {
				b.Fatal(err)
			}
			go gs.Serve(ln)
			defer gs.Stop()
			conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			hc := healthpb.NewHealthClient(conn)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
