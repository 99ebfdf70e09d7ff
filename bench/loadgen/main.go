// Command loadgen drives a running sluice serve (or any Envoy rate-limit
// service) at a fixed concurrency for a duration and reports calls/s, p50,
// p99 and p99.9 latency.
//
//	go run ./loadgen -mode grpc -addr 127.0.0.1:8081 -c 64 -d 10s
//	go run ./loadgen -mode http -addr 127.0.0.1:8080 -c 64 -d 10s
//
// grpc calls envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
// with one descriptor {user: u<i>} in -domain (default "bench"; start the
// service with --config loadgen/bench.yaml so that every call is admitted
// and counted). http POSTs sluice's /v1/check with key u<i> and a limit
// that admits every call. Keys cycle over -keys distinct values. Each worker
// has its call in flight at all times (closed loop); latency is measured
// per call, client side, load generator included.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func main() {
	mode := flag.String("mode", "grpc", "grpc (ShouldRateLimit) or http (POST /v1/check)")
	addr := flag.String("addr", "127.0.0.1:8081", "host:port of the service")
	conc := flag.Int("c", 64, "concurrent callers")
	dur := flag.Duration("d", 10*time.Second, "measured duration")
	warm := flag.Duration("warmup", time.Second, "unmeasured warm-up before the measured duration")
	keys := flag.Int("keys", 1000, "distinct keys")
	conns := flag.Int("conns", 4, "gRPC connections, shared round-robin by the callers")
	grpcTimeout := flag.Duration("grpc-timeout", 0, "with -client h2: send this deadline as grpc-timeout on every call, as Envoy sends its rate-limit timeout (20ms by default); 0 sends none")
	client := flag.String("client", "h2", "gRPC client: h2 (this program's lean HTTP/2 client, a few µs of CPU per call) or grpc-go (about 20 µs per call)")
	domain := flag.String("domain", "bench", "RLS domain")
	descKey := flag.String("descriptor", "user", "descriptor key")
	pids := flag.String("pids", "", "comma-separated process ids (the service, redis-server) whose CPU time, with the generator's own, is measured over the window: the calls per CPU-second then project the throughput of an otherwise idle machine")
	flag.Parse()
	if *keys < 1 || *conc < 1 || *conns < 1 || *dur <= 0 {
		fatal(fmt.Errorf("-keys %d, -c %d, -conns %d, -d %v: want positive values", *keys, *conc, *conns, *dur))
	}

	var call func(ctx context.Context, worker, i int) error
	var end func(worker int) time.Time // when the last call's response arrived; nil: when call returned
	switch *mode {
	case "grpc":
		if *client == "h2" {
			call, end = h2Caller(*addr, *conns, *keys, *domain, *descKey, *conc, *grpcTimeout)
			break
		}
		if *client != "grpc-go" {
			fatal(fmt.Errorf("-client %q: want h2 or grpc-go", *client))
		}
		clients := make([]pb.RateLimitServiceClient, *conns)
		for i := range clients {
			cc, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				fatal(err)
			}
			defer cc.Close()
			clients[i] = pb.NewRateLimitServiceClient(cc)
		}
		// Requests are built once: the generator shares the CPU with the
		// service, so it should spend as little of it as it can.
		reqs := make([]*pb.RateLimitRequest, *keys)
		for k := range reqs {
			reqs[k] = &pb.RateLimitRequest{Domain: *domain, Descriptors: []*rlpb.RateLimitDescriptor{{
				Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: *descKey, Value: "u" + strconv.Itoa(k)}},
			}}}
		}
		call = func(ctx context.Context, worker, i int) error {
			resp, err := clients[worker%len(clients)].ShouldRateLimit(ctx, reqs[i%len(reqs)])
			if err != nil {
				return err
			}
			if resp.OverallCode != pb.RateLimitResponse_OK {
				return errOver
			}
			return nil
		}
	case "http":
		tr := &http.Transport{MaxIdleConnsPerHost: *conc, MaxConnsPerHost: *conc,
			DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
		client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		url := "http://" + *addr + "/v1/check"
		bodies := make([][]byte, *keys)
		for k := range bodies {
			bodies[k] = []byte(`{"key":"u` + strconv.Itoa(k) + `","algorithm":"fixed_window","rate":10000000,"period":"1s"}`)
		}
		call = func(ctx context.Context, worker, i int) error {
			req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(bodies[i%len(bodies)]))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d: %s", resp.StatusCode, b)
			}
			if !bytes.Contains(b, []byte(`"allowed":true`)) {
				return errOver
			}
			return nil
		}
	default:
		fatal(fmt.Errorf("-mode %q: want grpc or http", *mode))
	}

	var procs []int
	for _, f := range strings.Split(*pids, ",") {
		if f = strings.TrimSpace(f); f != "" {
			p, err := strconv.Atoi(f)
			if err != nil {
				fatal(fmt.Errorf("-pids %q: %v", *pids, err))
			}
			procs = append(procs, p)
		}
	}
	procs = append(procs, os.Getpid())
	r := run(call, end, *conc, *warm, *dur, procs)
	fmt.Printf("mode=%s client=%s addr=%s c=%d d=%v keys=%d\n", *mode, *client, *addr, *conc, *dur, *keys)
	fmt.Printf("calls=%d errors=%d over_limit=%d\n", r.calls, r.errors, r.over)
	fmt.Printf("throughput=%.0f calls/s p50=%v p99=%v p99.9=%v max=%v\n",
		float64(r.calls)/dur.Seconds(), r.q(0.50), r.q(0.99), r.q(0.999), r.q(1))
	fmt.Printf("latency p10=%v p25=%v p75=%v p90=%v p95=%v p98=%v\n",
		r.q(0.10), r.q(0.25), r.q(0.75), r.q(0.90), r.q(0.95), r.q(0.98))
	if r.cpu > 0 {
		perCPU := float64(r.calls) / r.cpu.Seconds()
		fmt.Printf("cpu=%.2fs (service, store and generator) calls_per_cpu_second=%.0f projected_on_%d_idle_cpus=%.0f calls/s\n",
			r.cpu.Seconds(), perCPU, runtime.NumCPU(), perCPU*float64(runtime.NumCPU()))
	}
	if r.firstErr != nil {
		fmt.Printf("first error: %v\n", r.firstErr)
	}
	if r.calls == 0 || r.errors > r.calls/100 {
		os.Exit(1)
	}
}

var errOver = errors.New("over limit")

// h2Caller calls ShouldRateLimit through the lean HTTP/2 client: conns
// connections shared round-robin, one pre-encoded request per key. The
// latency of a call ends when the connection's reader has the response
// (end), not when the worker it wakes is scheduled: the generator's own
// goroutine scheduling is not the service's latency.
func h2Caller(addr string, conns, keys int, domain, descKey string, workers int, timeout time.Duration) (func(ctx context.Context, worker, i int) error, func(worker int) time.Time) {
	hs := make([]*h2Conn, conns)
	for i := range hs {
		h, err := dialH2(addr, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", timeout)
		if err != nil {
			fatal(err)
		}
		hs[i] = h
	}
	msgs := make([][]byte, keys)
	for k := range msgs {
		b, err := proto.Marshal(&pb.RateLimitRequest{Domain: domain, Descriptors: []*rlpb.RateLimitDescriptor{{
			Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: descKey, Value: "u" + strconv.Itoa(k)}},
		}}})
		if err != nil {
			fatal(err)
		}
		msgs[k] = grpcMessage(b)
	}
	calls := make([]*h2Call, workers)
	for w := range calls {
		calls[w] = &h2Call{done: make(chan struct{}, 1)}
	}
	end := func(worker int) time.Time { return calls[worker].end }
	return func(_ context.Context, worker, i int) error {
		c := calls[worker]
		if err := hs[worker%len(hs)].do(c, msgs[i%len(msgs)]); err != nil {
			return err
		}
		body, err := grpcPayload(c.msg)
		if err != nil {
			return err
		}
		code, err := overallCode(body)
		if err != nil {
			return err
		}
		switch pb.RateLimitResponse_Code(code) {
		case pb.RateLimitResponse_OK:
			return nil
		case pb.RateLimitResponse_OVER_LIMIT:
			return errOver
		}
		return fmt.Errorf("overall_code %d", code)
	}, end
}

// overallCode reads RateLimitResponse.overall_code (field 1) without
// unmarshalling the rest of the response.
func overallCode(b []byte) (uint64, error) {
	var code uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, fmt.Errorf("response: %v", protowire.ParseError(n))
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return 0, fmt.Errorf("response: %v", protowire.ParseError(m))
			}
			code, b = v, b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return 0, fmt.Errorf("response: %v", protowire.ParseError(m))
		}
		b = b[m:]
	}
	return code, nil
}

type result struct {
	calls, errors, over int64
	lat                 []time.Duration
	firstErr            error
	cpu                 time.Duration // CPU time of the measured processes over the window
}

// cpuTime sums the user and system time of the processes, from
// /proc/<pid>/stat (Linux); 0 when unavailable.
func cpuTime(pids []int) time.Duration {
	const ticks = 100 // USER_HZ
	var total int64
	for _, p := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
		if err != nil {
			return 0
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			return 0
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 {
			return 0
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64) // utime is field 14, stime 15
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += ut + st
	}
	return time.Duration(total) * time.Second / ticks
}

func (r *result) q(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(p * float64(len(r.lat)-1))
	return r.lat[i].Round(time.Microsecond)
}

// run keeps conc calls in flight for warm+dur and measures the last dur.
func run(call func(ctx context.Context, worker, i int) error, end func(worker int) time.Time, conc int, warm, dur time.Duration, pids []int) *result {
	ctx := context.Background()
	var measuring, stop atomic.Bool
	var mu sync.Mutex
	total := &result{}
	var wg sync.WaitGroup
	for w := range conc {
		wg.Go(func() {
			lat := make([]time.Duration, 0, 1<<16)
			var calls, errs, over int64
			var firstErr error
			for i := w; !stop.Load(); i += conc {
				t0 := time.Now()
				err := call(ctx, w, i)
				var el time.Duration
				if end != nil && err == nil {
					el = end(w).Sub(t0)
				} else {
					el = time.Since(t0)
				}
				if !measuring.Load() {
					continue
				}
				calls++
				lat = append(lat, el)
				switch {
				case errors.Is(err, errOver):
					over++
				case err != nil:
					errs++
					if firstErr == nil {
						firstErr = err
					}
				}
			}
			mu.Lock()
			total.calls += calls
			total.errors += errs
			total.over += over
			total.lat = append(total.lat, lat...)
			if total.firstErr == nil {
				total.firstErr = firstErr
			}
			mu.Unlock()
		})
	}
	time.Sleep(warm)
	cpu0 := cpuTime(pids)
	measuring.Store(true)
	time.Sleep(dur)
	measuring.Store(false)
	if cpu0 > 0 {
		total.cpu = cpuTime(pids) - cpu0
	}
	stop.Store(true)
	wg.Wait()
	slices.Sort(total.lat)
	return total
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "loadgen:", err)
	os.Exit(2)
}
