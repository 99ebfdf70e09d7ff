package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const cfg = `domain: dom
descriptors:
  - key: k1
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: k2
    value: v2
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: k3
    value: v3
    descriptors:
      - key: k4
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: w
    value: pre*
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: d
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: u
    rate_limit: {unlimited: true}
  - key: n
    rate_limit: {name: named, unit: minute, requests_per_unit: 5}
  - key: a
    descriptors:
      - key: b
        descriptors:
          - key: c
            rate_limit: {unit: minute, requests_per_unit: 5}
`

var mu sync.Mutex

func logf(f string, a ...any) { mu.Lock(); fmt.Printf(f, a...); mu.Unlock() }

func main() {
	bin := os.Args[1]
	mode := os.Args[2]
	root, _ := os.MkdirTemp("", "probe")
	os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755)
	os.WriteFile(filepath.Join(root, "ratelimit", "config", "c.yaml"), []byte(cfg), 0o644)
	start := time.Now()
	tl, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			logf("[%5.2fs] tcp accept\n", time.Since(start).Seconds())
			go func() {
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					logf("[%5.2fs] tcp %q\n", time.Since(start).Seconds(), sc.Text())
				}
				logf("[%5.2fs] tcp closed %v\n", time.Since(start).Seconds(), sc.Err())
			}()
		}
	}()
	ul, _ := net.ListenPacket("udp", tl.Addr().String())
	go func() {
		b := make([]byte, 65536)
		for {
			n, _, err := ul.ReadFrom(b)
			if err != nil {
				return
			}
			logf("[%5.2fs] udp datagram %d bytes %q\n", time.Since(start).Seconds(), n, b[:n])
		}
	}()
	port := tl.Addr().(*net.TCPAddr).Port
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"HOST=127.0.0.1", "PORT=18080", "GRPC_HOST=127.0.0.1", "GRPC_PORT=18081", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=16070",
		"LOG_LEVEL=warn", "RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:16379", "STATSD_HOST=127.0.0.1", fmt.Sprint("STATSD_PORT=", port),
		"STATS_FLUSH_INTERVAL=2s"}
	env = append(env, strings.Fields(mode)...)
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	cmd.Stdout = os.Stdout
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	defer cmd.Process.Kill()
	conn, _ := grpc.NewClient("127.0.0.1:18081", grpc.WithTransportCredentials(insecure.NewCredentials()))
	cl := pb.NewRateLimitServiceClient(conn)
	d := func(kv ...string) *rlpb.RateLimitDescriptor {
		out := &rlpb.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Entries = append(out.Entries, &rlpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	call := func(dom string, hits uint32, ds ...*rlpb.RateLimitDescriptor) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := cl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: dom, Descriptors: ds, HitsAddend: hits}, grpc.WaitForReady(true))
		if err != nil {
			logf("err %v\n", err)
			return
		}
		logf("[%5.2fs] call %v\n", time.Since(start).Seconds(), r.OverallCode)
	}
	for i := 0; i < 7; i++ {
		call("dom", 1, d("k1", "x"))
	}
	call("dom", 1, d("k2", "v2"), d("k3", "v3", "k4", "y"), d("w", "prefix"), d("d", "dv"), d("s", "1"), d("u", "1"), d("n", "1"), d("a", "1", "b", "2", "c", "3"))
	call("dom", 3, d("s", "1"))
	call("dom", 1, d("s", "1"))
	call("nodomain", 1, d("k1", "x"), d("k1", "y"))
	call("", 1, d("k1", "x"))
	if strings.Contains(mode, "USE_PROMETHEUS=true") {
		time.Sleep(3 * time.Second)
		resp, err := http.Get("http://127.0.0.1:19090/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			fmt.Println(string(b))
		}
		return
	}
	time.Sleep(5 * time.Second)
}
