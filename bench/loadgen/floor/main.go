// Command floor is the transport's floor for bench/loadgen: a gRPC server
// that answers every envoy.service.ratelimit.v3.RateLimitService/
// ShouldRateLimit with OK at once (the request decoded, no matching, no
// counting, no store), so that compare.sh measures what the transport
// alone costs per call, in the same run as the services.
//
//	floor -grpc 127.0.0.1:0 -http 127.0.0.1:0 -ready-file /tmp/ready
//
// Its flags turn grpc-go's options on one at a time, so that each is
// measured alone against grpc-go's defaults. -http serves
// go_memstats_mallocs_total (the allocations per call, with loadgen
// -metrics) and /debug/pprof/.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"

	"github.com/sluicehq/sluice/service/gctune"
	"github.com/sluicehq/sluice/service/grpcfast"
)

type okServer struct {
	pb.UnimplementedRateLimitServiceServer
}

func (okServer) ShouldRateLimit(context.Context, *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}, nil
}

func main() {
	grpcAddr := flag.String("grpc", "127.0.0.1:0", "gRPC listen address")
	httpAddr := flag.String("http", "127.0.0.1:0", "listen address of /metrics (go_memstats_mallocs_total)")
	ready := flag.String("ready-file", "", "write {\"grpc\":ADDR,\"http\":ADDR} here once listening")
	workers := flag.Int("workers", 0, "grpc.NumStreamWorkers (0: grpc-go's default, a goroutine per call)")
	shared := flag.Bool("shared-write-buffer", false, "grpc.SharedWriteBuffer(true)")
	rbuf := flag.Int("read-buffer", -1, "grpc.ReadBufferSize (-1: grpc-go's default, 32 KiB)")
	wbuf := flag.Int("write-buffer", -1, "grpc.WriteBufferSize (-1: grpc-go's default, 32 KiB)")
	win := flag.Int("window", 0, "grpc.InitialWindowSize (0: grpc-go's default, 64 KiB growing by BDP estimation)")
	connWin := flag.Int("conn-window", 0, "grpc.InitialConnWindowSize (0: grpc-go's default)")
	staticWin := flag.Int("static-window", 0, "grpc.StaticStreamWindowSize and StaticConnWindowSize (no BDP pings; 0: off)")
	pool := flag.String("buffer-pool", "default", "experimental.BufferPool: default (grpc-go's tiered pool) or nop (no pooling)")
	codec := flag.String("codec", "proto", "grpc-go's codec: proto (its default) or vt (vtprotobuf's generated marshalling of the response)")
	inline := flag.Bool("inline", false, "with -server lean: run each call on its connection's reader (grpcfast.Options.Inline)")
	heapFloor := flag.Int64("gc-heap-floor", 64<<20, "gctune.SetHeapFloor, as sluice serve's --gc-heap-floor default (0: off)")
	server := flag.String("server", "grpc-go", "grpc-go, or lean: service/grpcfast serving ShouldRateLimit itself (grpc-go for the rest)")
	flag.Parse()

	if *heapFloor > 0 {
		defer gctune.SetHeapFloor(uint64(*heapFloor))()
	}
	var opts []grpc.ServerOption
	if *workers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(uint32(*workers)))
	}
	if *shared {
		opts = append(opts, grpc.SharedWriteBuffer(true))
	}
	if *rbuf >= 0 {
		opts = append(opts, grpc.ReadBufferSize(*rbuf))
	}
	if *wbuf >= 0 {
		opts = append(opts, grpc.WriteBufferSize(*wbuf))
	}
	if *win > 0 {
		opts = append(opts, grpc.InitialWindowSize(int32(*win)))
	}
	if *connWin > 0 {
		opts = append(opts, grpc.InitialConnWindowSize(int32(*connWin)))
	}
	if *staticWin > 0 {
		opts = append(opts, grpc.StaticStreamWindowSize(int32(*staticWin)), grpc.StaticConnWindowSize(int32(*staticWin)))
	}
	switch *codec {
	case "proto":
	case "vt":
		opts = append(opts, grpc.ForceServerCodecV2(vtCodec{}))
	default:
		log.Fatalf("floor: -codec %q: want proto or vt", *codec)
	}
	switch *pool {
	case "default":
	case "nop":
		opts = append(opts, experimental.BufferPool(mem.NopBufferPool{}))
	default:
		log.Fatalf("floor: -buffer-pool %q: want default or nop", *pool)
	}

	gl, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		log.Fatal(err)
	}
	hl, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		log.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	pb.RegisterRateLimitServiceServer(gs, okServer{})
	switch *server {
	case "grpc-go":
		go func() { log.Fatal(gs.Serve(gl)) }()
	case "lean":
		fs := grpcfast.New(gs, grpcfast.Options{Workers: *workers, Inline: *inline})
		fs.RegisterService(&pb.RateLimitService_ServiceDesc, okServer{})
		go func() { log.Fatal(fs.Serve(gl)) }()
	default:
		log.Fatalf("floor: -server %q: want grpc-go or lean", *server)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Fprintf(w, "go_memstats_mallocs_total %d\n", ms.Mallocs)
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	go func() { log.Fatal(http.Serve(hl, mux)) }()
	if *ready != "" {
		b, _ := json.Marshal(map[string]string{"grpc": gl.Addr().String(), "http": hl.Addr().String()})
		if err := os.WriteFile(*ready+".tmp", b, 0o644); err != nil {
			log.Fatal(err)
		}
		if err := os.Rename(*ready+".tmp", *ready); err != nil {
			log.Fatal(err)
		}
	}
	select {}
}
