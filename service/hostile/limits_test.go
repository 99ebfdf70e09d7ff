package hostile

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// limitsClass: huge and overflowing limits on every algorithm, through
// /v1/check, gRPC limit overrides and hits_addend, and /json. A value past
// a bound is a 400 / InvalidArgument naming the field; a value within the
// bounds is decided (or refused naming the field) without a hang, without
// memory beyond the class' bounds and, on Redis, without a command of 1 ms.
var limitsClass = class{name: "limits", run: runLimits}

var algorithms = []string{"fixed_window", "sliding_window", "token_bucket", "gcra", "sliding_log"}

// limitBounds are the defaults of serve's bound flags.
type limitBounds struct {
	rate, burst, hits int64
	period            time.Duration
}

func readLimitBounds(t *testing.T) limitBounds {
	t.Helper()
	num := func(name, fallback string) int64 {
		s := bound(t, name, fallback)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("--%s default %q: want a positive integer", name, s)
		}
		return n
	}
	b := limitBounds{rate: num("max-rate", "1000000000"), burst: num("max-burst", "1000000000"), hits: num("max-hits", "1000000000")}
	s := bound(t, "max-period", "8784h0m0s")
	p, err := time.ParseDuration(s)
	if err != nil || p <= 0 {
		t.Fatalf("--max-period default %q: want a positive duration", s)
	}
	b.period = p
	t.Logf("bounds (defaults of sluice serve): --max-rate %d --max-burst %d --max-hits %d --max-period %v", b.rate, b.burst, b.hits, b.period)
	return b
}

// checkCase is one POST /v1/check of the class.
type checkCase struct {
	name string
	body string
	// admissible: the values are within the bounds, so the answer may be a
	// decision (200) as well as a 400 naming one of words.
	admissible bool
	words      []string
}

// hostileValues are the raw JSON values sent as rate, cost and burst.
var hostileValues = []string{
	"3000000", "50000000", "5e7", "4503599627370495", "-1", "0",
	"9223372036854775807", "9223372036854775808", "1e300", "1.5",
	`"4503599627370495"`, `"3000000"`, `"-1"`, `"9223372036854775807"`,
}

// intIn reports whether the JSON value v is an integer (a number, or a
// string of one) within [lo, hi].
func intIn(v string, lo, hi int64) bool {
	n, err := strconv.ParseInt(strings.Trim(v, `"`), 10, 64)
	return err == nil && n >= lo && n <= hi
}

func limitCases(key string, b limitBounds) []checkCase {
	var cs []checkCase
	body := func(alg, fields string) string {
		return fmt.Sprintf(`{"key":%q,"algorithm":%q,%s}`, key, alg, fields)
	}
	values := append(append([]string{}, hostileValues...), strconv.FormatInt(b.rate+1, 10), strconv.FormatInt(b.hits+1, 10), strconv.FormatInt(b.burst+1, 10))
	// rate=cost cases give each request a period of its own: a state counted
	// from nothing, on the shard of the class' key.
	for _, alg := range algorithms {
		burstApplies := alg == "token_bucket" || alg == "gcra"
		for _, v := range values {
			cs = append(cs,
				checkCase{alg + " rate=" + v, body(alg, `"rate":`+v+`,"period":"1h"`), intIn(v, 1, b.rate), []string{"rate"}},
				checkCase{alg + " rate=cost=" + v + " (a fresh state)", body(alg, `"rate":`+v+`,"cost":`+v+`,"period":"`+strconv.Itoa(3600+len(cs))+`s"`), intIn(v, 1, min(b.rate, b.hits)), []string{"rate", "cost", "hits"}},
				checkCase{alg + " cost=" + v, body(alg, `"rate":10,"cost":`+v+`,"period":"1h"`), intIn(v, 0, 10), []string{"cost", "hits"}},
				checkCase{alg + " burst=" + v, body(alg, `"rate":10,"burst":`+v+`,"period":"1h"`), burstApplies && intIn(v, 0, b.burst) || intIn(v, 0, 0), []string{"burst"}},
			)
		}
		for _, p := range []string{"1000000h", (b.period + time.Second).String(), "2562047h47m16.854775807s", "9999999999h", "-1s", "0s", "1ns", "1h0.5us"} {
			cs = append(cs, checkCase{alg + " period=" + p, body(alg, `"rate":10,"period":"`+p+`"`), false, []string{"period"}})
		}
		cs = append(cs, checkCase{alg + " period=max", body(alg, `"rate":10,"period":"`+b.period.String()+`"`), true, []string{"period"}})
	}
	return cs
}

func runLimits(t *testing.T, h *harness) {
	b := readLimitBounds(t)
	cl := hostileClient(2 * time.Second)
	defer cl.CloseIdleConnections()
	wedge := &hangs{t: t, max: 3}
	post := func(body string) (int, string, error) {
		return statusOf(cl.Post(h.p.httpURL("/v1/check"), "application/json", strings.NewReader(body)))
	}

	for _, c := range limitCases(h.sameKey, b) {
		code, body, err := post(c.body)
		if err != nil {
			if wedge.hung(c.name, err) {
				t.Errorf("stopped the class: %v", wedge)
				return
			}
			continue
		}
		named := code == 400 && namesAny(body, c.words)
		switch {
		case c.admissible && (code == 200 || named):
		case c.admissible:
			t.Errorf("%s (within the bounds): %d %s, want 200 or a 400 naming %v", c.name, code, trim(body), c.words)
		case !named:
			t.Errorf("%s: %d %s, want 400 naming %v", c.name, code, trim(body), c.words)
		}
	}

	// The largest limit each algorithm admits, spent at once: it must be
	// decided quickly (Redis' slow log is checked after the class).
	for _, alg := range algorithms {
		if wedge.wedged() {
			return
		}
		r, ok := largestRate(t, post, h.sameKey, alg, b, wedge)
		if !ok {
			continue
		}
		cost := min(r, b.hits)
		body := fmt.Sprintf(`{"key":%q,"algorithm":%q,"rate":%d,"cost":%d,"period":%q}`, h.sameKey+"-largest-"+alg, alg, r, cost, b.period)
		start := time.Now()
		code, resp, err := post(body)
		took := time.Since(start)
		switch {
		case err != nil:
			wedge.hung(alg+" largest admitted limit", err)
		case code != 200 || !strings.Contains(resp, `"allowed":true`):
			t.Errorf("%s rate=cost=%d period=%v (the largest it admits) on a fresh key: %d %s, want 200 allowed", alg, r, b.period, code, trim(resp))
		default:
			t.Logf("%s: largest admitted rate %d (period %v), cost %d decided in %v", alg, r, b.period, cost, took.Round(time.Microsecond))
		}
	}

	rlsLimits(t, h, b, wedge)
	jsonLimits(t, h, cl)
}

// largestRate finds, by bisection with cost 0 (a peek that spends
// nothing), the largest rate alg admits at the largest period.
func largestRate(t *testing.T, post func(string) (int, string, error), key, alg string, b limitBounds, wedge *hangs) (int64, bool) {
	t.Helper()
	admits := func(rate int64) (bool, bool) {
		code, body, err := post(fmt.Sprintf(`{"key":%q,"algorithm":%q,"rate":%d,"cost":0,"period":%q}`, key+"-peek", alg, rate, b.period))
		if err != nil {
			wedge.hung(fmt.Sprintf("%s peek rate=%d", alg, rate), err)
			return false, false
		}
		if code != 200 && !(code == 400 && namesAny(body, []string{"rate", "period"})) {
			t.Errorf("%s peek rate=%d period=%v: %d %s, want 200 or a 400 naming rate or period", alg, rate, b.period, code, trim(body))
			return false, false
		}
		return code == 200, true
	}
	if ok, answered := admits(b.rate); !answered {
		return 0, false
	} else if ok {
		return b.rate, true
	}
	lo, hi := int64(1), b.rate // lo admitted, hi not
	if ok, answered := admits(lo); !answered || !ok {
		t.Errorf("%s rate=1 period=%v: refused", alg, b.period)
		return 0, false
	}
	for hi-lo > 1 && !wedge.wedged() {
		mid := lo + (hi-lo)/2
		ok, answered := admits(mid)
		if !answered {
			return 0, false
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, true
}

// rlsLimits sends limit overrides and hits_addend over gRPC.
func rlsLimits(t *testing.T, h *harness, b limitBounds, wedge *hangs) {
	type rpcCase struct {
		name       string
		req        *pb.RateLimitRequest
		admissible bool
		words      []string
	}
	over := func(value string, rpu uint32, unit typepb.RateLimitUnit) *pb.RateLimitRequest {
		d := desc("hostile", value)
		d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		return &pb.RateLimitRequest{Domain: "hostile", Descriptors: []*rlpb.RateLimitDescriptor{d}}
	}
	hitsReq := func(value string, req uint32, d *uint64) *pb.RateLimitRequest {
		x := desc("hostile", value)
		if d != nil {
			x.HitsAddend = wrapperspb.UInt64(*d)
		}
		return &pb.RateLimitRequest{Domain: "hostile", HitsAddend: req, Descriptors: []*rlpb.RateLimitDescriptor{x}}
	}
	u64 := func(v uint64) *uint64 { return &v }
	_, rls := h.p.hostileConn(t)
	var cs []rpcCase
	for _, v := range []uint64{math.MaxUint32, 50000000, 3000000, uint64(b.rate) + 1, uint64(b.rate)} {
		if v > math.MaxUint32 {
			continue
		}
		for _, unit := range []typepb.RateLimitUnit{typepb.RateLimitUnit_SECOND, typepb.RateLimitUnit_HOUR} {
			cs = append(cs, rpcCase{fmt.Sprintf("override %d per %v", v, unit), over(h.sameKey, uint32(v), unit), v <= uint64(b.rate), []string{"rate", "requests_per_unit"}})
		}
	}
	cs = append(cs, rpcCase{"override 1 per YEAR", over(h.sameKey, 1, typepb.RateLimitUnit_YEAR), true, []string{"period", "unit", "year"}})
	for _, v := range []uint64{math.MaxUint32, uint64(b.hits) + 1, uint64(b.hits)} {
		if v > math.MaxUint32 {
			continue
		}
		cs = append(cs, rpcCase{fmt.Sprintf("hits_addend %d", v), hitsReq(h.sameKey, uint32(v), nil), v <= uint64(b.hits), []string{"hits"}})
	}
	for _, v := range []uint64{math.MaxUint64, 1 << 63, 4503599627370495, uint64(b.hits) + 1, uint64(b.hits)} {
		cs = append(cs, rpcCase{fmt.Sprintf("descriptor hits_addend %d", v), hitsReq(h.sameKey, 1, u64(v)), v <= uint64(b.hits), []string{"hits"}})
	}
	if b.rate <= math.MaxUint32 && b.hits <= math.MaxUint32 {
		r := over(h.sameKey+"-largest", uint32(b.rate), typepb.RateLimitUnit_HOUR)
		r.HitsAddend = uint32(min(b.rate, b.hits))
		cs = append(cs, rpcCase{"override --max-rate with hits_addend --max-hits", r, true, []string{"rate", "hits"}})
	}
	for _, c := range cs {
		if wedge.wedged() {
			return
		}
		ctx, cancel := rpcCtx(2 * time.Second)
		_, err := rls.ShouldRateLimit(ctx, c.req)
		cancel()
		st := status.Convert(err)
		named := st.Code() == codes.InvalidArgument && namesAny(st.Message(), c.words)
		switch {
		case st.Code() == codes.DeadlineExceeded || st.Code() == codes.Unavailable:
			wedge.hung(c.name, err)
		case c.admissible && (err == nil || named):
		case c.admissible:
			t.Errorf("gRPC %s (within the bounds): %v, want a decision or InvalidArgument naming %v", c.name, err, c.words)
		case !named:
			t.Errorf("gRPC %s: %v, want InvalidArgument naming %v", c.name, errOrOK(err), c.words)
		}
	}
}

// jsonLimits sends a huge hits_addend and limit override through POST
// /json: a 400 naming the field.
func jsonLimits(t *testing.T, h *harness, cl *http.Client) {
	for _, c := range []struct {
		name, body string
		words      []string
	}{
		{"hitsAddend 4294967295", `{"domain":"hostile","hitsAddend":4294967295,"descriptors":[{"entries":[{"key":"hostile","value":"` + h.sameKey + `"}]}]}`, []string{"hits"}},
		{"descriptor hitsAddend 2^64-1", `{"domain":"hostile","descriptors":[{"entries":[{"key":"hostile","value":"` + h.sameKey + `"}],"hitsAddend":"18446744073709551615"}]}`, []string{"hits"}},
		{"override 4294967295 per second", `{"domain":"hostile","descriptors":[{"entries":[{"key":"hostile","value":"` + h.sameKey + `"}],"limit":{"requestsPerUnit":4294967295,"unit":"SECOND"}}]}`, []string{"rate", "requests_per_unit"}},
	} {
		code, body, err := statusOf(cl.Post(h.p.httpURL("/json"), "application/json", strings.NewReader(c.body)))
		switch {
		case err != nil:
			t.Errorf("POST /json %s: no answer: %v", c.name, err)
		case code != 400 || !namesAny(body, c.words):
			t.Errorf("POST /json %s: %d %s, want 400 naming %v", c.name, code, trim(body), c.words)
		}
	}
}

// namesAny reports whether an error text names one of words.
func namesAny(text string, words []string) bool {
	text = strings.ToLower(text)
	for _, w := range words {
		if strings.Contains(text, w) {
			return true
		}
	}
	return false
}

func trim(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

func errOrOK(err error) string {
	if err == nil {
		return "OK (a decision)"
	}
	return err.Error()
}
