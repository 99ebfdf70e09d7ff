package rls

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
)

const testConfig = `
domain: test
descriptors:
  - key: key1
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: unl
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: wild
    value: "foo*"
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: wild
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: generic
    rate_limit: {unit: hour, requests_per_unit: 100, name: generic}
  - key: specific
    rate_limit:
      unit: hour
      requests_per_unit: 2
      name: specific
      replaces: [{name: generic}]
  - key: two
    rate_limits:
      - {algorithm: sliding_window, window: 30s, requests_per_unit: 5}
      - {unit: minute, requests_per_unit: 3}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: nested
    descriptors:
      - key: inner
        value: v
        rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 10}
`

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// setup is what a test's options configure: the engine and the Service.
type setup struct {
	eopts []engine.Option
	opts  []Option
}

// option configures a test's engine (withEngine) or Service (withService).
type option func(*setup)

func withEngine(o engine.Option) option { return func(s *setup) { s.eopts = append(s.eopts, o) } }
func withService(o Option) option       { return func(s *setup) { s.opts = append(s.opts, o) } }

// newTestService returns a Service deciding through store with cfg, and
// the options.
func newTestService(store sluice.Store, cfg *config.Config, opts ...option) *Service {
	var su setup
	for _, o := range opts {
		o(&su)
	}
	return New(engine.New(store, cfg, su.eopts...), su.opts...)
}

func newService(t testing.TB, opts ...option) (*Service, *clock) {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	// 10s into a minute, so that minute windows have 50s left.
	clk := &clock{t: time.Date(2026, 11, 29, 9, 0, 10, 0, time.UTC)}
	st := memstore.New(memstore.WithClock(clk.now))
	t.Cleanup(func() { st.Close() })
	return newTestService(st, cfg, append([]option{withEngine(engine.WithClock(clk.now))}, opts...)...), clk
}

func desc(kv ...string) *rlpb.RateLimitDescriptor {
	d := &rlpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func req(ds ...*rlpb.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: "test", Descriptors: ds}
}

var (
	minute20 = &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 20, Unit: pb.RateLimitResponse_RateLimit_MINUTE}
	ok       = pb.RateLimitResponse_OK
	over     = pb.RateLimitResponse_OVER_LIMIT
)

func status1(code pb.RateLimitResponse_Code, cl *pb.RateLimitResponse_RateLimit, remaining uint32, reset time.Duration) *pb.RateLimitResponse_DescriptorStatus {
	return &pb.RateLimitResponse_DescriptorStatus{Code: code, CurrentLimit: cl, LimitRemaining: remaining, DurationUntilReset: durationpb.New(reset)}
}

func call(t *testing.T, s *Service, r *pb.RateLimitRequest) *pb.RateLimitResponse {
	t.Helper()
	resp, err := s.ShouldRateLimit(context.Background(), r)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", r, err)
	}
	return resp
}

func diff(t *testing.T, what string, got, want *pb.RateLimitResponse) {
	t.Helper()
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("%s: response mismatch (-want +got):\n%s", what, d)
	}
}

// The reference's integration test: 20 per minute answers 19, 18, … 0, then
// OVER_LIMIT, with duration_until_reset falling.
func TestTwentyPerMinute(t *testing.T) {
	s, clk := newService(t)
	for i := range 20 {
		got := call(t, s, req(desc("key1", "a")))
		reset := 50*time.Second - time.Duration(i)*time.Second
		want := &pb.RateLimitResponse{OverallCode: ok, Statuses: []*pb.RateLimitResponse_DescriptorStatus{status1(ok, minute20, uint32(19-i), reset)}}
		diff(t, "call "+string(rune('0'+i)), got, want)
		clk.add(time.Second)
	}
	// 30s into the minute: 30s left.
	got := call(t, s, req(desc("key1", "a")))
	want := &pb.RateLimitResponse{OverallCode: over, Statuses: []*pb.RateLimitResponse_DescriptorStatus{status1(over, minute20, 0, 30*time.Second)}}
	diff(t, "21st call", got, want)
	// Another value has its own counter.
	got = call(t, s, req(desc("key1", "b")))
	if got.OverallCode != ok || got.Statuses[0].LimitRemaining != 19 {
		t.Errorf("key1=b: got %v, want OK with 19 remaining", got)
	}
	// duration_until_reset is whole seconds, rounded up, as the reference's.
	clk.add(500 * time.Millisecond)
	got = call(t, s, req(desc("key1", "c")))
	if reset := got.Statuses[0].DurationUntilReset.AsDuration(); reset != 30*time.Second {
		t.Errorf("29.5s before the window's end: duration_until_reset %v, want 30s", reset)
	}
	// The next window starts afresh.
	clk.add(29500 * time.Millisecond)
	got = call(t, s, req(desc("key1", "a")))
	want = &pb.RateLimitResponse{OverallCode: ok, Statuses: []*pb.RateLimitResponse_DescriptorStatus{status1(ok, minute20, 19, time.Minute)}}
	diff(t, "next window", got, want)
}

func TestUnmatchedUnlimitedUnknownDomain(t *testing.T) {
	s, _ := newService(t)
	got := call(t, s, req(desc("nope", "x"), desc("unl", "x"), desc("nested", "a", "inner", "other")))
	want := &pb.RateLimitResponse{OverallCode: ok, Statuses: []*pb.RateLimitResponse_DescriptorStatus{
		{Code: ok},
		{Code: ok, LimitRemaining: math.MaxUint32},
		{Code: ok},
	}}
	diff(t, "unmatched and unlimited", got, want)

	got = call(t, s, &pb.RateLimitRequest{Domain: "other", Descriptors: []*rlpb.RateLimitDescriptor{desc("key1", "a"), desc("key1", "a")}})
	want = &pb.RateLimitResponse{OverallCode: ok, Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: ok}, {Code: ok}}}
	diff(t, "unknown domain", got, want)
}

func TestShadowMode(t *testing.T) {
	obs := &recorder{}
	s, _ := newService(t, withEngine(engine.WithObserver(obs)))
	shadow := &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 2, Unit: pb.RateLimitResponse_RateLimit_MINUTE}
	wantRemaining := []uint32{1, 0, 0, 0}
	for i, rem := range wantRemaining {
		got := call(t, s, req(desc("shadow", "x")))
		want := &pb.RateLimitResponse{OverallCode: ok, Statuses: []*pb.RateLimitResponse_DescriptorStatus{status1(ok, shadow, rem, 50*time.Second)}}
		diff(t, "shadow call "+string(rune('1'+i)), got, want)
	}
	if got, want := obs.count("test.shadow", engine.OutcomeShadowOverLimit), 2; got != want {
		t.Errorf("shadow_over_limit decisions = %d, want %d", got, want)
	}
}

func TestQuotaMode(t *testing.T) {
	s, _ := newService(t)
	call(t, s, req(desc("quota", "x")))
	got := call(t, s, req(desc("quota", "x"), desc("key1", "a")))
	if got.OverallCode != ok {
		t.Errorf("overall = %v, want OK: a quota_mode limit does not deny", got.OverallCode)
	}
	// The reference keeps an over-limit quota_mode descriptor OK, with its
	// limit, nothing remaining and no reset.
	q := got.Statuses[0]
	if q.Code != ok || q.CurrentLimit.GetRequestsPerUnit() != 1 || q.LimitRemaining != 0 || q.DurationUntilReset != nil {
		t.Errorf("quota status = %v, want OK, current_limit 1 per minute, remaining 0, no duration_until_reset", q)
	}
	if got.Statuses[1].Code != ok || got.Statuses[1].LimitRemaining != 19 {
		t.Errorf("key1 status = %v, want OK with 19 remaining", got.Statuses[1])
	}
}

func TestWildcard(t *testing.T) {
	s, _ := newService(t)
	// foo* matches foobar and foo (1 per minute each value); others get the
	// key-only default (3 per minute).
	tests := []struct {
		value     string
		wantLimit uint32
	}{
		{"foobar", 1}, {"foo", 1}, {"bar", 3}, {"", 3},
	}
	for _, tt := range tests {
		got := call(t, s, req(desc("wild", tt.value)))
		if cl := got.Statuses[0].GetCurrentLimit(); cl.GetRequestsPerUnit() != tt.wantLimit {
			t.Errorf("wild=%q: requests_per_unit = %d, want %d", tt.value, cl.GetRequestsPerUnit(), tt.wantLimit)
		}
	}
	// Wildcard matches count per actual value.
	if got := call(t, s, req(desc("wild", "foobaz"))); got.OverallCode != ok {
		t.Errorf("wild=foobaz after wild=foobar: %v, want OK (own counter)", got.OverallCode)
	}
	if got := call(t, s, req(desc("wild", "foobar"))); got.OverallCode != over {
		t.Errorf("second wild=foobar: %v, want OVER_LIMIT", got.OverallCode)
	}
}

func TestReplaces(t *testing.T) {
	s, _ := newService(t)
	// specific replaces generic: generic is not applied (nor counted).
	got := call(t, s, req(desc("generic", "x"), desc("specific", "y")))
	want := &pb.RateLimitResponse{OverallCode: ok, Statuses: []*pb.RateLimitResponse_DescriptorStatus{
		{Code: ok},
		status1(ok, &pb.RateLimitResponse_RateLimit{Name: "specific", RequestsPerUnit: 2, Unit: pb.RateLimitResponse_RateLimit_HOUR}, 1, 59*time.Minute+50*time.Second),
	}}
	diff(t, "replaced", got, want)
	// Alone, generic applies and was never counted above.
	got = call(t, s, req(desc("generic", "x")))
	if got.Statuses[0].LimitRemaining != 99 {
		t.Errorf("generic alone: remaining %d, want 99", got.Statuses[0].LimitRemaining)
	}
}

func TestHitsAddend(t *testing.T) {
	s, _ := newService(t)
	r := req(desc("key1", "a"))
	r.HitsAddend = 5
	if got := call(t, s, r); got.Statuses[0].LimitRemaining != 15 {
		t.Errorf("hits_addend 5: remaining %d, want 15", got.Statuses[0].LimitRemaining)
	}
	d := desc("key1", "a")
	d.HitsAddend = wrapperspb.UInt64(10) // per descriptor wins over the request's
	r = req(d)
	r.HitsAddend = 1
	if got := call(t, s, r); got.Statuses[0].LimitRemaining != 5 {
		t.Errorf("descriptor hits_addend 10: remaining %d, want 5", got.Statuses[0].LimitRemaining)
	}
	d = desc("key1", "a")
	d.HitsAddend = wrapperspb.UInt64(0) // a peek
	if got := call(t, s, req(d)); got.OverallCode != ok || got.Statuses[0].LimitRemaining != 5 {
		t.Errorf("descriptor hits_addend 0: %v, want OK with 5 remaining", got)
	}
	r = req(desc("key1", "a"))
	r.HitsAddend = 6 // more than the 5 left: denied, nothing counted
	if got := call(t, s, r); got.OverallCode != over {
		t.Errorf("hits_addend 6 with 5 left: %v, want OVER_LIMIT", got.OverallCode)
	}
	r.HitsAddend = 1000 // more than the limit could ever admit
	if got := call(t, s, r); got.OverallCode != over || got.Statuses[0].Code != over {
		t.Errorf("hits_addend 1000 on 20/minute: %v, want OVER_LIMIT", got)
	}
	r.HitsAddend = 5
	if got := call(t, s, r); got.OverallCode != ok || got.Statuses[0].LimitRemaining != 0 {
		t.Errorf("hits_addend 5 with 5 left: %v, want OK with 0 remaining", got)
	}
}

// sluice's difference: when one descriptor is over its limit, the others
// are not counted either.
func TestAllOrNothing(t *testing.T) {
	s, _ := newService(t)
	call(t, s, req(desc("wild", "foo")))                           // uses up wild=foo (1 per minute)
	got := call(t, s, req(desc("key1", "a"), desc("wild", "foo"))) // denied by wild=foo
	if got.OverallCode != over || got.Statuses[0].Code != ok || got.Statuses[1].Code != over {
		t.Fatalf("got %v, want OVER_LIMIT with key1 OK and wild OVER_LIMIT", got)
	}
	if got.Statuses[0].LimitRemaining != 20 {
		t.Errorf("key1 remaining in the denied call = %d, want 20 (not counted)", got.Statuses[0].LimitRemaining)
	}
	if got := call(t, s, req(desc("key1", "a"))); got.Statuses[0].LimitRemaining != 19 {
		t.Errorf("key1 afterwards: remaining %d, want 19", got.Statuses[0].LimitRemaining)
	}
}

func TestTwoLimitsOnOneNode(t *testing.T) {
	s, _ := newService(t)
	perMin := &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 3, Unit: pb.RateLimitResponse_RateLimit_MINUTE}
	// The per-minute limit (3) is the tighter: it reports, then denies.
	for i, rem := range []uint32{2, 1, 0} {
		got := call(t, s, req(desc("two", "x")))
		if got.OverallCode != ok || !cmp.Equal(got.Statuses[0].CurrentLimit, perMin, protocmp.Transform()) || got.Statuses[0].LimitRemaining != rem {
			t.Errorf("call %d: %v, want OK with %v remaining %d", i+1, got, perMin, rem)
		}
	}
	got := call(t, s, req(desc("two", "x")))
	if got.OverallCode != over || !cmp.Equal(got.Statuses[0].CurrentLimit, perMin, protocmp.Transform()) {
		t.Errorf("4th call: %v, want OVER_LIMIT by %v", got, perMin)
	}
}

func lim(rate int, period time.Duration) sluice.Limit {
	return sluice.Limit{Algorithm: sluice.FixedWindow, Rate: rate, Period: period}
}

func TestCurrentLimitOfWindows(t *testing.T) {
	tests := []struct {
		give config.Rule
		want *pb.RateLimitResponse_RateLimit
	}{
		{config.Rule{Name: "a", ConfiguredName: "a", Unit: "MINUTE", Limit: lim(20, time.Minute)}, &pb.RateLimitResponse_RateLimit{Name: "a", RequestsPerUnit: 20, Unit: pb.RateLimitResponse_RateLimit_MINUTE}},
		{config.Rule{Name: "b", ConfiguredName: "b", Unit: "SECOND", Limit: lim(1, 10*time.Second)}, &pb.RateLimitResponse_RateLimit{Name: "b", RequestsPerUnit: 1, Unit: pb.RateLimitResponse_RateLimit_SECOND, UnitMultiplier: wrapperspb.UInt32(10)}},
		{config.Rule{Name: "c", ConfiguredName: "c", Limit: lim(5, 30*time.Second)}, &pb.RateLimitResponse_RateLimit{Name: "c", RequestsPerUnit: 5, Unit: pb.RateLimitResponse_RateLimit_SECOND, UnitMultiplier: wrapperspb.UInt32(30)}},
		{config.Rule{Name: "d", ConfiguredName: "d", Limit: lim(9, 2*time.Hour)}, &pb.RateLimitResponse_RateLimit{Name: "d", RequestsPerUnit: 9, Unit: pb.RateLimitResponse_RateLimit_HOUR, UnitMultiplier: wrapperspb.UInt32(2)}},
		{config.Rule{Name: "e", ConfiguredName: "e", Limit: lim(3, 7*24*time.Hour)}, &pb.RateLimitResponse_RateLimit{Name: "e", RequestsPerUnit: 3, Unit: pb.RateLimitResponse_RateLimit_WEEK}},
		{config.Rule{Name: "f", ConfiguredName: "f", Limit: lim(3, 1500*time.Millisecond)}, &pb.RateLimitResponse_RateLimit{Name: "f", RequestsPerUnit: 2, Unit: pb.RateLimitResponse_RateLimit_SECOND}},
		{config.Rule{Name: "g", ConfiguredName: "g", Limit: lim(1, 100*time.Millisecond)}, &pb.RateLimitResponse_RateLimit{Name: "g", RequestsPerUnit: 10, Unit: pb.RateLimitResponse_RateLimit_SECOND}},
		{config.Rule{Name: "h", ConfiguredName: "h", Limit: lim(0, 1500*time.Millisecond), Deny: true}, &pb.RateLimitResponse_RateLimit{Name: "h", RequestsPerUnit: 0, Unit: pb.RateLimitResponse_RateLimit_SECOND}},
		{config.Rule{Name: "i", ConfiguredName: "i", Limit: lim(7, 3*time.Millisecond)}, &pb.RateLimitResponse_RateLimit{Name: "i", RequestsPerUnit: 2334, Unit: pb.RateLimitResponse_RateLimit_SECOND}},
	}
	for _, tt := range tests {
		if d := cmp.Diff(tt.want, CurrentLimit(&tt.give), protocmp.Transform()); d != "" {
			t.Errorf("CurrentLimit(%v %q) mismatch (-want +got):\n%s", tt.give.Limit, tt.give.Unit, d)
		}
	}
}

func TestInvalidArgument(t *testing.T) {
	s, _ := newService(t)
	tests := []struct {
		name string
		give *pb.RateLimitRequest
	}{
		{"empty domain", &pb.RateLimitRequest{Descriptors: []*rlpb.RateLimitDescriptor{desc("key1", "a")}}},
		{"no descriptors", &pb.RateLimitRequest{Domain: "test"}},
		{"empty descriptor", req(desc("key1", "a"), &rlpb.RateLimitDescriptor{})},
		{"nil descriptor", req(nil)},
		{"override with no unit", req(&rlpb.RateLimitDescriptor{Entries: desc("key1", "a").Entries, Limit: &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3}})},
	}
	for _, tt := range tests {
		_, err := s.ShouldRateLimit(context.Background(), tt.give)
		if got := status.Code(err); got != codes.InvalidArgument {
			t.Errorf("%s: code %v (%v), want InvalidArgument", tt.name, got, err)
		}
	}
}

func TestOverride(t *testing.T) {
	s, _ := newService(t)
	d := desc("key1", "a")
	d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_HOUR}
	for i, want := range []pb.RateLimitResponse_Code{ok, ok, over} {
		if got := call(t, s, req(d)); got.OverallCode != want || got.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 2 {
			t.Errorf("override call %d: %v, want %v under 2 per hour", i+1, got, want)
		}
	}
	if got := call(t, s, req(desc("key1", "a"))); got.Statuses[0].LimitRemaining != 19 {
		t.Errorf("configured key1=a after the override: remaining %d, want 19 (another unit: another counter)", got.Statuses[0].LimitRemaining)
	}
	// In the configured limit's unit, the override counts on its counter,
	// as the reference's (domain, entries, window) key does.
	d = desc("key1", "b")
	d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE}
	call(t, s, req(d))
	if got := call(t, s, req(d)); got.Statuses[0].LimitRemaining != 1 {
		t.Errorf("second call under a 3 per minute override: remaining %d, want 1", got.Statuses[0].LimitRemaining)
	}
	if got := call(t, s, req(desc("key1", "b"))); got.Statuses[0].LimitRemaining != 17 {
		t.Errorf("configured key1=b (20 per minute) after two calls under a per-minute override: remaining %d, want 17 (one counter)", got.Statuses[0].LimitRemaining)
	}
}

func TestResponseHeaders(t *testing.T) {
	s, _ := newService(t, withService(WithResponseHeaders(true)))
	got := call(t, s, req(desc("key1", "a"), desc("wild", "foo")))
	want := []string{"RateLimit-Limit: 1", "RateLimit-Remaining: 0", "RateLimit-Reset: 50"}
	hs := headerLines(got)
	if d := cmp.Diff(want, hs); d != "" {
		t.Errorf("headers mismatch (-want +got):\n%s", d)
	}
}

// With several descriptors over, the headers describe the last one, as the
// reference's.
func TestResponseHeadersLastOver(t *testing.T) {
	s, _ := newService(t, withService(WithResponseHeaders(true)))
	call(t, s, req(desc("wild", "foo")))
	call(t, s, req(desc("quota", "x")))
	big := desc("key1", "a")
	big.HitsAddend = wrapperspb.UInt64(21)
	got := call(t, s, req(desc("wild", "foo"), big, desc("quota", "x")))
	want := []string{"RateLimit-Limit: 20", "RateLimit-Remaining: 0", "RateLimit-Reset: 50"}
	hs := headerLines(got)
	if d := cmp.Diff(want, hs); d != "" {
		t.Errorf("headers mismatch (-want +got):\n%s", d)
	}
}

func TestSetConfig(t *testing.T) {
	s, _ := newService(t)
	c, err := config.Parse("new.yaml", []byte("domain: test\ndescriptors:\n  - key: key1\n    rate_limit: {unit: second, requests_per_unit: 7}\n"))
	if err != nil {
		t.Fatal(err)
	}
	old := call(t, s, req(desc("key1", "a"))).Statuses[0].CurrentLimit.GetRequestsPerUnit()
	s.Engine().SetConfig(c)
	got := call(t, s, req(desc("key1", "a")))
	if got.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 7 || old == 7 {
		t.Errorf("before SetConfig %d, after: %v, want 7 per second", old, got.Statuses[0])
	}
	// The current_limit cache is the new configuration's: the old one's
	// rules are not kept across reloads.
	if lc := s.limits.Load(); lc == nil || lc.cfg != c {
		t.Errorf("current_limit cache of %p, want the new configuration's %p", lc.cfg, c)
	}
}

type recorder struct {
	engine.NopObserver
	mu sync.Mutex
	n  map[string]int
}

func (r *recorder) Decided(rep engine.Report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[rep.Rule+"/"+string(rep.Outcome)]++
}

func (r *recorder) count(rule string, res engine.Outcome) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[rule+"/"+string(res)]
}

// TestDenyRule: requests_per_unit: 0 (the reference's "black list IP")
// answers OVER_LIMIT without a store call, and blocks the whole request.
func TestDenyRule(t *testing.T) {
	s, _ := newService(t)
	got := call(t, s, req(desc("blocked", "10.0.0.1"), desc("key1", "a")))
	if got.OverallCode != over {
		t.Fatalf("blocked: overall %v, want OVER_LIMIT", got.OverallCode)
	}
	st := got.Statuses[0]
	if st.Code != over || st.LimitRemaining != 0 || st.CurrentLimit.GetRequestsPerUnit() != 0 || st.CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_SECOND {
		t.Errorf("blocked status = %v, want OVER_LIMIT, 0 remaining, 0 per SECOND", st)
	}
	if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > time.Second {
		t.Errorf("blocked duration_until_reset = %v, want within the second", d)
	}
	// Only the blocked descriptor is over; the other reports a peek, and
	// was not counted: all-or-nothing.
	if st := got.Statuses[1]; st.Code != ok || st.LimitRemaining != 20 {
		t.Errorf("key1 status beside a blocked descriptor = %v, want OK with 20 remaining (a peek)", st)
	}
	if got := call(t, s, req(desc("key1", "a"))); got.Statuses[0].LimitRemaining != 19 {
		t.Errorf("key1 after a blocked request: remaining %d, want 19", got.Statuses[0].LimitRemaining)
	}
	// A cost of 0 asks for nothing: admitted, as the reference's 0 hits on
	// a limit of 0.
	zero := desc("blocked", "10.0.0.1")
	zero.HitsAddend = wrapperspb.UInt64(0)
	got = call(t, s, req(zero, desc("key1", "a")))
	if got.OverallCode != ok || got.Statuses[0].Code != ok || got.Statuses[0].LimitRemaining != 0 || got.Statuses[1].LimitRemaining != 18 {
		t.Errorf("blocked with hits_addend 0 = %v, want OK, blocked with 0 remaining, key1 counted (18)", got)
	}
}

// A descriptor sent twice counts twice on one counter: costs that together
// exceed its capacity are OVER_LIMIT (the reference denies the second), not
// a store error.
func TestDuplicateDescriptorOverCapacity(t *testing.T) {
	s, _ := newService(t)
	got, err := s.ShouldRateLimit(context.Background(), req(desc("wild", "foo"), desc("wild", "foo"))) // 1 per minute
	if err != nil {
		t.Fatalf("the same 1-per-minute descriptor twice: %v, want a decision", err)
	}
	if got.OverallCode != over || got.Statuses[0].Code != ok || got.Statuses[0].LimitRemaining != 1 || got.Statuses[1].Code != over {
		t.Errorf("the same 1-per-minute descriptor twice = %v, want OVER_LIMIT: the first OK (a peek, 1 remaining), the second OVER_LIMIT", got)
	}
	if got := call(t, s, req(desc("wild", "foo"))); got.OverallCode != ok {
		t.Errorf("wild=foo afterwards = %v, want OK: the denied request counted nothing", got)
	}
}

// A fixed window with nothing counted resets with its window: a peek on a
// fresh key reports the window's end, as the reference does.
func TestUntouchedWindowReset(t *testing.T) {
	s, _ := newService(t) // 10s into the minute
	d := desc("key1", "fresh")
	d.HitsAddend = wrapperspb.UInt64(0)
	got := call(t, s, req(d))
	want := &pb.RateLimitResponse{OverallCode: ok, Statuses: []*pb.RateLimitResponse_DescriptorStatus{status1(ok, minute20, 20, 50*time.Second)}}
	diff(t, "peek on a fresh key", got, want)
	// Above the capacity on a fresh key: over, and the same reset.
	d.HitsAddend = wrapperspb.UInt64(21)
	got = call(t, s, req(d))
	want = &pb.RateLimitResponse{OverallCode: over, Statuses: []*pb.RateLimitResponse_DescriptorStatus{status1(over, minute20, 0, 50*time.Second)}}
	diff(t, "21 on a fresh 20-per-minute key", got, want)
}

// When a request is denied before the store decides (a cost above a
// capacity), a descriptor that could not admit its own cost either is
// OVER_LIMIT too, as the reference reports it.
func TestDeniedEarlyMarksFullDescriptors(t *testing.T) {
	s, _ := newService(t)
	call(t, s, req(desc("wild", "foo"))) // full: 1 per minute
	big := desc("key1", "a")
	big.HitsAddend = wrapperspb.UInt64(21) // above 20 per minute
	got := call(t, s, req(desc("wild", "foo"), big, desc("wild", "fooz")))
	if got.OverallCode != over || got.Statuses[0].Code != over || got.Statuses[1].Code != over || got.Statuses[2].Code != ok || got.Statuses[2].LimitRemaining != 1 {
		t.Errorf("got %v, want wild=foo (full) and key1 (21 of 20) OVER_LIMIT, wild=fooz OK with 1 remaining", got)
	}
	// The same counter twice: the second could not admit its cost after
	// the first's, so it is over too.
	ten := desc("key1", "b")
	ten.HitsAddend = wrapperspb.UInt64(10)
	call(t, s, req(ten)) // 10 of 20 left
	six := desc("key1", "b")
	six.HitsAddend = wrapperspb.UInt64(6)
	got = call(t, s, req(big, six, six))
	if got.Statuses[1].Code != ok || got.Statuses[1].LimitRemaining != 10 || got.Statuses[2].Code != over {
		t.Errorf("got %v, want key1=b OK (a peek, 10 remaining) and then OVER_LIMIT (6 after 6, with 10 left)", got)
	}
}

// WithShadowMode: the request is answered OK, the statuses and headers still
// tell the denying descriptor, and nothing of the denied request counts.
func TestGlobalShadowMode(t *testing.T) {
	s, _ := newService(t, withEngine(engine.WithShadowMode(true)), withService(WithResponseHeaders(true)))
	call(t, s, req(desc("wild", "foo"))) // full: 1 per minute
	got := call(t, s, req(desc("key1", "a"), desc("wild", "foo")))
	if got.OverallCode != ok || got.Statuses[0].Code != ok || got.Statuses[1].Code != over {
		t.Errorf("got %v, want overall OK, key1 OK, wild=foo still OVER_LIMIT", got)
	}
	hs := headerLines(got)
	if d := cmp.Diff([]string{"RateLimit-Limit: 1", "RateLimit-Remaining: 0", "RateLimit-Reset: 50"}, hs); d != "" {
		t.Errorf("headers (-want +got):\n%s", d)
	}
	if got := call(t, s, req(desc("key1", "a"))); got.Statuses[0].LimitRemaining != 19 {
		t.Errorf("key1 afterwards: remaining %d, want 19 (the shadowed denial counted nothing)", got.Statuses[0].LimitRemaining)
	}
}

// WithQuotaMode: every limit reports over its limit without denying.
func TestGlobalQuotaMode(t *testing.T) {
	s, _ := newService(t, withEngine(engine.WithQuotaMode(true)))
	call(t, s, req(desc("wild", "foo")))
	got := call(t, s, req(desc("wild", "foo"), desc("key1", "a")))
	q := got.Statuses[0]
	if got.OverallCode != ok || q.Code != ok || q.LimitRemaining != 0 || q.DurationUntilReset != nil || got.Statuses[1].LimitRemaining != 19 {
		t.Errorf("got %v, want OK: wild=foo OK with 0 remaining and no reset (quota), key1 counted (19)", got)
	}
	// A shadow_mode limit over its limit is OK already, and keeps its
	// reset: quota mode leaves it as it is, as the reference's.
	for range 2 {
		call(t, s, req(desc("shadow", "x")))
	}
	got = call(t, s, req(desc("shadow", "x")))
	if st := got.Statuses[0]; st.Code != ok || st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() != 50*time.Second {
		t.Errorf("shadow over its limit under quota mode = %v, want OK, 0 remaining, reset 50s", st)
	}
}

func TestHeaderNames(t *testing.T) {
	s, _ := newService(t, withService(WithResponseHeaders(true)), withService(WithHeaderNames("X-RL-Limit", "", "X-RL-Reset")))
	got := call(t, s, req(desc("key1", "a")))
	hs := headerLines(got)
	if d := cmp.Diff([]string{"X-RL-Limit: 20", "RateLimit-Remaining: 19", "X-RL-Reset: 50"}, hs); d != "" {
		t.Errorf("headers (-want +got):\n%s", d)
	}
}

// headerLines is resp's response_headers_to_add as "Name: value" lines.
func headerLines(resp *pb.RateLimitResponse) []string {
	var hs []string
	for _, h := range resp.ResponseHeadersToAdd {
		hs = append(hs, h.Key+": "+h.Value)
	}
	return hs
}
