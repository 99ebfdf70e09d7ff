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
//
// With -pids (service=PID,redis=PID) it reports each process's CPU time over
// the measured window apart, as µs of CPU per call and calls per
// CPU-second, the generator's own included; with -metrics (the service's
// Prometheus endpoint) the service's heap allocations per call. On a shared
// machine the service's CPU per call is the figure to compare: calls/s
// depends on what else runs on the CPUs, the CPU a call costs much less.
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
	hpackMode := flag.String("hpack", "indexed", "with -client h2: indexed (the request's headers indexed in HPACK's dynamic table once per connection, as Envoy's and grpc-go's clients do) or literal (every header a literal in every request)")
	client := flag.String("client", "h2", "gRPC client: h2 (this program's lean HTTP/2 client, a few µs of CPU per call) or grpc-go (about 20 µs per call)")
	domain := flag.String("domain", "bench", "RLS domain")
	descKey := flag.String("descriptor", "user", "descriptor key")
	pids := flag.String("pids", "", "comma-separated processes whose CPU time is measured over the window, each as name=pid (service=123,redis=456) or a bare pid; the generator's own is added as generator. Each is reported apart, as µs of CPU per call and calls per CPU-second: the service's figure, unlike calls/s, does not depend on what else runs on the machine")
	metrics := flag.String("metrics", "", "URL of the service's Prometheus metrics (http://127.0.0.1:8080/metrics): go_memstats_mallocs_total read before and after the window gives the service's heap allocations per call")
	flag.Parse()
	if *keys < 1 || *conc < 1 || *conns < 1 || *dur <= 0 {
		fatal(fmt.Errorf("-keys %d, -c %d, -conns %d, -d %v: want positive values", *keys, *conc, *conns, *dur))
	}

	var call func(ctx context.Context, worker, i int) error
	var end func(worker int) time.Time // when the last call's response arrived; nil: when call returned
	switch *mode {
	case "grpc":
		if *client == "h2" {
			if *hpackMode != "indexed" && *hpackMode != "literal" {
				fatal(fmt.Errorf("-hpack %q: want indexed or literal", *hpackMode))
			}
			call, end = h2Caller(*addr, *conns, *keys, *domain, *descKey, *conc, *grpcTimeout, *hpackMode == "indexed")
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

	procs, err := parseProcs(*pids)
	if err != nil {
		fatal(err)
	}
	var mallocs func() (uint64, error)
	if *metrics != "" {
		mallocs = func() (uint64, error) { return scrapeMallocs(*metrics) }
	}
	r := run(call, end, *conc, *warm, *dur, procs, mallocs)
	fmt.Printf("mode=%s client=%s addr=%s c=%d d=%v keys=%d\n", *mode, *client, *addr, *conc, *dur, *keys)
	fmt.Printf("calls=%d errors=%d over_limit=%d\n", r.calls, r.errors, r.over)
	fmt.Printf("throughput=%.0f calls/s p50=%v p99=%v p99.9=%v max=%v\n",
		float64(r.calls)/dur.Seconds(), r.q(0.50), r.q(0.99), r.q(0.999), r.q(1))
	fmt.Printf("latency p10=%v p25=%v p75=%v p90=%v p95=%v p98=%v\n",
		r.q(0.10), r.q(0.25), r.q(0.75), r.q(0.90), r.q(0.95), r.q(0.98))
	if r.calls > 0 && r.cpu != nil {
		printCPU(r, procs)
	}
	if r.calls > 0 && r.kern != nil {
		printKern(r, procs)
	}
	if r.calls > 0 && r.mallocs > 0 {
		fmt.Printf("allocs_per_call service=%.1f\n", float64(r.mallocs)/float64(r.calls))
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
func h2Caller(addr string, conns, keys int, domain, descKey string, workers int, timeout time.Duration, indexed bool) (func(ctx context.Context, worker, i int) error, func(worker int) time.Time) {
	hs := make([]*h2Conn, conns)
	for i := range hs {
		h, err := dialH2(addr, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", timeout, indexed)
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
	cpu                 []time.Duration // CPU time of each measured process over the window; nil when unknown
	kern                []kernCounts    // each measured process's system calls and context switches over the window; nil when unknown
	mallocs             uint64          // the service's heap allocations over the window; 0 when unknown
}

// proc is a measured process.
type proc struct {
	name string
	pid  int
}

// parseProcs parses -pids (name=pid or pid, comma-separated) and adds the
// generator itself.
func parseProcs(s string) ([]proc, error) {
	var ps []proc
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		name, num, ok := strings.Cut(f, "=")
		if !ok {
			name, num = "pid"+f, f
		}
		p, err := strconv.Atoi(num)
		if err != nil || p <= 0 || name == "" {
			return nil, fmt.Errorf("-pids %q: %q is not name=pid", s, f)
		}
		ps = append(ps, proc{name, p})
	}
	return append(ps, proc{"generator", os.Getpid()}), nil
}

// cpuTimes are the user and system time of each process, from
// /proc/<pid>/stat (Linux), whose counts include the process's threads
// that have exited; nil when one is unavailable.
func cpuTimes(ps []proc) []time.Duration {
	const ticks = 100 // USER_HZ
	ts := make([]time.Duration, len(ps))
	for i, p := range ps {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
		if err != nil {
			return nil
		}
		s := string(b)
		j := strings.LastIndexByte(s, ')')
		if j < 0 {
			return nil
		}
		f := strings.Fields(s[j+1:])
		if len(f) < 13 {
			return nil
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64) // utime is field 14, stime 15
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ts[i] = time.Duration(ut+st) * time.Second / ticks
	}
	return ts
}

// kernCounts are a process's read and write system calls (syscr and syscw
// of /proc/<pid>/io: read, write and their kin, on sockets and pipes too)
// and its threads' context switches (voluntary and not, summed over
// /proc/<pid>/task/*/status; those of threads that exited are lost, and
// Go's threads live as long as the process). Unlike CPU time, these do not
// grow when other processes take the machine's CPUs: they show batching,
// a call's share of a write or a read, and the scheduler's wake-ups.
type kernCounts struct {
	reads, writes, switches uint64
}

func (a kernCounts) sub(b kernCounts) kernCounts {
	return kernCounts{a.reads - b.reads, a.writes - b.writes, a.switches - b.switches}
}

// kernTimes reads kernCounts of each process; nil when one is unavailable
// (not Linux, or another user's process).
func kernTimes(ps []proc) []kernCounts {
	ks := make([]kernCounts, len(ps))
	for i, p := range ps {
		dir := "/proc/" + strconv.Itoa(p.pid)
		b, err := os.ReadFile(dir + "/io")
		if err != nil {
			return nil
		}
		if ks[i].reads, ks[i].writes, err = parseIO(string(b)); err != nil {
			return nil
		}
		tasks, err := os.ReadDir(dir + "/task")
		if err != nil {
			return nil
		}
		for _, t := range tasks {
			b, err := os.ReadFile(dir + "/task/" + t.Name() + "/status")
			if err != nil {
				continue // the thread exited
			}
			ks[i].switches += parseSwitches(string(b))
		}
	}
	return ks
}

// parseIO reads syscr and syscw from the text of /proc/<pid>/io.
func parseIO(s string) (reads, writes uint64, err error) {
	var seen int
	for _, line := range strings.Split(s, "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || name != "syscr" && name != "syscw" {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc io: %s: %w", name, err)
		}
		if name == "syscr" {
			reads = n
		} else {
			writes = n
		}
		seen++
	}
	if seen != 2 {
		return 0, 0, errors.New("/proc io: no syscr and syscw")
	}
	return reads, writes, nil
}

// parseSwitches sums voluntary_ctxt_switches and nonvoluntary_ctxt_switches
// in the text of a /proc status file.
func parseSwitches(s string) uint64 {
	var sum uint64
	for _, line := range strings.Split(s, "\n") {
		name, v, ok := strings.Cut(line, ":")
		if ok && (name == "voluntary_ctxt_switches" || name == "nonvoluntary_ctxt_switches") {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			sum += n
		}
	}
	return sum
}

// printKern prints each process's reads and writes and context switches
// per call over the window.
func printKern(r *result, ps []proc) {
	per := func(n uint64) string {
		return strconv.FormatFloat(float64(n)/float64(r.calls), 'f', 3, 64)
	}
	var sys, cs strings.Builder
	for i, p := range ps {
		fmt.Fprintf(&sys, " %s=%s/%s", p.name, per(r.kern[i].reads), per(r.kern[i].writes))
		fmt.Fprintf(&cs, " %s=%s", p.name, per(r.kern[i].switches))
	}
	fmt.Printf("reads_writes_per_call%s\n", sys.String())
	fmt.Printf("context_switches_per_call%s\n", cs.String())
}

// printCPU prints the CPU time of each process over the window, as µs per
// call and calls per CPU-second, then the sum of them all.
func printCPU(r *result, ps []proc) {
	var total time.Duration
	for _, c := range r.cpu {
		total += c
	}
	perCall := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d.Nanoseconds())/1e3/float64(r.calls), 'f', 2, 64)
	}
	perSec := func(d time.Duration) string {
		if d <= 0 {
			return "inf"
		}
		return strconv.FormatFloat(float64(r.calls)/d.Seconds(), 'f', 0, 64)
	}
	var us, cps strings.Builder
	for i, p := range ps {
		fmt.Fprintf(&us, " %s=%s", p.name, perCall(r.cpu[i]))
		fmt.Fprintf(&cps, " %s=%s", p.name, perSec(r.cpu[i]))
	}
	fmt.Printf("cpu_us_per_call%s all=%s\n", us.String(), perCall(total))
	fmt.Printf("calls_per_cpu_second%s all=%s\n", cps.String(), perSec(total))
	fmt.Printf("cpu=%.2fs (every measured process) projected_on_%d_idle_cpus=%.0f calls/s\n",
		total.Seconds(), runtime.NumCPU(), float64(r.calls)/total.Seconds()*float64(runtime.NumCPU()))
}

// scrapeMallocs reads go_memstats_mallocs_total from a Prometheus text
// endpoint.
func scrapeMallocs(url string) (uint64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_memstats_mallocs_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("%s: go_memstats_mallocs_total %q: %v", url, v, err)
			}
			return uint64(f), nil
		}
	}
	return 0, fmt.Errorf("%s: no go_memstats_mallocs_total", url)
}

func (r *result) q(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(p * float64(len(r.lat)-1))
	return r.lat[i].Round(time.Microsecond)
}

// run keeps conc calls in flight for warm+dur and measures the last dur.
func run(call func(ctx context.Context, worker, i int) error, end func(worker int) time.Time, conc int, warm, dur time.Duration, procs []proc, mallocs func() (uint64, error)) *result {
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
	var m0 uint64
	if mallocs != nil {
		var err error
		if m0, err = mallocs(); err != nil {
			fatal(err)
		}
	}
	cpu0, kern0 := cpuTimes(procs), kernTimes(procs)
	measuring.Store(true)
	time.Sleep(dur)
	measuring.Store(false)
	if cpu1 := cpuTimes(procs); cpu0 != nil && cpu1 != nil {
		total.cpu = make([]time.Duration, len(procs))
		for i := range procs {
			total.cpu[i] = cpu1[i] - cpu0[i]
		}
	}
	if kern1 := kernTimes(procs); kern0 != nil && kern1 != nil {
		total.kern = make([]kernCounts, len(procs))
		for i := range procs {
			total.kern[i] = kern1[i].sub(kern0[i])
		}
	}
	if mallocs != nil {
		// The scrape itself allocates a few thousand times: a rounding
		// error over a window of many thousand calls.
		m1, err := mallocs()
		if err != nil {
			fatal(err)
		}
		total.mallocs = m1 - m0
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
