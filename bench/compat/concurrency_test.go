package compat

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// workers is the number of goroutines of the concurrent subtests.
const workers = 32

// concurrently runs f(g, j) for g < workers goroutines, j < each times, all
// goroutines at once. It skips the test if an hour boundary (the unit of
// conc and race in testdata/compat.yaml) passed meanwhile.
func concurrently(t *testing.T, each int, f func(g, j int)) {
	t.Helper()
	awayFromBoundary()
	start := time.Now()
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for g := range workers {
		wg.Go(func() {
			<-begin
			for j := range each {
				f(g, j)
			}
		})
	}
	close(begin)
	wg.Wait()
	if time.Now().Truncate(time.Hour) != start.Truncate(time.Hour) {
		t.Skip("an hour boundary passed during the concurrent requests")
	}
}

// testConcurrency sends requests from many goroutines at once to both
// services, on a few shared counters.
func testConcurrency(t *testing.T, c *checker, tok func() string) {
	t.Run("under the limits", func(t *testing.T) { concurrentUnder(t, c, tok) })
	t.Run("over the limit", func(t *testing.T) {
		v := tok()
		concurrentOver(t, c, rq(d("race", v)), []*rlpb.RateLimitDescriptor{d("race", v)})
	})
	t.Run("over the limit, two counters per request", func(t *testing.T) {
		a, b := d("race", tok()), d("race", tok())
		concurrentOver(t, c, rq(a, b), []*rlpb.RateLimitDescriptor{a, b})
	})
}

// concurrentUnder: workers goroutines send requests on three per-value
// counters (conc=v, 1000 per hour) and one share_threshold counter
// (conc=sh..., 1000 per hour), one or several descriptors per request, with
// costs of 0 to 3, never reaching a limit: both services must admit every
// request and count every hit, so that a peek afterwards finds on each
// counter exactly the limit less the costs sent to it.
func concurrentUnder(t *testing.T, c *checker, tok func() string) {
	const each = 24
	vals := []string{tok(), tok(), tok()}
	base := tok()
	shared := func(g int) *rlpb.RateLimitDescriptor { return d("conc", "sh"+base+strconv.Itoa(g)) }
	at := func(i int) *rlpb.RateLimitDescriptor { return d("conc", vals[i%3]) }
	reqOf := func(g, j int) *pb.RateLimitRequest {
		switch j % 4 {
		case 0:
			return rqHits(uint32(1+(g+j)%3), at(g+j))
		case 1:
			return rq(at(g), shared(g))
		case 2:
			return rq(withHits(at(g+1), 2), withHits(at(g+2), 0))
		default: // the shared counter twice, by two values
			return rq(shared(g), at(j), shared(j))
		}
	}
	// The costs each counter must have counted.
	sums := map[string]uint64{}
	peek := map[string]*rlpb.RateLimitDescriptor{}
	for g := range workers {
		for j := range each {
			req := reqOf(g, j)
			for i, x := range req.Descriptors {
				k := counter(x)
				sums[k] += hits(req, i)
				peek[k] = withHits(x, 0)
			}
		}
	}
	const limit = 1000
	if len(sums) != 4 {
		t.Fatalf("%d counters, want 4", len(sums))
	}
	for k, n := range sums {
		if n >= limit {
			t.Fatalf("%d hits on %s reach its limit", n, k)
		}
	}

	var mu sync.Mutex
	var bad []string
	fail := func(who string, req *pb.RateLimitRequest, resp *pb.RateLimitResponse, err error) {
		mu.Lock()
		defer mu.Unlock()
		if len(bad) < 5 {
			bad = append(bad, fmt.Sprintf("%s: %s: %v %s", who, text(req), errText(err), text(resp)))
		}
	}
	check := func(who string, req *pb.RateLimitRequest, resp *pb.RateLimitResponse, err error) {
		if err != nil || resp.OverallCode != ok || len(resp.Statuses) != len(req.Descriptors) {
			fail(who, req, resp, err)
			return
		}
		for _, st := range resp.Statuses {
			if st.Code != ok || st.CurrentLimit.GetRequestsPerUnit() != limit || st.CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_HOUR {
				fail(who, req, resp, nil)
				return
			}
		}
	}
	concurrently(t, each, func(g, j int) {
		req := reqOf(g, j)
		ref, err := c.ask(c.ref, req)
		check("reference", req, ref, err)
		sl, err := c.ask(c.sl, req)
		check("sluice", req, sl, err)
	})
	for _, b := range bad {
		t.Errorf("want OK with the limit of conc: %s", b)
	}
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		req := rq(peek[k])
		asked := time.Now()
		ref, sl := call(t, c, req)
		slack := time.Since(asked)
		want := uint32(limit - sums[k])
		statusIs(t, "reference", ref, 0, ok, want)
		statusIs(t, "sluice", sl, 0, ok, want)
		r, s := proto.Clone(ref).(*pb.RateLimitResponse), proto.Clone(sl).(*pb.RateLimitResponse)
		alignResponse(r, s, slack)
		if !proto.Equal(r, s) {
			t.Errorf("peek %s: responses differ\n  reference: %s\n  sluice:    %s", text(req), text(ref), text(sl))
		}
	}
}

// concurrentOver: workers goroutines send 4 requests each (128 in all) of
// cost 1 on race counters (50 per hour), all at once. sluice must admit
// exactly 50: its counter never goes over the limit, and never admits more
// than it. Every admitted answer sees its own count: the limit_remaining of
// the OK answers are 0 to 49, each once. The reference's numbers are
// logged. A peek afterwards: the reference's counters stand at 128 (it
// counts denied hits: OVER_LIMIT), sluice's at 50 (OK, 0 remaining).
func concurrentOver(t *testing.T, c *checker, req *pb.RateLimitRequest, peeks []*rlpb.RateLimitDescriptor) {
	const each, limit = 4, 50
	type tally struct {
		mu        sync.Mutex
		ok, over  int
		remaining [][]uint32 // per descriptor, of the OK answers
		errs      []string
	}
	count := func(tl *tally, resp *pb.RateLimitResponse, err error) {
		tl.mu.Lock()
		defer tl.mu.Unlock()
		if tl.remaining == nil {
			tl.remaining = make([][]uint32, len(req.Descriptors))
		}
		switch {
		case err != nil || len(resp.Statuses) != len(req.Descriptors):
			tl.errs = append(tl.errs, errText(err)+" "+text(resp))
		case resp.OverallCode == ok:
			tl.ok++
			for i, st := range resp.Statuses {
				tl.remaining[i] = append(tl.remaining[i], st.LimitRemaining)
			}
		default:
			tl.over++
		}
	}
	var ref, sl tally
	concurrently(t, each, func(g, j int) {
		resp, err := c.ask(c.ref, req)
		count(&ref, resp, err)
		resp, err = c.ask(c.sl, req)
		count(&sl, resp, err)
	})
	all := make([]uint32, limit)
	for i := range all {
		all[i] = uint32(i)
	}
	distinct := func(tl *tally) bool {
		for _, r := range tl.remaining {
			r = slices.Clone(r)
			slices.Sort(r)
			if !slices.Equal(r, all) {
				return false
			}
		}
		return true
	}
	t.Logf("%s, %d requests at once from %d goroutines: reference admitted %d, denied %d (remaining 0..49 each once: %v); sluice admitted %d, denied %d",
		text(req), workers*each, workers, ref.ok, ref.over, distinct(&ref), sl.ok, sl.over)
	c.observe(fmt.Sprintf("observed, concurrency: %d requests of cost 1 at once on %d counter(s) of %d: OK answers", workers*each, len(peeks), limit),
		fmt.Sprintf("reference %d, sluice %d", ref.ok, sl.ok))
	if len(ref.errs) > 0 || len(sl.errs) > 0 {
		t.Fatalf("errors: reference %q, sluice %q", ref.errs, sl.errs)
	}
	if sl.ok != limit || sl.over != workers*each-limit {
		t.Errorf("sluice admitted %d and denied %d of %d requests, want exactly %d admitted", sl.ok, sl.over, workers*each, limit)
	}
	if !distinct(&sl) {
		t.Errorf("sluice's OK answers do not have the remaining 0 to %d each once: %v", limit-1, sl.remaining)
	}
	for _, x := range peeks {
		r, s := call(t, c, rq(withHits(x, 0)))
		statusIs(t, "reference (counted every hit)", r, 0, overLimit, 0)
		statusIs(t, "sluice", s, 0, ok, 0)
	}
}
