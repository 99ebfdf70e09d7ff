package compat

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

const (
	ok        = pb.RateLimitResponse_OK
	overLimit = pb.RateLimitResponse_OVER_LIMIT
)

// fixedDifference is a difference between sluice and the reference that
// this test found and that sluice no longer has: the comparison tolerates
// none of them, and TestCompat/<store>/fixed/<id> reproduces each one, so
// that it fails with this description if the difference comes back.
type fixedDifference struct {
	id, what string
}

var fixedDifferences = []fixedDifference{
	{"share-pattern-value", "a descriptor whose value is a share_threshold wildcard's pattern itself (shr=\"sh*\" for " +
		"`value: \"sh*\"`, `share_threshold: true`) is counted by the reference on the counter that every value " +
		"matching the wildcard shares (its exact lookup finds the wildcard's node, and it writes the value, the " +
		"pattern, into the counter key, as for every matched value); sluice counted it on a counter of its own, so " +
		"that value got the whole limit again on top of the shared counter"},
	{"quota-mode-status", "a quota_mode descriptor over its limit: the reference answers code OK, " +
		"current_limit, limit_remaining 0 and no duration_until_reset (src/service/ratelimit.go: " +
		"\"In quota mode: ... keep response as OK\"); sluice answers OVER_LIMIT with a duration_until_reset " +
		"(COMPAT.md lists \"the descriptor reports OVER_LIMIT\" under \"The same\")"},
	{"untouched-reset", "duration_until_reset of a key with no hits in its window (a hits_addend 0 peek, or a " +
		"hits_addend larger than the limit, which sluice does not count): sluice answers 0 s (and RateLimit-Reset: 0), " +
		"the reference the window's end, as for every status with a limit (utils.CalculateReset); for the " +
		"OVER_LIMIT case COMPAT.md item 7 promises the window's end"},
	{"blocked-marks-all", "a request with a requests_per_unit: 0 descriptor: sluice answers OVER_LIMIT (remaining 0) " +
		"for every other limited descriptor too, the reference only for the blocked one (COMPAT.md item 2: " +
		"\"only the descriptors that denied are OVER_LIMIT\")"},
	{"shortcut-hides-over", "a request where one descriptor's hits_addend exceeds its limit: sluice decides the " +
		"others with cost 0, so a descriptor that is itself at its limit is answered OK (remaining 0) where the " +
		"reference (and sluice's own AllowMulti path without that descriptor) answers OVER_LIMIT"},
	{"override-counter", "a descriptor's limit override counts in the reference's counter of the same entries and " +
		"unit (src/limiter/cache_key.go: domain, entries and window start only), shared with the configured limit " +
		"and with overrides of another rate; sluice counts each override (unit and rate) apart " +
		"(COMPAT.md lists \"counted apart from the configured limit\" under \"The same\")"},
	{"duplicate-sum-error", "a request naming one counter several times (the same descriptor twice: Envoy sends that when " +
		"two rate_limit actions produce the same entries) whose costs together exceed the limit, each within it: " +
		"sluice fails the call with gRPC Unavailable \"store: ... sluice: cost exceeds capacity\" (the stores' AllowMulti " +
		"rejects the sum; rls only checks each descriptor's own cost), the reference answers OVER_LIMIT. Envoy's " +
		"default failure_mode_deny: false admits requests on that error: with requests_per_unit: 1 and a duplicated " +
		"descriptor, nothing is ever limited"},
	{"blocked-peek", "a hits_addend 0 on a requests_per_unit: 0 descriptor: the reference answers OK (its counter, 0, " +
		"is not over 0), sluice OVER_LIMIT and denies the whole request (a Deny rule ignores the cost; elsewhere " +
		"sluice never denies a cost of 0)"},
	{"headers-last-over", "with two or more descriptors OVER_LIMIT, the reference's RateLimit-* headers describe the " +
		"last of them (src/service/ratelimit.go), sluice's the first (rls.Closest)"},
}

func fixedWhat(id string) string {
	for _, k := range fixedDifferences {
		if k.id == id {
			return k.what
		}
	}
	panic("unknown fixed difference " + id)
}

// documentedDuplicate is the COMPAT.md difference the comparison recognises
// on a counter named twice in one request; it is counted apart from the
// fixed differences.
const documentedDuplicate = "documented: the reference counts hits that sluice does not (a denied request's, " +
	"quota_mode's and shadow_mode's over their limit, a hits_addend above the limit), which a later descriptor " +
	"of the same request on the same counter sees (COMPAT.md items 1, 2, 4)"

// checker sends requests to the reference and to sluice and compares the
// answers.
type checker struct {
	ref, sl *service
	// json sends the requests to POST /json instead of gRPC.
	json bool

	mu       sync.Mutex
	seen     map[string]int    // tolerated difference -> occurrences
	example  map[string]string // its first occurrence
	requests int               // compared requests
	full     int               // ... compared in full
	denials  int               // ... compared at the reference's first denial
}

func newChecker(ref, sl *service) *checker {
	return &checker{ref: ref, sl: sl, seen: map[string]int{}, example: map[string]string{}}
}

// ask sends req to s over gRPC, or to its POST /json for a JSON checker
// (see shouldJSON).
func (c *checker) ask(s *service, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if c.json {
		return s.shouldJSON(req)
	}
	return s.should(req)
}

// sequence is the state of one sequence of requests: what the comparison
// needs to know of the earlier answers.
type sequence struct {
	label string
	start time.Time
	// window is the shortest window of the sequence's limits: a difference
	// after one of its boundaries passed abandons the sequence.
	window time.Duration
	// remaining is the reference's last limit_remaining per counter of a
	// shadow_mode descriptor, to see when one goes over its limit (its status
	// stays OK).
	remaining map[string]uint32
}

func newSequence(label string) *sequence {
	return &sequence{label: label, start: time.Now(), window: time.Minute, remaining: map[string]uint32{}}
}

// hits is the cost of descriptor i as both services read it: its own
// hits_addend when set (0 included), else the request's, 0 meaning 1.
func hits(req *pb.RateLimitRequest, i int) uint64 {
	if h := req.Descriptors[i].GetHitsAddend(); h != nil {
		return h.GetValue()
	}
	return max(uint64(req.GetHitsAddend()), 1)
}

// counter identifies the counter a descriptor counts in, in the reference:
// its entries and limit override, with the value of an entry matched by a
// share_threshold wildcard replaced by the pattern (the other distinct
// entries of testdata/compat.yaml never share one).
func counter(d *rlpb.RateLimitDescriptor) string {
	c := &rlpb.RateLimitDescriptor{Entries: d.Entries, Limit: d.Limit}
	if d.Limit == nil {
		if i, pattern := sharedEntry(d); i >= 0 {
			c.Entries = slices.Clone(d.Entries)
			c.Entries[i] = &rlpb.RateLimitDescriptor_Entry{Key: d.Entries[i].Key, Value: pattern}
		}
	}
	return prototext.MarshalOptions{}.Format(c)
}

// shareThresholds are the share_threshold wildcards of testdata/compat.yaml
// that end in a limit: the keys of the descriptors that match one, the
// entry matched by the wildcard and its pattern.
var shareThresholds = []struct {
	keys    []string
	at      int
	pattern string
}{
	{[]string{"shtop"}, 0, "t*"},
	{[]string{"shtop"}, 0, "big*"},
	{[]string{"grp", "shr"}, 1, "sh*"},
	{[]string{"grp", "team", "user"}, 1, "tm*"},
	{[]string{"conc"}, 0, "sh*"},
}

// sharedEntry returns the entry of d whose value a share_threshold wildcard
// replaces by its pattern in the reference's counter key, and the pattern;
// -1 if none. A value equal to the pattern itself matches the wildcard's
// node exactly in the reference, and its counter key is the shared one.
func sharedEntry(d *rlpb.RateLimitDescriptor) (int, string) {
	for _, s := range shareThresholds {
		if len(d.Entries) != len(s.keys) {
			continue
		}
		match := true
		for i, k := range s.keys {
			match = match && d.Entries[i].Key == k
		}
		if match && strings.HasPrefix(d.Entries[s.at].Value, strings.TrimSuffix(s.pattern, "*")) {
			return s.at, s.pattern
		}
	}
	return -1, ""
}

// isShadow reports whether d matches the shadow_mode limit of
// testdata/compat.yaml.
func isShadow(d *rlpb.RateLimitDescriptor) bool {
	return len(d.Entries) == 1 && d.Entries[0].Key == "shadow" && d.Limit == nil
}

func text(m proto.Message) string {
	if m == nil {
		return "<nil>"
	}
	if m, ok := m.(*pb.RateLimitResponse); ok && m == nil {
		return ""
	}
	return prototext.MarshalOptions{}.Format(m)
}

// outcome is what one step observed.
type outcome struct {
	goOn      bool // the sequence may go on
	denied    bool // the reference denied (some descriptor OVER_LIMIT)
	failed    bool
	abandoned bool // the answers differ, but a window boundary passed
}

// step sends req to both services, compares the answers and reports whether
// the sequence may go on: it stops at the reference's first denial, and when
// a quota_mode or shadow_mode descriptor goes over its limit (the reference
// counts those hits, sluice does not).
//
// Before any denial the whole response must be equal (duration_until_reset
// and RateLimit-Reset within 1 s). At the reference's first denial only what
// COMPAT.md documents as the same is compared: overall_code, every status's
// code and current_limit, and the limit_remaining (0) and
// duration_until_reset of the descriptors the reference says are
// OVER_LIMIT; and the RateLimit-* headers.
//
// A later descriptor of the request on a counter the reference has just
// taken over its limit (OVER_LIMIT, quota_mode or shadow_mode) is compared
// by current_limit only: the reference counted hits there that sluice did
// not (COMPAT.md items 1, 2, 4); the headers are then not compared (they
// may describe that status).
func (c *checker) step(t *testing.T, seq *sequence, req *pb.RateLimitRequest) outcome {
	t.Helper()
	asked := time.Now()
	refResp, refErr := c.ask(c.ref, req)
	slResp, slErr := c.ask(c.sl, req)
	slack := time.Since(asked)
	c.mu.Lock()
	c.requests++
	c.mu.Unlock()
	report := func(mode, why string) outcome {
		t.Helper()
		if now := time.Now(); now.Truncate(seq.window) != seq.start.Truncate(seq.window) {
			t.Logf("%s: differs (%s) but the sequence crossed a %v boundary (%s to %s): abandoned", seq.label, why,
				seq.window, seq.start.Format("15:04:05.000"), now.Format("15:04:05.000"))
			return outcome{abandoned: true}
		}
		t.Errorf("%s (%s): %s\nrequest:   %s\nreference: %v %s\nsluice:    %v %s", seq.label, mode, why,
			text(req), errText(refErr), text(refResp), errText(slErr), text(slResp))
		return outcome{failed: true}
	}
	if refErr != nil || slErr != nil {
		return report("call", "a valid request failed")
	}
	n := len(req.Descriptors)
	if len(refResp.Statuses) != n || len(slResp.Statuses) != n {
		return report("call", fmt.Sprintf("%d descriptors, %d and %d statuses", n, len(refResp.Statuses), len(slResp.Statuses)))
	}
	r := proto.Clone(refResp).(*pb.RateLimitResponse)
	s := proto.Clone(slResp).(*pb.RateLimitResponse)

	denied := r.OverallCode == overLimit
	for _, st := range r.Statuses {
		denied = denied || st.Code == overLimit
	}
	goOn := !denied
	var notes []string
	note := func(id string) {
		if !slices.Contains(notes, id) {
			notes = append(notes, id)
		}
	}
	limitOnly := func(i int) {
		for _, x := range []*pb.RateLimitResponse{r, s} {
			x.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{CurrentLimit: x.Statuses[i].CurrentLimit}
		}
	}

	mode := "full"
	compareHeaders := true
	overCounter := map[string]bool{} // counters the reference took over their limit
	for i := range n {
		rs := r.Statuses[i]
		key := counter(req.Descriptors[i])
		if overCounter[key] {
			note(documentedDuplicate)
			goOn, compareHeaders = false, false
			limitOnly(i)
			continue
		}
		if rs.CurrentLimit == nil {
			continue // compared below
		}
		rpu := uint64(rs.CurrentLimit.RequestsPerUnit)
		over := rs.Code == overLimit
		// A quota_mode descriptor over its limit is the only status with
		// a limit and no duration_until_reset: the reference counted hits
		// over the limit, which sluice does not.
		if rs.Code == ok && rs.DurationUntilReset == nil {
			over, goOn = true, false
		}
		// A shadow_mode descriptor over its limit is OK in both, but the
		// reference counts those hits.
		if isShadow(req.Descriptors[i]) {
			prev, seen := seq.remaining[key]
			if !seen {
				prev = uint32(rpu)
			}
			if hits(req, i) > uint64(prev) {
				over, goOn = true, false
			}
			seq.remaining[key] = rs.LimitRemaining
		}
		if over {
			overCounter[key] = true
		}
	}

	if denied {
		// Only the descriptors the reference says are OVER_LIMIT keep
		// their limit_remaining (0) and duration_until_reset: the others
		// are a peek in sluice (nothing of a denied request counts) and
		// counted in the reference (COMPAT.md items 1, 2).
		mode = "at the reference's first denial"
		for i := range n {
			rs, ss := r.Statuses[i], s.Statuses[i]
			if rs.Code == overLimit && ss.Code == ok && c.earlierSame(req, i) {
				// The reference counted an earlier descriptor of the
				// request on this counter, which sluice did not.
				note(documentedDuplicate)
				ss.Code = overLimit
				compareHeaders = false
			}
			if rs.Code != overLimit {
				for _, x := range []*pb.RateLimitResponse{r, s} {
					x.Statuses[i].LimitRemaining, x.Statuses[i].DurationUntilReset = 0, nil
				}
			}
		}
	}
	if !compareHeaders {
		r.ResponseHeadersToAdd, s.ResponseHeadersToAdd = nil, nil
	}
	alignResponse(r, s, slack)
	if !proto.Equal(r, s) {
		return report(mode, "responses differ"+tolerated(notes))
	}
	c.mu.Lock()
	if denied {
		c.denials++
	} else {
		c.full++
	}
	c.mu.Unlock()
	c.tolerate(seq, req, refResp, slResp, notes, nil)
	return outcome{goOn: goOn, denied: denied}
}

// tolerate counts the tolerated differences ids and keeps the first
// occurrence of each.
func (c *checker) tolerate(seq *sequence, req *pb.RateLimitRequest, ref, sl *pb.RateLimitResponse, ids []string, slErr error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if c.seen[id] == 0 {
			c.example[id] = fmt.Sprintf("%s\n    request:   %s\n    reference: %s\n    sluice:    %s %s",
				seq.label, text(req), text(ref), errText(slErr), text(sl))
		}
		c.seen[id]++
	}
}

func tolerated(notes []string) string {
	if len(notes) == 0 {
		return ""
	}
	return " (after tolerating: " + strings.Join(notes, "; ") + ")"
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return "error " + err.Error()
}

// earlierSame reports whether a descriptor before i in req counts in the
// same counter.
func (c *checker) earlierSame(req *pb.RateLimitRequest, i int) bool {
	k := counter(req.Descriptors[i])
	for j := range i {
		if counter(req.Descriptors[j]) == k {
			return true
		}
	}
	return false
}

// alignResponse copies the reference's duration_until_reset and
// RateLimit-Reset into sluice's answer where they differ by no more than
// the two services' clock reads can explain: a second of rounding (the
// reference counts whole seconds), plus slack, the time from before the
// first request was sent to after the second answer came (a busy machine
// stretches it).
func alignResponse(r, s *pb.RateLimitResponse, slack time.Duration) {
	tolerance := time.Second + slack
	for i := range min(len(r.Statuses), len(s.Statuses)) {
		rd, sd := r.Statuses[i].DurationUntilReset, s.Statuses[i].DurationUntilReset
		if rd != nil && sd != nil && absDuration(rd.AsDuration()-sd.AsDuration()) <= tolerance {
			s.Statuses[i].DurationUntilReset = proto.Clone(rd).(*durationpb.Duration)
		}
	}
	for _, name := range resetHeaders {
		rv, sv := header(r, name), header(s, name)
		if rv == nil || sv == nil {
			continue
		}
		a, errA := strconv.ParseInt(rv.Value, 10, 64)
		b, errB := strconv.ParseInt(sv.Value, 10, 64)
		secs := int64((tolerance + time.Second - 1) / time.Second)
		if errA == nil && errB == nil && a-b <= secs && b-a <= secs {
			sv.Value = rv.Value
		}
	}
}

// resetHeaders are the names the tests give the reset header: the
// default, and TestCompatModes' LIMIT_RESET_HEADER.
var resetHeaders = []string{"RateLimit-Reset", "X-RL-Reset"}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func header(r *pb.RateLimitResponse, name string) *core.HeaderValue {
	for _, h := range r.ResponseHeadersToAdd {
		if strings.EqualFold(h.Key, name) {
			return h
		}
	}
	return nil
}

func headersOnly(r *pb.RateLimitResponse) *pb.RateLimitResponse {
	return &pb.RateLimitResponse{ResponseHeadersToAdd: r.ResponseHeadersToAdd}
}

// summary logs how much was compared and every tolerated difference.
func (c *checker) summary(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Logf("compared %d requests: %d in full, %d at the reference's first denial", c.requests, c.full, c.denials)
	ids := make([]string, 0, len(c.seen))
	for id := range c.seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		t.Logf("tolerated %d times: %s\n  first: %s", c.seen[id], id, c.example[id])
	}
}
