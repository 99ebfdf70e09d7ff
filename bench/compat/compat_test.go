package compat

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/window"
)

// domain is the domain of testdata/compat.yaml.
const domain = "compat"

// defaultSequences is the number of random sequences per store.
const defaultSequences = 1500

// TestCompat runs sluice on its memory store and on Redis, each next to its
// own reference, and compares them: error behaviour, documented
// differences, one case per configuration feature, the differences this
// test found and sluice fixed, and random sequences.
func TestCompat(t *testing.T) {
	referenceBin(t)
	yaml, err := filepath.Abs(filepath.Join("testdata", "compat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	seed, sequences := randomSettings(t)
	t.Logf("seed %d (replay with SLUICE_COMPAT_SEED=%d), %d random sequences per store", seed, seed, sequences)
	// SLUICE_COMPAT_SLUICE_CONFIG gives sluice another YAML than the
	// reference: to see that the comparison fails when they differ.
	slYAML := yaml
	if s := os.Getenv("SLUICE_COMPAT_SLUICE_CONFIG"); s != "" {
		if slYAML, err = filepath.Abs(s); err != nil {
			t.Fatal(err)
		}
		t.Logf("sluice runs with %s, the reference with %s", slYAML, yaml)
	}

	for k, st := range compatStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ref := startReference(t, yaml)
			sl := startSluice(t, "sluice "+st.name, slYAML, st.flags(t)...)
			c := newChecker(ref, sl)
			tok := tokens(rand.New(rand.NewPCG(seed, uint64(k))))
			t.Run("errors", func(t *testing.T) { testErrors(t, c) })
			t.Run("documented", func(t *testing.T) { testDocumented(t, c, tok) })
			t.Run("cases", func(t *testing.T) { testCases(t, c, tok) })
			t.Run("share_threshold at the top level", func(t *testing.T) { testShareTop(t, c, tok) })
			t.Run("fixed", func(t *testing.T) { testFixed(t, c, tok) })
			t.Run("header names", func(t *testing.T) { testHeaderNames(t, c, tok) })
			t.Run("concurrency", func(t *testing.T) { testConcurrency(t, c, tok) })
			t.Run("random", func(t *testing.T) {
				testRandom(t, c, rand.New(rand.NewPCG(seed, 100+uint64(k))), sequences)
			})
			c.summary(t)
			// The same through POST /json: the HTTP answers to malformed
			// requests, then the cases, the fixed differences and a fifth
			// of the random sequences, compared as over gRPC.
			t.Run("json", func(t *testing.T) {
				cj := newChecker(ref, sl)
				cj.json = true
				t.Run("http", func(t *testing.T) { testHTTP(t, cj, tok) })
				t.Run("cases", func(t *testing.T) { testCases(t, cj, tok) })
				t.Run("fixed", func(t *testing.T) { testFixed(t, cj, tok) })
				t.Run("random", func(t *testing.T) {
					testRandom(t, cj, rand.New(rand.NewPCG(seed, 200+uint64(k))), max(sequences/5, 1))
				})
				cj.summary(t)
			})
		})
	}
}

// randomSettings returns the seed of the random sequences
// (SLUICE_COMPAT_SEED, else the time) and their number per store
// (SLUICE_COMPAT_SEQUENCES, else defaultSequences).
func randomSettings(t *testing.T) (seed uint64, sequences int) {
	t.Helper()
	seed, sequences = uint64(time.Now().UnixNano()), defaultSequences
	var err error
	if s := os.Getenv("SLUICE_COMPAT_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("SLUICE_COMPAT_SEED: %v", err)
		}
	}
	if s := os.Getenv("SLUICE_COMPAT_SEQUENCES"); s != "" {
		if sequences, err = strconv.Atoi(s); err != nil {
			t.Fatalf("SLUICE_COMPAT_SEQUENCES: %v", err)
		}
	}
	return seed, sequences
}

// compatStores are the stores sluice runs on next to the reference: its
// memory store, and Redis (a redis-server of the test's own).
var compatStores = []struct {
	name  string
	flags func(t *testing.T) []string
}{
	{"memory", func(*testing.T) []string { return nil }},
	{"redis", func(t *testing.T) []string {
		rd := redistest.Server(t)
		return []string{"--redis", "redis://" + rd.Addr, "--redis-timeout", "2s"}
	}},
}

// sharedSince is before the services' first request: the shared counters
// of testdata/compat.yaml (a day's) count from there.
var sharedSince = time.Now()

// tokens returns a generator of fresh descriptor values, so that no two
// sequences share a counter.
func tokens(r *rand.Rand) func() string {
	return func() string { return fmt.Sprintf("r%012x", r.Uint64()>>16) }
}

// awayFromBoundary waits, when a minute boundary (and so every hour and day
// boundary) is less than 2 s away, until it has passed: a sequence must see
// one window in both services. A random sequence that a boundary
// interrupts anyway is abandoned when it differs (checker.step).
func awayFromBoundary() {
	now := time.Now()
	if left := now.Truncate(time.Minute).Add(time.Minute).Sub(now); left < 2*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
}

// inOneMinute runs body, whose checks report to w, within one minute
// window (and so one hour and one day): body draws fresh values with tok,
// and runs again, on new ones, only when the clock proves that a boundary
// passed during it (internal/testserver/window).
func inOneMinute(t *testing.T, body func(w window.TB)) {
	t.Helper()
	window.Run(t, time.Minute, 5*time.Second, func(f *window.Findings, _ int) { body(f) })
}

// secondMargin is the least time left in the current second at which a
// random sequence on a per-second limit starts: a sequence takes a few
// milliseconds (one that a boundary interrupts anyway is abandoned when it
// differs).
const secondMargin = 200 * time.Millisecond

// awayFromSecondBoundary waits, when a second boundary is less than
// secondMargin away, until it has passed.
func awayFromSecondBoundary() {
	now := time.Now()
	if left := now.Truncate(time.Second).Add(time.Second).Sub(now); left < secondMargin {
		time.Sleep(left + 5*time.Millisecond)
	}
}

// atSecondStart waits for the start of the next second, so that a case on
// a per-second limit has the whole second (a busy machine's case takes
// more than a few milliseconds).
func atSecondStart() {
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(time.Second).Sub(now) + 2*time.Millisecond)
}

// perSecond reports whether a request of reqs has a descriptor on a
// per-second limit (testdata/compat.yaml's sec, or an override in seconds).
func perSecond(reqs ...*pb.RateLimitRequest) bool {
	for _, r := range reqs {
		for _, x := range r.Descriptors {
			if x.Limit != nil && x.Limit.Unit == typev3.RateLimitUnit_SECOND ||
				x.Limit == nil && len(x.Entries) == 1 && x.Entries[0].Key == "sec" {
				return true
			}
		}
	}
	return false
}

// d builds a descriptor from key, value pairs.
func d(kv ...string) *rlpb.RateLimitDescriptor {
	out := &rlpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		out.Entries = append(out.Entries, &rlpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// withHits sets a descriptor's own hits_addend.
func withHits(x *rlpb.RateLimitDescriptor, n uint64) *rlpb.RateLimitDescriptor {
	x = proto.Clone(x).(*rlpb.RateLimitDescriptor)
	x.HitsAddend = wrapperspb.UInt64(n)
	return x
}

// overrideWeek is the override unit 7: RateLimitUnit (envoy.type.v3) has no
// WEEK, but both services read an override's unit as the response's Unit,
// where 7 is WEEK (the reference casts it: config_impl.go GetLimit).
const overrideWeek = typev3.RateLimitUnit(pb.RateLimitResponse_RateLimit_WEEK)

// withLimit sets a descriptor's limit override.
func withLimit(x *rlpb.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit) *rlpb.RateLimitDescriptor {
	x = proto.Clone(x).(*rlpb.RateLimitDescriptor)
	x.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return x
}

func rq(ds ...*rlpb.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, Descriptors: ds}
}

func rqHits(hits uint32, ds ...*rlpb.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits}
}

// testErrors: requests both services must reject. The codes differ by
// design (COMPAT.md item 3): the reference answers Unknown (a panic
// recovered in ShouldRateLimit), sluice InvalidArgument; the messages are
// the reference's.
func testErrors(t *testing.T, c *checker) {
	for _, tc := range []struct {
		name string
		req  *pb.RateLimitRequest
		msg  string
	}{
		{"empty domain", &pb.RateLimitRequest{Descriptors: []*rlpb.RateLimitDescriptor{d("plain", "x")}}, "rate limit domain must not be empty"},
		{"no descriptors", &pb.RateLimitRequest{Domain: domain}, "rate limit descriptor list must not be empty"},
		{"no descriptors, unknown domain", &pb.RateLimitRequest{Domain: "compat-unknown"}, "rate limit descriptor list must not be empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, refErr := c.ref.should(tc.req)
			_, slErr := c.sl.should(tc.req)
			if got := status.Code(refErr); got != codes.Unknown || !strings.Contains(status.Convert(refErr).Message(), tc.msg) {
				t.Errorf("reference: %v, want Unknown %q", refErr, tc.msg)
			}
			if got := status.Code(slErr); got != codes.InvalidArgument || !strings.Contains(status.Convert(slErr).Message(), tc.msg) {
				t.Errorf("sluice: %v, want InvalidArgument %q", slErr, tc.msg)
			}
		})
	}
}

// call sends req to both services and fails the test on an error.
func call(t *testing.T, c *checker, req *pb.RateLimitRequest) (ref, sl *pb.RateLimitResponse) {
	t.Helper()
	ref, err := c.ask(c.ref, req)
	if err != nil {
		t.Fatalf("reference: %s: %v", text(req), err)
	}
	sl, err = c.ask(c.sl, req)
	if err != nil {
		t.Fatalf("sluice: %s: %v", text(req), err)
	}
	return ref, sl
}

// statusIs checks one status's code and limit_remaining.
func statusIs(t window.TB, who string, resp *pb.RateLimitResponse, i int, code pb.RateLimitResponse_Code, remaining uint32) {
	t.Helper()
	st := resp.GetStatuses()[i]
	if st.GetCode() != code || st.GetLimitRemaining() != remaining {
		t.Errorf("%s: status %d is %v remaining %d, want %v remaining %d\n%s", who, i, st.GetCode(), st.GetLimitRemaining(), code, remaining, text(resp))
	}
}

// testDocumented checks each side of the differences COMPAT.md documents,
// with exact values.
func testDocumented(t *testing.T, c *checker, tok func() string) {
	t.Run("no entries (item 3)", func(t *testing.T) {
		req := rq(d("plain", tok()), &rlpb.RateLimitDescriptor{})
		ref, refErr := c.ref.should(req)
		_, slErr := c.sl.should(req)
		if refErr != nil || ref.OverallCode != ok || len(ref.Statuses) != 2 || ref.Statuses[1].CurrentLimit != nil {
			t.Errorf("reference: %v %s, want OK with no limit for the empty descriptor", refErr, text(ref))
		}
		if status.Code(slErr) != codes.InvalidArgument {
			t.Errorf("sluice: %v, want InvalidArgument", slErr)
		}
	})
	t.Run("is_negative_hits (item 10)", func(t *testing.T) {
		x := d("plain", tok())
		neg := proto.Clone(x).(*rlpb.RateLimitDescriptor)
		neg.IsNegativeHits = true
		ref, refErr := c.ref.should(rq(neg))
		sl, slErr := c.sl.should(rq(neg))
		if refErr != nil {
			t.Fatalf("reference: %v", refErr)
		}
		// The reference's API (go-control-plane envoy v1.32.4) has no
		// is_negative_hits: an unknown field, ignored over gRPC (and
		// rejected by protojson on /json: see json/http).
		statusIs(t, "reference (counts it as a hit)", ref, 0, ok, 4)
		// sluice gives the hit back: OK with its limit, nothing
		// remaining and no reset.
		if slErr != nil || sl.Statuses[0].Code != ok || sl.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 5 || sl.Statuses[0].DurationUntilReset != nil {
			t.Errorf("sluice: %v %s, want OK with its limit and no reset (a refund)", slErr, text(sl))
		}
	})
	t.Run("override of rate 0 (item 3)", func(t *testing.T) {
		req := rq(withLimit(d("ovr", tok()), 0, typev3.RateLimitUnit_MINUTE))
		ref, refErr := c.ref.should(req)
		_, slErr := c.sl.should(req)
		if refErr != nil || ref.OverallCode != overLimit {
			t.Errorf("reference: %v %s, want OVER_LIMIT", refErr, text(ref))
		}
		if status.Code(slErr) != codes.InvalidArgument {
			t.Errorf("sluice: %v, want InvalidArgument", slErr)
		}
	})
	t.Run("denied hits not counted (item 1)", func(t *testing.T) {
		inOneMinute(t, func(w window.TB) {
			x := d("plain", tok()) // 5 per minute
			for range 5 {
				call(t, c, rq(x))
			}
			for range 2 {
				ref, sl := call(t, c, rq(x))
				statusIs(w, "reference", ref, 0, overLimit, 0)
				statusIs(w, "sluice", sl, 0, overLimit, 0)
			}
			// A peek: the reference's counter is at 7 > 5, sluice's at 5.
			ref, sl := call(t, c, rq(withHits(x, 0)))
			statusIs(w, "reference", ref, 0, overLimit, 0)
			statusIs(w, "sluice", sl, 0, ok, 0)
		})
	})
	t.Run("all or nothing (item 2)", func(t *testing.T) {
		inOneMinute(t, func(w window.TB) {
			a, b := d("plain", tok()), d("plain", tok())
			call(t, c, rq(withHits(a, 5)))
			ref, sl := call(t, c, rq(a, b))
			for _, x := range []*pb.RateLimitResponse{ref, sl} {
				if x.OverallCode != overLimit || x.Statuses[0].Code != overLimit || x.Statuses[1].Code != ok {
					w.Errorf("want a OVER_LIMIT, b OK: %s", text(x))
				}
			}
			statusIs(w, "reference (b counted)", ref, 1, ok, 4)
			statusIs(w, "sluice (b peeked)", sl, 1, ok, 5)
			ref, sl = call(t, c, rq(withHits(b, 0)))
			statusIs(w, "reference", ref, 0, ok, 4)
			statusIs(w, "sluice", sl, 0, ok, 5)
		})
	})
	t.Run("hits_addend above the limit (item 4)", func(t *testing.T) {
		inOneMinute(t, func(w window.TB) {
			x := d("plain", tok())
			ref, sl := call(t, c, rq(withHits(x, 6)))
			statusIs(w, "reference", ref, 0, overLimit, 0)
			statusIs(w, "sluice", sl, 0, overLimit, 0)
			ref, sl = call(t, c, rq(withHits(x, 0)))
			statusIs(w, "reference (counted 6)", ref, 0, overLimit, 0)
			statusIs(w, "sluice (counted nothing)", sl, 0, ok, 5)
		})
	})
}

// aCase is a deterministic sequence covering one feature.
type aCase struct {
	name string
	reqs []*pb.RateLimitRequest
	// denial: the reference must deny the last request (and no earlier one).
	denial bool
}

// testCases runs one sequence per feature of testdata/compat.yaml through
// the comparison, with fresh values.
func testCases(t *testing.T, c *checker, tok func() string) {
	rep := func(n int, r *pb.RateLimitRequest) []*pb.RateLimitRequest {
		out := make([]*pb.RateLimitRequest, n)
		for i := range out {
			out[i] = r
		}
		return out
	}
	cat := func(parts ...[]*pb.RateLimitRequest) []*pb.RateLimitRequest {
		var out []*pb.RateLimitRequest
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	one := func(r ...*pb.RateLimitRequest) []*pb.RateLimitRequest { return r }
	// Each case gets fresh values v and w.
	cases := []func(v, w string) aCase{
		func(v, w string) aCase {
			return aCase{"key-only default to its limit", rep(6, rq(d("plain", v))), true}
		},
		func(v, w string) aCase {
			silver := d("kv", "sil"+v)
			return aCase{"key and value: exact (shared), wildcard, default", cat(
				one(rq(d("kv", "gold"), silver, d("kv", v))), rep(3, rq(silver)), one(rq(silver))), true}
		},
		func(v, w string) aCase {
			return aCase{"wildcards in config order, exact value, unmatched",
				rep(3, rq(d("path", "api"+v), d("path", "ab"+v), d("path", "api"), d("path", "x"+v))), false}
		},
		func(v, w string) aCase { return aCase{"nested, two levels", rep(5, rq(d("org", v, "user", w))), true} },
		func(v, w string) aCase {
			gold := d("org", v, "plan", "gold")
			return aCase{"nested exact value and default", cat(rep(3, rq(gold)), one(rq(d("org", v, "plan", w))), one(rq(gold))), true}
		},
		func(v, w string) aCase {
			tier, path := d("org", v, "tier", "free"), d("org", v, "tier", "free", "path", w)
			return aCase{"three levels and the two-level limit above them", cat(
				rep(2, rq(path)), one(rq(d("org", v, "tier", "free", "path", "img"+w))), rep(2, rq(tier)), one(rq(path))), true}
		},
		func(v, w string) aCase {
			return aCase{"no limit: level without one, deeper than config, unknown child, unknown key", rep(2, rq(
				d("org", v), d("plain", v, "extra", w), d("org", v, "tier", w), d("nomatch", v), d("org", v, "user", w, "extra", w))), false}
		},
		func(v, w string) aCase {
			return aCase{"unlimited, never counted", cat(rep(3, rqHits(1000, d("unlim", v))), one(rq(d("unlim", v), d("plain", w)))), false}
		},
		func(v, w string) aCase {
			return aCase{"shadow_mode up to and over its limit", rep(4, rq(d("shadow", v))), false}
		},
		func(v, w string) aCase {
			return aCase{"quota_mode up to and over its limit", rep(4, rq(d("quota", v))), false}
		},
		func(v, w string) aCase {
			tenant, vip := d("tenant", v), d("vip", w)
			return aCase{"name, and replaces when both apply", cat(
				rep(2, rq(tenant)), rep(2, rq(tenant, vip)), one(rq(vip, tenant)), one(rq(tenant))), false}
		},
		func(v, w string) aCase { return aCase{"requests_per_unit 0 blocks", one(rq(d("blocked", v))), true} },
		func(v, w string) aCase {
			return aCase{"unknown domain", rep(7, &pb.RateLimitRequest{Domain: "compat-unknown",
				Descriptors: []*rlpb.RateLimitDescriptor{d("plain", v), d("unlim", w)}}), false}
		},
		func(v, w string) aCase {
			x := d("plain", v)
			return aCase{"request hits_addend, 0 meaning 1", one(rqHits(0, x), rqHits(2, x), rqHits(2, x), rqHits(1, x)), true}
		},
		func(v, w string) aCase {
			x, y := d("plain", v), d("kv", w) // 5 and 3 per minute
			return aCase{"per-descriptor hits_addend wins; 0 peeks", one(
				rqHits(2, withHits(x, 3), y),
				rq(withHits(x, 0), withHits(y, 0)),
				rqHits(3, withHits(x, 2)),
				rq(withHits(x, 0)),
				rq(withHits(x, 1))), true}
		},
		func(v, w string) aCase {
			return aCase{"hits_addend above the limit", one(rq(withHits(d("plain", v), 6))), true}
		},
		func(v, w string) aCase {
			return aCase{"several descriptors to the limit together", rep(4, rq(d("plain", v), d("kv", w), d("plain", w))), true}
		},
		func(v, w string) aCase {
			return aCase{"the same descriptor twice in one request", rep(3, rq(d("plain", v), d("plain", v))), true}
		},
		func(v, w string) aCase {
			return aCase{"limit override of a descriptor", rep(4, rq(withLimit(d("ovr", v), 3, typev3.RateLimitUnit_MINUTE))), true}
		},
		// share_threshold: grp=v keeps the shared counters to the case.
		func(v, w string) aCase {
			sh := func(x string) *pb.RateLimitRequest { return rq(d("grp", v, "shr", "sh"+x)) }
			other := rq(d("grp", v, "shr", w)) // the default: 2 per minute, per value
			return aCase{"share_threshold: every value matching the wildcard on one counter", one(
				sh("A"+w), sh("B"+w), other, sh(w), other, sh(""), sh("E"+v)), true}
		},
		func(v, w string) aCase {
			return aCase{"share_threshold: two values of one counter in one request", one(
				rq(withHits(d("grp", v, "shr", "shA"), 3), withHits(d("grp", v, "shr", "shB"), 3))), true}
		},
		func(v, w string) aCase {
			user := func(team, u string) *pb.RateLimitRequest { return rq(d("grp", v, "team", "tm"+team, "user", u)) }
			return aCase{"share_threshold on a level with no limit, the limit below it", one(
				user("A", w), user("B", w), rq(d("grp", v, "team", "tmA")), user("C", v), user("C", w), user("D", w)), true}
		},
		func(v, w string) aCase {
			shA, shB := d("grp", v, "shr", "shA"), d("grp", v, "shr", "shB")
			ovr := rq(withLimit(shA, 3, typev3.RateLimitUnit_MINUTE)) // counts on shA's own counter
			return aCase{"share_threshold and a limit override of one value", one(
				rq(shA), rq(shB), ovr, ovr, ovr, rq(shA), ovr), true}
		},
		func(v, w string) aCase {
			return aCase{"unit second", rep(4, rq(d("sec", v))), true}
		},
		func(v, w string) aCase {
			return aCase{"unit second with hits and another limit", one(
				rqHits(2, d("sec", v)), rq(d("sec", v), d("plain", w)), rq(withHits(d("sec", v), 0)), rq(d("plain", w), d("sec", v))), true}
		},
		func(v, w string) aCase {
			return aCase{"limit override in seconds", rep(3, rq(withLimit(d("ovr", v), 2, typev3.RateLimitUnit_SECOND))), true}
		},
		func(v, w string) aCase {
			// The reference's API (go-control-plane envoy v1.32.4) has no
			// unit_multiplier: over gRPC an unknown field, ignored.
			x := withLimit(d("ovr", v), 3, typev3.RateLimitUnit_MINUTE)
			x.Limit.UnitMultiplier = wrapperspb.UInt32(2)
			return aCase{"limit override with a unit_multiplier (unknown to the reference)", rep(4, rq(x)), true}
		},
		func(v, w string) aCase { return aCase{"unit week", rep(5, rq(d("week", v))), true} },
		func(v, w string) aCase {
			return aCase{"units month and year", rep(4, rq(d("month", v), d("year", w))), true}
		},
		func(v, w string) aCase {
			return aCase{"limit overrides in weeks, months and years", rep(3, rq(
				withLimit(d("ovr", v), 2, overrideWeek),
				withLimit(d("ovr", w), 3, typev3.RateLimitUnit_MONTH),
				withLimit(d("ovr", w+v), 4, typev3.RateLimitUnit_YEAR))), true}
		},
		func(v, w string) aCase {
			return aCase{"detailed_metric: answered as without it", rep(4, rq(d("dm", v))), true}
		},
		func(v, w string) aCase {
			return aCase{"value_to_metric and detailed_metric below a wildcard", cat(
				rep(2, rq(d("vm", "v"+v), d("vm", "v"+v, "sub", w), d("vm", "x"+v, "sub", w))),
				rep(3, rq(d("vm", "v"+v, "sub", w)))), true}
		},
	}
	for _, mk := range cases {
		tc := mk(tok(), tok())
		t.Run(tc.name, func(t *testing.T) {
			if c.json && slices.ContainsFunc(tc.reqs, hasUnitMultiplier) {
				t.Skip("the reference's /json rejects unit_multiplier: see json/http/override unitMultiplier")
			}
			// A case that differs after a window boundary passed is
			// abandoned and run again with fresh values (a case on a
			// per-second limit at the start of a second).
			for attempt := 1; ; attempt++ {
				if !runCase(t, c, tc) {
					return
				}
				if attempt == window.Attempts {
					t.Fatalf("the case crossed a window boundary %d times: the machine is too slow for it within one window", attempt)
				}
				tc = mk(tok(), tok())
			}
		})
	}
}

// hasUnitMultiplier reports whether a descriptor of req has a limit
// override with a unit_multiplier.
func hasUnitMultiplier(req *pb.RateLimitRequest) bool {
	return slices.ContainsFunc(req.Descriptors, func(x *rlpb.RateLimitDescriptor) bool { return x.Limit.GetUnitMultiplier() != nil })
}

// runCase runs one case; it reports whether it was abandoned at a window
// boundary.
func runCase(t *testing.T, c *checker, tc aCase) (abandoned bool) {
	t.Helper()
	awayFromBoundary()
	seq := newSequence(tc.name)
	if perSecond(tc.reqs...) {
		atSecondStart()
		seq = newSequence(tc.name)
		seq.window = time.Second
	}
	for i, req := range tc.reqs {
		seq.label = fmt.Sprintf("%s, request %d", tc.name, i+1)
		o := c.step(t, seq, req)
		if o.failed {
			return false
		}
		if o.abandoned {
			return true
		}
		last := i == len(tc.reqs)-1
		if tc.denial && o.denied != last {
			t.Fatalf("%s: reference denied: %v, want a denial at the last request only", seq.label, o.denied)
		}
		if !tc.denial && o.denied {
			t.Fatalf("%s: reference denied, want no denial", seq.label)
		}
		if !o.goOn && !last {
			t.Fatalf("%s: sequence stopped before its end", seq.label)
		}
	}
	return false
}

// testShareTop: share_threshold at the top level, where every sequence
// would share the counter: shtop=t... is used here only, once per store
// (over gRPC). Three values count on one counter of 3 per minute; a fourth
// value is denied, in both. A peek with a fifth value then sees the
// counter the denial left: over its limit in the reference, which counted
// the denied hit, at it in sluice (COMPAT.md item 1).
func testShareTop(t *testing.T, c *checker, tok func() string) {
	inOneMinute(t, func(w window.TB) {
		v := tok()
		for i, val := range []string{"t" + v, "tt" + v, "t" + v + "x", "tz" + v} {
			ref, sl := call(t, c, rq(d("shtop", val)))
			remaining, code := uint32(2-i), ok
			if i == 3 {
				remaining, code = 0, overLimit
			}
			statusIs(w, "reference", ref, 0, code, remaining)
			statusIs(w, "sluice", sl, 0, code, remaining)
		}
		ref, sl := call(t, c, rq(withHits(d("shtop", "t"+tok()), 0)))
		statusIs(w, "reference", ref, 0, overLimit, 0)
		statusIs(w, "sluice", sl, 0, ok, 0)
	})
}

// testFixed reproduces each difference that this test found and sluice
// fixed: it fails, with the description of the difference, if sluice
// answers otherwise than the reference again.
func testFixed(t *testing.T, c *checker, tok func() string) {
	testFixedSharePattern(t, c, tok)
	type evidence struct {
		req     *pb.RateLimitRequest
		ref, sl *pb.RateLimitResponse
	}
	// run sends the requests mk makes (on fresh values, each time it is
	// called) within one minute window.
	run := func(t *testing.T, id string, mk func() []*pb.RateLimitRequest, still func(ref, sl *pb.RateLimitResponse) bool, same func(ref, sl *pb.RateLimitResponse) bool) {
		t.Helper()
		inOneMinute(t, func(w window.TB) {
			var e evidence
			for _, req := range mk() {
				e.req = req
				e.ref, e.sl = call(t, c, req)
			}
			msg := fmt.Sprintf("%s\n  request:   %s\n  reference: %s\n  sluice:    %s", fixedWhat(id), text(e.req), text(e.ref), text(e.sl))
			switch {
			case still(e.ref, e.sl):
				w.Errorf("%s is back: %s", id, msg)
			case !same(e.ref, e.sl):
				w.Errorf("%s: sluice's answer is not the reference's: %s", id, msg)
			}
		})
	}
	st := func(r *pb.RateLimitResponse, i int) *pb.RateLimitResponse_DescriptorStatus { return r.GetStatuses()[i] }

	t.Run("quota-mode-status", func(t *testing.T) {
		run(t, "quota-mode-status", func() []*pb.RateLimitRequest {
			x := d("quota", tok())
			return []*pb.RateLimitRequest{rqHits(3, x), rq(x)}
		},
			func(ref, sl *pb.RateLimitResponse) bool {
				return ref.OverallCode == ok && sl.OverallCode == ok &&
					st(ref, 0).Code == ok && st(ref, 0).DurationUntilReset == nil &&
					st(sl, 0).Code == overLimit && st(sl, 0).DurationUntilReset.GetSeconds() > 0
			},
			func(ref, sl *pb.RateLimitResponse) bool {
				return st(sl, 0).Code == ok && st(sl, 0).DurationUntilReset == nil
			})
	})
	t.Run("untouched-reset/peek", func(t *testing.T) {
		run(t, "untouched-reset", func() []*pb.RateLimitRequest { return []*pb.RateLimitRequest{rq(withHits(d("plain", tok()), 0))} },
			func(ref, sl *pb.RateLimitResponse) bool {
				return st(ref, 0).DurationUntilReset.GetSeconds() > 0 && st(sl, 0).DurationUntilReset.AsDuration() == 0 &&
					header(sl, "RateLimit-Reset").GetValue() == "0"
			},
			func(ref, sl *pb.RateLimitResponse) bool { return st(sl, 0).DurationUntilReset.GetSeconds() > 0 })
	})
	t.Run("untouched-reset/above the limit", func(t *testing.T) {
		run(t, "untouched-reset", func() []*pb.RateLimitRequest { return []*pb.RateLimitRequest{rq(withHits(d("plain", tok()), 6))} },
			func(ref, sl *pb.RateLimitResponse) bool {
				return st(ref, 0).Code == overLimit && st(sl, 0).Code == overLimit &&
					st(ref, 0).DurationUntilReset.GetSeconds() > 0 && st(sl, 0).DurationUntilReset.AsDuration() == 0
			},
			func(ref, sl *pb.RateLimitResponse) bool { return st(sl, 0).DurationUntilReset.GetSeconds() > 0 })
	})
	t.Run("blocked-marks-all", func(t *testing.T) {
		run(t, "blocked-marks-all", func() []*pb.RateLimitRequest {
			v := tok()
			return []*pb.RateLimitRequest{rq(d("plain", v), d("blocked", v))}
		},
			func(ref, sl *pb.RateLimitResponse) bool {
				return st(ref, 0).Code == ok && st(ref, 0).LimitRemaining == 4 && st(ref, 1).Code == overLimit &&
					st(sl, 0).Code == overLimit && st(sl, 0).LimitRemaining == 0 && st(sl, 1).Code == overLimit
			},
			func(ref, sl *pb.RateLimitResponse) bool { return st(sl, 0).Code == ok })
	})
	t.Run("shortcut-hides-over", func(t *testing.T) {
		run(t, "shortcut-hides-over", func() []*pb.RateLimitRequest {
			full, big := d("plain", tok()), withHits(d("plain", tok()), 9)
			return []*pb.RateLimitRequest{rq(withHits(full, 5)), rq(full, big)}
		},
			func(ref, sl *pb.RateLimitResponse) bool {
				return st(ref, 0).Code == overLimit && st(sl, 0).Code == ok && st(sl, 0).LimitRemaining == 0 &&
					st(ref, 1).Code == overLimit && st(sl, 1).Code == overLimit
			},
			func(ref, sl *pb.RateLimitResponse) bool { return st(sl, 0).Code == overLimit })
	})
	t.Run("override-counter/configured limit", func(t *testing.T) {
		run(t, "override-counter", func() []*pb.RateLimitRequest {
			x := d("plain", tok()) // configured: 5 per minute
			return []*pb.RateLimitRequest{rq(withLimit(x, 3, typev3.RateLimitUnit_MINUTE)), rq(withLimit(x, 3, typev3.RateLimitUnit_MINUTE)), rq(x)}
		},
			func(ref, sl *pb.RateLimitResponse) bool {
				return st(ref, 0).LimitRemaining == 2 && st(sl, 0).LimitRemaining == 4
			},
			func(ref, sl *pb.RateLimitResponse) bool { return st(sl, 0).LimitRemaining == 2 })
	})
	t.Run("override-counter/another rate", func(t *testing.T) {
		run(t, "override-counter", func() []*pb.RateLimitRequest {
			x := d("ovr", tok())
			return []*pb.RateLimitRequest{rq(withLimit(x, 3, typev3.RateLimitUnit_MINUTE)), rq(withLimit(x, 5, typev3.RateLimitUnit_MINUTE))}
		},
			func(ref, sl *pb.RateLimitResponse) bool {
				return st(ref, 0).LimitRemaining == 3 && st(sl, 0).LimitRemaining == 4
			},
			func(ref, sl *pb.RateLimitResponse) bool { return st(sl, 0).LimitRemaining == 3 })
	})
	t.Run("blocked-peek", func(t *testing.T) {
		run(t, "blocked-peek", func() []*pb.RateLimitRequest {
			v := tok()
			return []*pb.RateLimitRequest{rq(d("plain", v), withHits(d("blocked", v), 0))}
		},
			func(ref, sl *pb.RateLimitResponse) bool {
				return ref.OverallCode == ok && st(ref, 1).Code == ok && st(ref, 0).LimitRemaining == 4 &&
					sl.OverallCode == overLimit && st(sl, 1).Code == overLimit
			},
			func(ref, sl *pb.RateLimitResponse) bool { return sl.OverallCode == ok && st(sl, 1).Code == ok })
	})
	t.Run("duplicate-sum-error", func(t *testing.T) {
		inOneMinute(t, func(w window.TB) {
			// rpu 1 per minute, the same descriptor twice at the default cost:
			// every such request fails in sluice.
			x := withLimit(d("ovr", tok()), 1, typev3.RateLimitUnit_MINUTE)
			req := rq(x, x)
			ref, refErr := c.ask(c.ref, req)
			sl, slErr := c.ask(c.sl, req)
			msg := fmt.Sprintf("%s\n  request:   %s\n  reference: %v %s\n  sluice:    %v %s", fixedWhat("duplicate-sum-error"),
				text(req), errText(refErr), text(ref), errText(slErr), text(sl))
			switch {
			case refErr == nil && ref.OverallCode == overLimit && st(ref, 0).Code == ok && st(ref, 1).Code == overLimit &&
				slErr != nil && strings.Contains(slErr.Error(), "cost exceeds capacity"):
				w.Errorf("duplicate-sum-error is back: %s", msg)
			case slErr != nil || sl.OverallCode != overLimit || st(sl, 0).Code != ok || st(sl, 1).Code != overLimit:
				w.Errorf("duplicate-sum-error: sluice's answer is not the reference's: %s", msg)
			}
		})
	})
	t.Run("headers-last-over", func(t *testing.T) {
		run(t, "headers-last-over", func() []*pb.RateLimitRequest {
			three, five := d("kv", tok()), d("plain", tok()) // 3 and 5 per minute
			return []*pb.RateLimitRequest{rq(withHits(three, 3), withHits(five, 5)), rq(three, five)}
		},
			func(ref, sl *pb.RateLimitResponse) bool {
				return ref.OverallCode == overLimit && st(ref, 0).Code == overLimit && st(ref, 1).Code == overLimit &&
					header(ref, "RateLimit-Limit").GetValue() == "5" && header(sl, "RateLimit-Limit").GetValue() == "3"
			},
			func(ref, sl *pb.RateLimitResponse) bool {
				return header(sl, "RateLimit-Limit").GetValue() == header(ref, "RateLimit-Limit").GetValue()
			})
	})
}

// kind is one shape of descriptor that random sequences draw from.
type kind struct {
	name string
	// make builds a descriptor with fresh values v and w, and the
	// sequence's own value s (counters shared within the sequence).
	make func(r *rand.Rand, v, w, s string) *rlpb.RateLimitDescriptor
	// shared: a fixed value, one counter for every sequence: only in
	// sequences of never-denied kinds, so that both services count the same.
	shared bool
	// safe: never denied (no limit, unlimited, or a shared large limit).
	safe bool
	// second: on a per-second limit.
	second bool
}

func fixed(kv ...string) func(*rand.Rand, string, string, string) *rlpb.RateLimitDescriptor {
	return func(_ *rand.Rand, v, w, seq string) *rlpb.RateLimitDescriptor {
		out := make([]string, len(kv))
		for i, s := range kv {
			out[i] = strings.NewReplacer("$v", v, "$w", w, "$s", seq).Replace(s)
		}
		return d(out...)
	}
}

var kinds = []kind{
	{name: "plain", make: fixed("plain", "$v")},
	{name: "kv exact (shared)", make: fixed("kv", "gold"), shared: true, safe: true},
	{name: "kv wildcard", make: fixed("kv", "sil$v")},
	{name: "kv default", make: fixed("kv", "$v")},
	{name: "path wildcard api*", make: fixed("path", "api$v")},
	{name: "path wildcard a*", make: fixed("path", "ab$v")},
	{name: "path exact (shared)", make: fixed("path", "api"), shared: true, safe: true},
	{name: "path unmatched", make: fixed("path", "x$v"), safe: true},
	{name: "org, no limit", make: fixed("org", "$v"), safe: true},
	{name: "org user", make: fixed("org", "$v", "user", "$w")},
	{name: "org plan gold", make: fixed("org", "$v", "plan", "gold")},
	{name: "org plan default", make: fixed("org", "$v", "plan", "$w")},
	{name: "org tier free", make: fixed("org", "$v", "tier", "free")},
	{name: "org tier free path img*", make: fixed("org", "$v", "tier", "free", "path", "img$w")},
	{name: "org tier free path", make: fixed("org", "$v", "tier", "free", "path", "$w")},
	{name: "org tier unmatched", make: fixed("org", "$v", "tier", "$w"), safe: true},
	{name: "deeper than config", make: fixed("plain", "$v", "extra", "$w"), safe: true},
	{name: "unknown key", make: fixed("nomatch", "$v"), safe: true},
	{name: "unlimited", make: fixed("unlim", "$v"), safe: true},
	{name: "shadow_mode", make: fixed("shadow", "$v")},
	{name: "quota_mode", make: fixed("quota", "$v")},
	{name: "named", make: fixed("tenant", "$v")},
	{name: "replaces named", make: fixed("vip", "$v")},
	{name: "blocked", make: fixed("blocked", "$v")},
	{name: "override", make: func(r *rand.Rand, v, _, _ string) *rlpb.RateLimitDescriptor {
		units := []typev3.RateLimitUnit{typev3.RateLimitUnit_MINUTE, typev3.RateLimitUnit_HOUR, typev3.RateLimitUnit_DAY,
			overrideWeek, typev3.RateLimitUnit_MONTH, typev3.RateLimitUnit_YEAR}
		return withLimit(d("ovr", v), uint32(1+r.IntN(6)), units[r.IntN(len(units))])
	}},
	{name: "override per second", make: func(r *rand.Rand, v, _, _ string) *rlpb.RateLimitDescriptor {
		return withLimit(d("ovr", v), uint32(1+r.IntN(4)), typev3.RateLimitUnit_SECOND)
	}, second: true},
	{name: "share_threshold (the sequence's counter)", make: fixed("grp", "$s", "shr", "sh$v")},
	{name: "share_threshold, default", make: fixed("grp", "$s", "shr", "$v")},
	{name: "share_threshold above the limit (the sequence's counter)", make: fixed("grp", "$s", "team", "tm$v", "user", "$s")},
	{name: "share_threshold above the limit, own user", make: fixed("grp", "$s", "team", "tm$v", "user", "$w")},
	{name: "share_threshold, no limit", make: fixed("grp", "$s", "team", "tm$v"), safe: true},
	{name: "share_threshold top level (shared)", make: fixed("shtop", "big$v"), shared: true, safe: true},
	{name: "second", make: fixed("sec", "$v"), second: true},
	{name: "week", make: fixed("week", "$v")},
	{name: "month", make: fixed("month", "$v")},
	{name: "year", make: fixed("year", "$v")},
	{name: "detailed_metric", make: fixed("dm", "$v")},
	{name: "value_to_metric", make: fixed("vm", "v$v", "sub", "$w")},
}

// testRandom runs random sequences (randomSequences) compared by
// checker.step until the reference's first denial.
func testRandom(t *testing.T, c *checker, r *rand.Rand, sequences int) {
	requests, denied, stopped := randomSequences(t, r, sequences, c.step)
	if t.Failed() {
		return
	}
	t.Logf("%d sequences, %d requests: %d ended at the reference's first denial, %d stopped (denial, or quota/shadow over the limit)",
		sequences, requests, denied, stopped)
}

// randomSequences runs random sequences: each draws 1 to 4 descriptors with
// fresh values, then sends 1 to 12 requests, each a random choice of them
// (repeats included) with random hits_addend, through step, until step
// says the sequence may not go on. It returns the requests sent, the steps
// that saw a denial and the sequences stopped before their end; at the
// first failure, it stops.
func randomSequences(t *testing.T, r *rand.Rand, sequences int, step func(*testing.T, *sequence, *pb.RateLimitRequest) outcome) (requests, denied, stopped int) {
	var safe, unsafe []kind
	for _, k := range kinds {
		if k.safe {
			safe = append(safe, k)
		}
		if !k.shared {
			unsafe = append(unsafe, k)
		}
	}
	tok := tokens(r)
	for s := range sequences {
		reqDomain := domain
		pool := unsafe
		sharedOK := false
		switch p := r.IntN(100); {
		case p < 5:
			reqDomain = "compat-unknown"
		case p < 20:
			pool, sharedOK = safe, true
		}
		descs := make([]*rlpb.RateLimitDescriptor, 1+r.IntN(4))
		names := make([]string, len(descs))
		seqTok, second := tok(), false
		var k kind
		for i := range descs {
			// Often the previous kind again, with fresh values: of a
			// share_threshold kind, a second value on the same counter.
			if i == 0 || r.IntN(3) != 0 {
				k = pool[r.IntN(len(pool))]
			}
			descs[i], names[i] = k.make(r, tok(), tok(), seqTok), k.name
			second = second || k.second
		}
		awayFromBoundary()
		if second {
			awayFromSecondBoundary()
		}
		seq := newSequence("")
		if second {
			seq.window = time.Second
		}
		if sharedOK {
			// The shared counters (a day's) count from the services'
			// start: a day boundary since then may have fallen between
			// the two services' answers to one request, which leaves
			// them a hit apart for the day.
			seq.start, seq.window = sharedSince, 24*time.Hour
		}
		n := 1 + r.IntN(12)
		for i := range n {
			req := &pb.RateLimitRequest{Domain: reqDomain}
			for range 1 + r.IntN(min(4, len(descs)+1)) {
				x := proto.Clone(descs[r.IntN(len(descs))]).(*rlpb.RateLimitDescriptor)
				if r.IntN(5) == 0 {
					x.HitsAddend = wrapperspb.UInt64(randomHits(r, sharedOK))
				}
				req.Descriptors = append(req.Descriptors, x)
			}
			switch p := r.IntN(100); {
			case p < 60: // 0: one hit
			case p < 85:
				req.HitsAddend = 1
			case p < 97:
				req.HitsAddend = uint32(2 + r.IntN(2))
			default:
				if !sharedOK {
					req.HitsAddend = uint32(10 + r.IntN(1<<20))
				}
			}
			seq.label = fmt.Sprintf("sequence %d (%s), request %d of %d", s, strings.Join(names, ", "), i+1, n)
			requests++
			o := step(t, seq, req)
			if o.failed {
				break
			}
			if o.denied {
				denied++
			}
			if !o.goOn {
				stopped++
				break
			}
		}
		if t.Failed() {
			t.Log("stopped the random sequences at the first failure; replay with the seed logged above")
			return requests, denied, stopped
		}
	}
	return requests, denied, stopped
}

// randomHits is a per-descriptor hits_addend: often a peek (0) or a few,
// sometimes more than any limit (never for a sequence with shared
// counters, which must never be denied).
func randomHits(r *rand.Rand, sharedOK bool) uint64 {
	switch p := r.IntN(100); {
	case p < 40:
		return 0
	case p < 90 || sharedOK:
		return uint64(1 + r.IntN(3))
	case p < 97:
		return uint64(4 + r.IntN(8))
	default:
		return 1<<32 + uint64(r.IntN(1000))
	}
}
