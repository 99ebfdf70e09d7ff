package refstats

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
)

// recorder is a Sink that keeps what it is sent.
type recorder struct {
	mu       sync.Mutex
	counters map[string]uint64 // summed over flushes
	gauges   map[string]uint64 // the last value
	timers   map[string][]float64
	flushes  int
}

func newRecorder() *recorder {
	return &recorder{counters: map[string]uint64{}, gauges: map[string]uint64{}, timers: map[string][]float64{}}
}

func (r *recorder) Counter(name string, v uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v == 0 {
		panic("a counter sent at 0: " + name)
	}
	r.counters[name] += v
}

func (r *recorder) Gauge(name string, v uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gauges[name] = v
}

func (r *recorder) Timer(name string, ms float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timers[name] = append(r.timers[name], ms)
}

func (r *recorder) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushes++
}

// limits returns the counters under ratelimit.service.
func (r *recorder) service() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]uint64{}
	for k, v := range r.counters {
		if strings.HasPrefix(k, "ratelimit.service.") {
			out[k] = v
		}
	}
	return out
}

const testConfig = `domain: dom
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
  - key: "ip"
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: many
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// newTest returns statistics fed by an engine of testConfig counting every
// hit (the reference's counting), at 10 s into a minute.
func newTest(t *testing.T, tags Tags) (*engine.Engine, *Stats, *Store, *recorder) {
	t.Helper()
	cfg, err := config.Parse("c.yaml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Date(2026, 12, 1, 9, 0, 10, 0, time.UTC) }
	ms := memstore.New(memstore.WithClock(now))
	t.Cleanup(func() { ms.Close() })
	rec := newRecorder()
	st := NewStore(rec)
	s := New(st, tags)
	e := engine.New(ms, cfg, engine.WithObserver(s), engine.WithClock(now), engine.WithCounting(sluice.CountAll))
	return e, s, st, rec
}

func call(t *testing.T, e *engine.Engine, domain string, hits uint32, descs ...[]string) {
	t.Helper()
	req := &engine.Request{Domain: domain, Hits: hits}
	for _, kv := range descs {
		var d engine.Descriptor
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, engine.Entry{Key: kv[i], Value: kv[i+1]})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	_, _ = e.Decide(context.Background(), req)
}

// TestReferenceStream: the traffic of a session with envoyproxy/ratelimit
// and the counters it sent, read from its statsd stream.
func TestReferenceStream(t *testing.T) {
	e, _, st, rec := newTest(t, Tags{})
	for range 7 {
		call(t, e, "dom", 1, []string{"k1", "x"})
	}
	call(t, e, "dom", 1, []string{"k2", "v2"}, []string{"k3", "v3", "k4", "y"}, []string{"w", "prefix"}, []string{"d", "dv"},
		[]string{"s", "1"}, []string{"u", "1"}, []string{"n", "1"}, []string{"a", "1", "b", "2", "c", "3"})
	call(t, e, "dom", 1, []string{"s", "1"})
	call(t, e, "dom", 3, []string{"s", "1"})
	call(t, e, "dom", 1, []string{"s", "1"})
	call(t, e, "nodomain", 1, []string{"k1", "x"}, []string{"k1", "y"})
	call(t, e, "", 1, []string{"k1", "x"})
	st.Flush()
	p := "ratelimit.service.rate_limit.dom."
	want := map[string]uint64{
		p + "k1.total_hits": 7, p + "k1.within_limit": 5, p + "k1.near_limit": 1, p + "k1.over_limit": 2,
		p + "k2_v2.total_hits": 1, p + "k2_v2.within_limit": 1,
		p + "k3_v3.k4.total_hits": 1, p + "k3_v3.k4.within_limit": 1,
		p + "w_pre*.total_hits": 1, p + "w_pre*.within_limit": 1,
		p + "d_dv.total_hits": 1, p + "d_dv.within_limit": 1,
		p + "s.total_hits": 6, p + "s.within_limit": 2, p + "s.near_limit": 1, p + "s.over_limit": 4, p + "s.shadow_mode": 4,
		p + "n.total_hits": 1, p + "n.within_limit": 1,
		p + "a.b.c.total_hits": 1, p + "a.b.c.within_limit": 1,
		"ratelimit.service.rate_limit.nodomain.domain_not_found": 2,
		"ratelimit.service.call.should_rate_limit.service_error": 1,
	}
	if diff := cmp.Diff(want, rec.service()); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
	// A second flush sends only what changed.
	call(t, e, "dom", 2, []string{"k2", "v2"})
	st.Flush()
	want[p+"k2_v2.total_hits"] += 2
	want[p+"k2_v2.within_limit"] += 2
	if diff := cmp.Diff(want, rec.service()); diff != "" {
		t.Errorf("after a second flush (-want +got):\n%s", diff)
	}
	if rec.flushes != 2 {
		t.Errorf("%d sink flushes, want 2", rec.flushes)
	}
	if _, ok := rec.gauges["ratelimit.go.numGoroutine"]; !ok {
		t.Errorf("runtime gauges not sent: %v", slices.Sorted(maps.Keys(rec.gauges)))
	}
}

// TestCrossing: a request whose hits take a limit from below it to above
// it. The reference counts the hits up to the limit near_limit (from the
// near-limit threshold) and those above it over_limit; sluice's stores do
// not tell how far above the limit a charge that counts every hit went,
// so all its hits count over_limit (and shadow_mode).
func TestCrossing(t *testing.T) {
	e, _, st, rec := newTest(t, Tags{})
	call(t, e, "dom", 1, []string{"s", "1"})
	call(t, e, "dom", 3, []string{"s", "1"}) // from 1 to 4, the limit 2
	st.Flush()
	p := "ratelimit.service.rate_limit.dom.s."
	want := map[string]uint64{p + "total_hits": 4, p + "within_limit": 1, p + "over_limit": 3, p + "shadow_mode": 3}
	// The reference: over_limit 2, near_limit 1, shadow_mode 2.
	if diff := cmp.Diff(want, rec.service()); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
}

func TestNames(t *testing.T) {
	tags, err := ParseTags("env:pro.d,zone:a|b,empty:,team:x:y")
	if err != nil {
		t.Fatal(err)
	}
	e, s, st, rec := newTest(t, tags)
	call(t, e, "dom", 1, []string{"ip", "10.1.2.3"}, []string{"d", "10.1.2.3:80|x"})
	s.ConfigLoaded(nil)
	s.ConfigLoaded(errors.New("bad"))
	st.Flush()
	suffix := ".__env=pro_d.__team=x_y.__zone=a_b"
	got := rec.service()
	for _, name := range []string{
		"ratelimit.service.rate_limit.dom.ip.total_hits",
		// The request's values sanitized: an IPv4 address's dots, ':' and '|'.
		"ratelimit.service.rate_limit.dom.d_10_1_2_3_80_x.total_hits",
		"ratelimit.service.config_load_success",
		"ratelimit.service.config_load_error",
	} {
		if got[name+suffix] != 1 {
			t.Errorf("%s = %d, want 1 (have %v)", name+suffix, got[name+suffix], slices.Sorted(maps.Keys(got)))
		}
	}
	if _, err := ParseTags("novalue"); err == nil {
		t.Error(`ParseTags("novalue"): no error`)
	}
}

// TestBounds: names with request values are bounded per rule, unknown
// domains in all; the rest is counted under _other.
func TestBounds(t *testing.T) {
	e, _, st, rec := newTest(t, Tags{})
	for i := range MaxValueNames + 5 {
		call(t, e, "dom", 1, []string{"many", fmt.Sprint("v", i)}, []string{"d", fmt.Sprint("v", i)})
	}
	for i := range MaxUnknownDomains + 3 {
		call(t, e, fmt.Sprint("unknown", i), 1, []string{"k1", "x"})
	}
	st.Flush()
	got := rec.service()
	names := 0
	for k := range got {
		if strings.HasSuffix(k, ".total_hits") {
			names++
		}
	}
	if names != 2*MaxValueNames+1 {
		t.Errorf("%d limit names, want %d", names, 2*MaxValueNames+1)
	}
	if v := got["ratelimit.service.rate_limit.dom._other.total_hits"]; v != 10 {
		t.Errorf("dom._other.total_hits = %d, want 10", v)
	}
	if v := got["ratelimit.service.rate_limit._other.domain_not_found"]; v != 3 {
		t.Errorf("_other.domain_not_found = %d, want 3", v)
	}
}

func TestInterceptor(t *testing.T) {
	rec := newRecorder()
	st := NewStore(rec)
	s := New(st, Tags{})
	icpt := s.UnaryInterceptor()
	for _, m := range []string{"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "/grpc.health.v1.Health/Check", "nomethod"} {
		_, _ = icpt(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: m}, func(context.Context, any) (any, error) { return nil, nil })
	}
	st.Flush()
	want := map[string]uint64{"ratelimit_server.ShouldRateLimit.total_requests": 2, "ratelimit_server.Check.total_requests": 1, "ratelimit_server.unknown.total_requests": 1}
	got := map[string]uint64{}
	for k, v := range rec.counters {
		if strings.HasPrefix(k, "ratelimit_server.") {
			got[k] = v
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
	if n := len(rec.timers["ratelimit_server.ShouldRateLimit.response_time"]); n != 2 {
		t.Errorf("%d response times, want 2", n)
	}
}

func TestSources(t *testing.T) {
	rec := newRecorder()
	st := NewStore(rec)
	s := New(st, Tags{})
	st.Flush()
	if _, ok := rec.gauges["runtime.num_values"]; ok {
		t.Error("runtime.num_values sent before any file was read")
	}
	s.FilesRead(3, false)
	s.FilesRead(0, true)
	p := s.Pool("redis_pool")
	p.Opened()
	p.Opened()
	p.Closed()
	st.Flush()
	want := map[string]uint64{"runtime.load_attempts": 2, "runtime.load_failures": 1, "ratelimit.redis_pool.cx_total": 2, "ratelimit.redis_pool.cx_local_close": 1}
	for k, v := range want {
		if rec.counters[k] != v {
			t.Errorf("%s = %d, want %d", k, rec.counters[k], v)
		}
	}
	if rec.gauges["runtime.num_values"] != 3 || rec.gauges["ratelimit.redis_pool.cx_active"] != 1 {
		t.Errorf("gauges num_values %d cx_active %d, want 3 and 1", rec.gauges["runtime.num_values"], rec.gauges["ratelimit.redis_pool.cx_active"])
	}
}

func TestLogSink(t *testing.T) {
	var buf bytes.Buffer
	l := NewLogSink(&buf)
	l.now = func() time.Time { return time.Unix(1764662400, 123456000) }
	l.Counter("a.b", 5)
	l.Timer("t", 1.5)
	l.Flush()
	want := `{"level":"debug","ts":1764662400.123456,"logger":"gostats.loggingsink","msg":"flushing counter","json":{"name":"a.b","type":"counter","value":"5.000000"}}
{"level":"debug","ts":1764662400.123456,"logger":"gostats.loggingsink","msg":"flushing timer","json":{"name":"t","type":"timer","value":"1.500000"}}
{"level":"debug","ts":1764662400.123456,"logger":"gostats.loggingsink","msg":"flushing all stats","json":{"type":"all stats","value":"0.000000"}}
`
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
	for line := range strings.Lines(buf.String()) {
		if !json.Valid([]byte(line)) {
			t.Errorf("not JSON: %q", line)
		}
	}
}

func TestRun(t *testing.T) {
	rec := newRecorder()
	st := NewStore(rec)
	c := st.Counter("c")
	c.Add(2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st.Run(ctx, time.Hour) // ends at once, with a last flush
	if rec.counters["c"] != 2 || rec.flushes != 1 {
		t.Errorf("after Run: c = %d, %d flushes; want 2, 1", rec.counters["c"], rec.flushes)
	}
}
