package compat

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/testserver/wait"
	"github.com/sluicehq/sluice/internal/testserver/window"
)

// TestCompatStats compares the statistics of the reference and sluice,
// both configured by the reference's environment only, after the same
// traffic: their statsd streams (a receiver of the test's for each, over
// TCP, then UDP with EXTRA_TAGS, then DogStatsD with a mogrifier) and
// their Prometheus endpoints (the default mapping, then a mapping file of
// the test's at another PROMETHEUS_PATH). Counters must be equal, name for
// name; gauges and timers must have the same names (and timers as many
// timings); Prometheus families the same names and types, and the
// limits', errors', requests' and configuration loads' samples the same
// values. What is left out, and why, is listed in statsExclusions.
func TestCompatStats(t *testing.T) {
	referenceBin(t)
	yaml, err := filepath.Abs(filepath.Join("testdata", "stats.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("statsd tcp", func(t *testing.T) {
		t.Parallel()
		testStatsd(t, yaml, "tcp", nil)
	})
	t.Run("statsd udp tags", func(t *testing.T) {
		t.Parallel()
		testStatsd(t, yaml, "udp", []string{"EXTRA_TAGS=env:compat,zone:a.b"})
	})
	t.Run("dogstatsd", func(t *testing.T) {
		t.Parallel()
		testStatsd(t, yaml, "dog", []string{"USE_STATSD=false", "USE_DOG_STATSD=true", "EXTRA_TAGS=env:compat",
			"USE_DOG_STATSD_MOGRIFIERS=HITS",
			`DOG_STATSD_MOGRIFIER_HITS_PATTERN=^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.(total_hits|over_limit)$`,
			"DOG_STATSD_MOGRIFIER_HITS_NAME=ratelimit.service.rate_limit.$3", "DOG_STATSD_MOGRIFIER_HITS_TAGS=domain:$1,descriptor:$2"})
	})
	t.Run("statsd tcp local cache", func(t *testing.T) {
		t.Parallel()
		testStatsd(t, yaml, "tcp", []string{"LOCAL_CACHE_SIZE_IN_BYTES=1048576"})
	})
	t.Run("prometheus", func(t *testing.T) {
		t.Parallel()
		testPrometheus(t, yaml, "/metrics", "")
	})
	t.Run("prometheus local cache", func(t *testing.T) {
		t.Parallel()
		testPrometheus(t, yaml, "/metrics", "", "LOCAL_CACHE_SIZE_IN_BYTES=1048576")
	})
	t.Run("prometheus mapper", func(t *testing.T) {
		t.Parallel()
		mapper := filepath.Join(t.TempDir(), "mapper.yaml")
		if err := os.WriteFile(mapper, []byte(testMapper), 0o644); err != nil {
			t.Fatal(err)
		}
		testPrometheus(t, yaml, "/stats", mapper)
	})
}

// statsFlush is the STATS_FLUSH_INTERVAL of the test.
const statsFlush = "200ms"

// rpcName is the prefix of the statistics of the ShouldRateLimit calls.
const rpcName = "ratelimit_server.ShouldRateLimit."

// markerName is the statistic of the marker rule.
const markerName = "ratelimit.service.rate_limit.stats.marker.total_hits"

// markerWithin is the marker's other statistic: a flush may send one of a
// call's counters and leave the other for the next.
const markerWithin = "ratelimit.service.rate_limit.stats.marker.within_limit"

// statsTraffic sends the test's traffic: over gRPC, but for two requests
// over POST /json, and returns the number of ShouldRateLimit calls. No
// request of several hits takes a limit from below it to above it (see
// docs/operations.md: sluice counts such a request's hits all over_limit).
// It covers every way the reference names a limit's statistics: a key, a
// key and value, nested keys (k3_v3.k4), a wildcard (w_pre*), detailed,
// value_to_metric, shadow mode, unlimited, a named rule, replaces, a
// request's own limit, unknown and empty domains.
func statsTraffic(t *testing.T, s *service) (calls int) {
	t.Helper()
	// The limits are per day: the traffic takes well under the minute it
	// is kept away from the end of a day.
	awayFromEnd(24*time.Hour, time.Minute)
	grpcReq := func(req *pb.RateLimitRequest) {
		t.Helper()
		calls++
		if _, err := s.should(req); err != nil && req.Domain != "" {
			t.Fatalf("%s: %v: %v", s.name, req, err)
		}
	}
	for range 7 {
		grpcReq(rq2(1, d("k1", "x")))
	}
	grpcReq(rq2(1, d("k2", "v2"), d("k3", "v3", "k4", "y"), d("w", "prefix"), d("d", "dv"), d("vm", "any"),
		d("s", "1"), d("u", "1"), d("n", "1"), d("a", "1", "b", "2", "c", "3"), d("ip", "10.0.0.1")))
	grpcReq(rq2(1, d("s", "1")))
	grpcReq(rq2(3, d("s", "1"))) // at the limit already: every hit over
	grpcReq(rq2(1, d("s", "1")))
	for _, hits := range []uint32{4, 4, 2, 3} { // 4, 8 (the near-limit threshold), 10 (the limit), 13
		grpcReq(rq2(hits, d("big", "b")))
	}
	for range 3 {
		grpcReq(rq2(1, withLimit(d("k1", "o"), 2, typev3.RateLimitUnit_DAY)))
	}
	grpcReq(&pb.RateLimitRequest{Domain: "nostats", Descriptors: []*rlpb.RateLimitDescriptor{d("k1", "x"), d("k1", "y")}})
	grpcReq(&pb.RateLimitRequest{Domain: "", Descriptors: []*rlpb.RateLimitDescriptor{d("k1", "x")}})
	grpcReq(rq2(1, d("rep", "1"), d("rep2", "1")))
	for range 2 {
		if _, err := s.shouldJSON(rq2(1, d("k2", "v2"))); err != nil {
			t.Fatalf("%s: /json: %v", s.name, err)
		}
	}
	return calls
}

// awayFromEnd waits, when the current epoch-aligned window of period
// ends in less than margin, until it has ended.
func awayFromEnd(period, margin time.Duration) {
	if left := window.Left(time.Now(), period); left < margin {
		time.Sleep(left + 100*time.Millisecond)
	}
}

func rq2(hits uint32, ds ...*rlpb.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: "stats", Descriptors: ds, HitsAddend: hits}
}

// settle sends three markers, each once the previous one's statistics
// arrived (seen(i): the marker's total_hits and within_limit have reached
// i, its statistics all). A flush that
// reads the marker's i-th hit reads every counter counted before the
// previous marker was seen, and the next one comes after it: once the
// third marker is seen, every statistic of the traffic has arrived (on a
// TCP connection, in order; over loopback UDP, in order too). The calls'
// own statistics are not ordered with the marker's hits (a call's timing
// is recorded after its answer; its total_requests may follow the
// marker's line in the same flush): then settle waits until calls(),
// the number of calls counted and the number of their timings, both
// reach want (the traffic's calls, the probe's, the markers').
func settle(t *testing.T, s *service, want int, seen func(i int) bool, calls func() (requests, timings int)) {
	t.Helper()
	for i := 1; i <= 3; i++ {
		if _, err := s.should(rq2(1, d("marker", "m"))); err != nil {
			t.Fatalf("%s: marker: %v", s.name, err)
		}
		wait.Until(t, fmt.Sprintf("%s's marker %d", s.name, i), func() bool { return seen(i) })
	}
	wait.Until(t, fmt.Sprintf("%s's %d calls counted and timed", s.name, want), func() bool {
		r, n := calls()
		return r >= want && n >= want
	})
}

// markers is the number of marker calls of settle; probes the number of
// calls before the traffic (service.connect's).
const markers, probes = 3, 1

// statsdStream is what a statsd receiver got: counters summed by name
// (with their DogStatsD tags, sorted), the names of gauges, the number of
// timings by name.
type statsdStream struct {
	mu       sync.Mutex
	counters map[string]uint64
	gauges   map[string]bool
	gaugeAt  map[string]string // each gauge's last value
	timers   map[string]int
	errs     []string
}

func newStream() *statsdStream {
	return &statsdStream{counters: map[string]uint64{}, gauges: map[string]bool{}, gaugeAt: map[string]string{}, timers: map[string]int{}}
}

// dogTelemetry is the DataDog client's own statistics, which sluice does
// not send.
const dogTelemetry = "datadog.dogstatsd.client."

// line adds one line: name:value|type[|@rate][|#tags][|c:container].
func (s *statsdStream) line(l string) {
	if l == "" {
		return
	}
	name, rest, ok := strings.Cut(l, ":")
	fields := strings.Split(rest, "|")
	if !ok || len(fields) < 2 {
		s.fail("malformed line %q", l)
		return
	}
	if strings.HasPrefix(name, dogTelemetry) {
		return
	}
	var tags []string
	for _, f := range fields[2:] {
		switch {
		case strings.HasPrefix(f, "#"):
			tags = strings.Split(f[1:], ",")
		case strings.HasPrefix(f, "c:"): // the reference's container ID (origin detection)
		default:
			s.fail("unknown field %q in %q", f, l)
		}
	}
	if len(tags) > 0 {
		slices.Sort(tags)
		name += "|#" + strings.Join(tags, ",")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch fields[1] {
	case "c":
		n, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			s.errs = append(s.errs, fmt.Sprintf("counter %q", l))
			return
		}
		if n == 0 { // the reference sends a counter only when it changed
			s.errs = append(s.errs, fmt.Sprintf("counter sent at 0: %q", l))
		}
		s.counters[name] += n
	case "g":
		s.gauges[name] = true
		s.gaugeAt[name] = fields[0]
	case "ms":
		s.timers[name]++
	default:
		s.errs = append(s.errs, fmt.Sprintf("type of %q", l))
	}
}

func (s *statsdStream) fail(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
}

// counter is the sum of the counters called name, with any tags after
// it (serialized as .__key=value, or DogStatsD's |#key:value).
func (s *statsdStream) counter(name string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sumNamed(s.counters, name)
}

// timings is the number of timings called name, with any tags after it.
func (s *statsdStream) timings(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sumNamed(s.timers, name)
}

func sumNamed[V uint64 | int](m map[string]V, name string) V {
	var n V
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+".__") || strings.HasPrefix(k, name+"|#") {
			n += v
		}
	}
	return n
}

// receive starts a statsd receiver on loopback over network (tcp, udp)
// and returns its port. Over UDP, every datagram must hold whole lines and
// at most 1432 bytes.
func receive(t *testing.T, network string, s *statsdStream) string {
	t.Helper()
	if network == "tcp" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					sc := bufio.NewScanner(c)
					for sc.Scan() {
						s.line(sc.Text())
					}
				}()
			}
		}()
		return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if n > 1432 || buf[n-1] != '\n' {
				s.fail("datagram of %d bytes not ending a line: %q", n, buf[:n])
			}
			for l := range strings.SplitSeq(string(buf[:n]), "\n") {
				s.line(l)
			}
		}
	}()
	return strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port)
}

// startStatsPair starts the reference and sluice with the reference's
// environment, env and, for each, the rest of its own from own (given the
// process's name).
func startStatsPair(t *testing.T, yaml string, own func(name string) []string, env ...string) (ref, sl *service) {
	t.Helper()
	// REDIS_TIMEOUT: the reference's default, 10s, set for both: sluice's
	// own default under the reference's environment is --redis-timeout's
	// 50ms, past which a call on a busy machine is answered by the failure
	// mode, and a hit that Redis counted anyway is over_limit in one of the
	// two only (docs/reference-env.md).
	env = append([]string{"STATS_FLUSH_INTERVAL=" + statsFlush, "REDIS_TIMEOUT=10s"}, env...)
	ref = startRefEnv(t, "reference", referenceBin(t), nil, yaml, append(env, own("reference")...)...)
	sl = startRefEnv(t, "sluice", sluiceBin, []string{"serve"}, yaml, append(env, own("sluice")...)...)
	return ref, sl
}

// statsExclusions are the statistics compared by name only, with why.
var statsExclusions = []struct {
	prefix, why string
}{
	{"ratelimit.go.", "the Go runtime's memory and goroutines: two programs"},
	{"ratelimit.redis_pool.", "the Redis connections (cx_active, cx_total, cx_local_close): the reference opens a pool of REDIS_POOL_SIZE (10); sluice's client multiplexes calls over one connection per node"},
}

// localCacheGauges are the reference's gauges of its local cache
// (LOCAL_CACHE_SIZE_IN_BYTES) that sluice sends, compared by value;
// freecacheGauges those it does not: figures of the reference's cache
// library (evictions, overwrites, expired entries, the average time of
// access) that sluice's cache of over-limit keys does not have.
var (
	localCacheGauges = []string{"entryCount", "hitCount", "missCount", "lookupCount"}
	freecacheGauges  = []string{"evacuateCount", "expiredCount", "overwriteCount", "averageAccessTime"}
)

// freecacheOnly reports a statistic (statsd's name, or Prometheus's family
// under the default mapping) of freecacheGauges.
func freecacheOnly(name string) bool {
	for _, g := range freecacheGauges {
		if name == "ratelimit.localcache."+g || name == "ratelimit_localcache_"+g {
			return true
		}
	}
	return false
}

func excluded(name string) bool {
	for _, e := range statsExclusions {
		if strings.HasPrefix(name, e.prefix) {
			return true
		}
	}
	return false
}

func testStatsd(t *testing.T, yaml, network string, env []string) {
	streams := map[string]*statsdStream{"reference": newStream(), "sluice": newStream()}
	proto := network
	if network == "dog" {
		proto = "udp"
	} else {
		env = append(env, "USE_STATSD=true", "STATSD_PROTOCOL="+network)
	}
	ref, sl := startStatsPair(t, yaml, func(name string) []string {
		return []string{"STATSD_HOST=127.0.0.1", "STATSD_PORT=" + receive(t, proto, streams[name])}
	}, env...)
	marker := markerName
	if network == "dog" { // the mogrifier's name and tags
		marker = "ratelimit.service.rate_limit.total_hits|#descriptor:marker,domain:stats,env:compat"
	}
	for _, s := range []*service{ref, sl} {
		st := streams[s.name]
		want := statsTraffic(t, s) + probes + markers
		settle(t, s, want, func(i int) bool {
			return st.counter(marker) >= uint64(i) && st.counter(markerWithin) >= uint64(i)
		}, func() (int, int) {
			return int(st.counter(rpcName + "total_requests")), st.timings(rpcName + "response_time")
		})
	}
	r, s := streams["reference"], streams["sluice"]
	r.mu.Lock()
	s.mu.Lock()
	defer r.mu.Unlock()
	defer s.mu.Unlock()
	for _, st := range []*statsdStream{r, s} {
		if len(st.errs) > 0 {
			t.Errorf("stream errors: %q", st.errs)
		}
	}
	values := func(m map[string]uint64) map[string]uint64 {
		out := map[string]uint64{}
		for k, v := range m {
			if !excluded(k) {
				out[k] = v
			}
		}
		return out
	}
	if diff := cmp.Diff(values(r.counters), values(s.counters)); diff != "" {
		t.Errorf("counters (-reference +sluice):\n%s", diff)
	}
	// Names: the Redis connections' too (a counter is sent once it
	// counted something: connections made, none closed); not the Go
	// runtime's (the collections and their pauses, made or not).
	names := func(m map[string]uint64) []string {
		return slices.Sorted(func(yield func(string) bool) {
			for k := range m {
				if !strings.HasPrefix(k, "ratelimit.go.") && !yield(k) {
					return
				}
			}
		})
	}
	if diff := cmp.Diff(names(r.counters), names(s.counters)); diff != "" {
		t.Errorf("counter names (-reference +sluice):\n%s", diff)
	}
	refGauges := slices.DeleteFunc(slices.Sorted(maps.Keys(r.gauges)), freecacheOnly)
	if diff := cmp.Diff(refGauges, slices.Sorted(maps.Keys(s.gauges))); diff != "" {
		t.Errorf("gauge names (-reference +sluice):\n%s", diff)
	}
	if diff := cmp.Diff(r.timers, s.timers); diff != "" {
		t.Errorf("timings by name (-reference +sluice):\n%s", diff)
	}
	// The names the traffic must have made, in both: nested keys joined
	// by dots, a wildcard rule under its pattern, a request's own limit
	// under its key and value, the service's and the Redis pool's.
	if network != "dog" {
		for _, name := range []string{
			"ratelimit.service.rate_limit.stats.k3_v3.k4.total_hits",
			"ratelimit.service.rate_limit.stats.w_pre*.total_hits",
			"ratelimit.service.rate_limit.stats.a.b.c.total_hits",
			"ratelimit.service.rate_limit.stats.k1_o.over_limit",
			"ratelimit.service.rate_limit.nostats.domain_not_found",
			"ratelimit.service.config_load_success",
			rpcName + "total_requests",
			"ratelimit.redis_pool.cx_total",
		} {
			for _, st := range []*statsdStream{r, s} {
				if sumNamed(st.counters, name) == 0 {
					t.Errorf("counter %s not sent", name)
				}
			}
		}
		for _, st := range []*statsdStream{r, s} {
			if sumNamed(st.timers, rpcName+"response_time") == 0 || !slices.ContainsFunc(slices.Collect(maps.Keys(st.gauges)), func(k string) bool {
				return strings.HasPrefix(k, "ratelimit.redis_pool.cx_active")
			}) {
				t.Errorf("response_time or redis_pool.cx_active not sent")
			}
		}
	}
	if slices.Contains(env, "LOCAL_CACHE_SIZE_IN_BYTES=1048576") {
		// The limits denied from the local cache: counted alike (in the
		// counters above), and the cache's gauges alike once both sent
		// them after the last request (a flush may read a gauge before a
		// request whose counters it sends).
		for _, st := range []*statsdStream{r, s} {
			if st.counters["ratelimit.service.rate_limit.stats.k1.over_limit_with_local_cache"] == 0 {
				t.Errorf("over_limit_with_local_cache of k1 not sent")
			}
		}
		r.mu.Unlock()
		s.mu.Unlock()
		gauges := func(st *statsdStream) []string {
			st.mu.Lock()
			defer st.mu.Unlock()
			var out []string
			for _, g := range localCacheGauges {
				out = append(out, g+"="+st.gaugeAt["ratelimit.localcache."+g])
			}
			return out
		}
		wait.Until(t, "the local cache's gauges alike", func() bool { return slices.Equal(gauges(r), gauges(s)) })
		t.Logf("local cache: %v", gauges(r))
		r.mu.Lock()
		s.mu.Lock()
	}
	t.Logf("%d counters, %d gauges, %d timers compared", len(r.counters), len(r.gauges), len(r.timers))
}

// testMapper is a statsd_exporter mapping of the test's: a drop, globs
// with ${n}, a regex with match_metric_type, labels, help, a summary.
const testMapper = `
defaults:
  observer_type: summary
mappings:
  - match: "ratelimit.go.*"
    name: "dropped"
    action: drop
  - match: "ratelimit.service.rate_limit.*.*.*"
    name: "rl_${3}"
    labels: {domain: "$1", descriptor: "$2"}
  - match: "ratelimit.service.rate_limit.*.*.*.*"
    name: "rl_nested_${4}"
    labels: {domain: "$1", k1: "$2", k2: "$3"}
  - match: "ratelimit\\.service\\.rate_limit\\.([^.]+)\\.(.+)\\.(total_hits|over_limit)"
    match_type: regex
    match_metric_type: counter
    name: "rl_deep_$3"
    labels: {domain: "$1", path: "$2"}
  - match: "ratelimit_server.*.response_time"
    name: "rpc_ms"
    help: "response time in ms"
    labels: {method: "$1"}
  - match: "ratelimit_server.*.total_requests"
    name: "rpc_total"
    match_metric_type: counter
    labels: {method: "$1"}
`

// exposition is a scrape: every sample's value by name and labels, and
// the type of each family.
type exposition struct {
	samples map[string]float64
	types   map[string]string
	text    string
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$`)

func scrape(t *testing.T, url string) exposition {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	e := exposition{samples: map[string]float64{}, types: map[string]string{}, text: string(b)}
	for l := range strings.Lines(string(b)) {
		l = strings.TrimSpace(l)
		if f := strings.Fields(l); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			e.types[f[2]] = f[3]
			continue
		}
		m := sampleLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("sample %q", l)
		}
		e.samples[m[1]+m[2]] = v
	}
	return e
}

// absentRuntime are the families of the reference's Go collector (the
// Prometheus client's, of an older version) that sluice's no longer has:
// Go's count of pointer lookups, always 0.
var absentRuntime = map[string]bool{"go_memstats_lookups_total": true}

// promValued reports whether a sample's value is compared: the limits',
// the errors', the requests' and the configuration loads' (of a timer's
// histogram or summary, its count).
func promValued(sample string) bool {
	name, _, _ := strings.Cut(sample, "{")
	switch {
	case strings.HasPrefix(name, "ratelimit_go_"), strings.HasPrefix(name, "ratelimit_redis_pool_"),
		strings.HasPrefix(name, "go_"), strings.HasPrefix(name, "process_"), strings.HasPrefix(name, "promhttp_"),
		strings.HasPrefix(name, "statsd_exporter_"), strings.HasPrefix(name, "sluice_"):
		return false
	case strings.HasSuffix(name, "_bucket"), strings.HasSuffix(name, "_sum"), strings.Contains(sample, "quantile="):
		return false
	}
	return true
}

func testPrometheus(t *testing.T, yaml, path, mapper string, moreEnv ...string) {
	ports := map[string]string{"reference": uniquePort(t), "sluice": uniquePort(t)}
	env := append([]string{"USE_STATSD=false", "USE_PROMETHEUS=true", "PROMETHEUS_PATH=" + path}, moreEnv...)
	if mapper != "" {
		env = append(env, "PROMETHEUS_MAPPER_YAML="+mapper)
	}
	ref, sl := startStatsPair(t, yaml, func(name string) []string {
		return []string{"PROMETHEUS_ADDR=127.0.0.1:" + ports[name]}
	}, env...)
	marker := `ratelimit_service_rate_limit_total_hits{domain="stats",key1="marker"}`
	within := `ratelimit_service_rate_limit_within_limit{domain="stats",key1="marker"}`
	requests := `ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`
	timings := `ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"}`
	if mapper != "" {
		marker, within = `rl_total_hits{descriptor="marker",domain="stats"}`, `rl_within_limit{descriptor="marker",domain="stats"}`
		requests, timings = `rpc_total{method="ShouldRateLimit"}`, `rpc_ms_count{method="ShouldRateLimit"}`
	}
	got := map[string]exposition{}
	for _, s := range []*service{ref, sl} {
		url := "http://127.0.0.1:" + ports[s.name] + path
		want := statsTraffic(t, s) + probes + markers
		settle(t, s, want, func(i int) bool {
			e := scrape(t, url)
			return e.samples[marker] >= float64(i) && e.samples[within] >= float64(i)
		}, func() (int, int) {
			e := scrape(t, url)
			return int(e.samples[requests]), int(e.samples[timings])
		})
		got[s.name] = scrape(t, url)
	}
	r, s := got["reference"], got["sluice"]
	// Families: every family of the reference, with its type, in sluice's.
	var missing []string
	for name, typ := range r.types {
		if s.types[name] != typ && !absentRuntime[name] && !freecacheOnly(name) {
			missing = append(missing, fmt.Sprintf("%s %s (sluice: %q)", name, typ, s.types[name]))
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("families of the reference missing or of another type in sluice:\n%s", strings.Join(missing, "\n"))
	}
	var extra []string
	for name := range s.types {
		if _, ok := r.types[name]; !ok && !strings.HasPrefix(name, "sluice_") {
			extra = append(extra, name)
		}
	}
	slices.Sort(extra)
	t.Logf("families only in sluice, besides sluice_*: %v", extra)
	for name := range s.types {
		if _, ok := r.types[name]; !ok && strings.HasPrefix(name, "ratelimit") {
			t.Errorf("family %s only in sluice", name)
		}
	}
	// Samples: the same label sets in the reference's families, the same
	// values where compared.
	valued := func(e exposition, all bool) map[string]float64 {
		out := map[string]float64{}
		for k, v := range e.samples {
			name, _, _ := strings.Cut(k, "{")
			if _, ok := r.types[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")]; !ok {
				if _, ok := r.types[name]; !ok {
					continue
				}
			}
			if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
				continue // the Go runtime's and the process's: two programs
			}
			if freecacheOnly(name) {
				continue
			}
			if all || promValued(k) {
				out[k] = v
			}
		}
		return out
	}
	if diff := cmp.Diff(valued(r, false), valued(s, false)); diff != "" {
		t.Errorf("sample values (-reference +sluice):\n%s", diff)
	}
	keys := func(m map[string]float64) []string {
		out := slices.Collect(maps.Keys(m))
		for i, k := range out {
			if strings.Contains(k, "quantile=") || strings.HasSuffix(strings.SplitN(k, "{", 2)[0], "_bucket") {
				out[i] = "" // a histogram's buckets and a summary's quantiles are compared by their count
			}
		}
		out = slices.DeleteFunc(out, func(k string) bool { return k == "" })
		slices.Sort(out)
		return out
	}
	if diff := cmp.Diff(keys(valued(r, true)), keys(valued(s, true))); diff != "" {
		t.Errorf("samples (-reference +sluice):\n%s", diff)
	}
	if mapper == "" { // the traffic's nested keys and wildcard, labelled
		for _, sample := range []string{
			`ratelimit_service_rate_limit_total_hits{domain="stats",key1="k3_v3",key2="k4"}`,
			`ratelimit_service_rate_limit_total_hits{domain="stats",key1="w_pre*"}`,
			`ratelimit_service_rate_limit_total_hits{domain="stats",key1="a",key2="b"}`,
			`ratelimit_service_rate_limit_over_limit{domain="stats",key1="big"}`,
			`ratelimit_service_config_load_success`,
			requests, timings,
		} {
			for _, e := range []exposition{r, s} {
				if e.samples[sample] == 0 {
					t.Errorf("sample %s missing or 0", sample)
				}
			}
		}
	}
	t.Logf("%d families, %d samples of the reference compared", len(r.types), len(r.samples))
}
