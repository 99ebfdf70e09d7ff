package compat

import (
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testserver/window"
	"google.golang.org/protobuf/proto"
)

// TestCompatCountingAll runs sluice with --counting all, the reference's
// counting (every hit recorded, a denied one and one above the limit
// included), on its memory store and on Redis, each next to its own
// reference, on the random sequences of TestCompat,
// and requires the same answers, every field of every response, denials
// included: the sequences go on past the reference's denials, where the
// default counting differs by design (COMPAT.md item 1). With every limit
// of testdata/compat.yaml a fixed window, no difference is tolerated.
func TestCompatCountingAll(t *testing.T) {
	referenceBin(t)
	yaml, err := filepath.Abs(filepath.Join("testdata", "compat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	seed, sequences := randomSettings(t)
	t.Logf("seed %d (replay with SLUICE_COMPAT_SEED=%d), %d random sequences", seed, seed, sequences)
	for k, st := range compatStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ref := startReference(t, yaml)
			sl := startSluice(t, "sluice --counting all, "+st.name, yaml, append([]string{"--counting", "all"}, st.flags(t)...)...)
			k := uint64(k)
			c := newChecker(ref, sl)
			tok := tokens(rand.New(rand.NewPCG(seed, 400+k)))
			t.Run("denied hits are counted", func(t *testing.T) {
				inOneMinute(t, func(w window.TB) {
					x := d("plain", tok()) // 5 per minute
					for range 5 {
						c.same(t, newSequence("denied hits"), rq(x))
					}
					for range 2 {
						ref, sl := call(t, c, rq(x))
						statusIs(w, "reference", ref, 0, overLimit, 0)
						statusIs(w, "sluice", sl, 0, overLimit, 0)
					}
					// A peek: both counters are at 7 > 5.
					ref, sl := call(t, c, rq(withHits(x, 0)))
					statusIs(w, "reference", ref, 0, overLimit, 0)
					statusIs(w, "sluice", sl, 0, overLimit, 0)
				})
			})
			t.Run("hits above the limit are counted", func(t *testing.T) {
				inOneMinute(t, func(w window.TB) {
					x := d("plain", tok())
					seq := newSequence("above the limit")
					for _, req := range []*pb.RateLimitRequest{rq(withHits(x, 9)), rq(withHits(x, 0)), rq(x, d("plain", tok()))} {
						if o := c.same(t, seq, req); !o.denied {
							w.Errorf("%s: not denied, want OVER_LIMIT in both", text(req))
						}
					}
				})
			})
			t.Run("random", func(t *testing.T) {
				testRandomAll(t, c, rand.New(rand.NewPCG(seed, 500+k)), sequences)
			})
			t.Run("json", func(t *testing.T) {
				cj := newChecker(ref, sl)
				cj.json = true
				testRandomAll(t, cj, rand.New(rand.NewPCG(seed, 600+k)), max(sequences/5, 1))
				cj.summary(t)
			})
			c.summary(t)
		})
	}
}

// same sends req to both services and requires the same answer in full
// (duration_until_reset and RateLimit-Reset within 1 s): every descriptor,
// every field, denials included. A difference after a window boundary of
// the sequence passed abandons it.
func (c *checker) same(t *testing.T, seq *sequence, req *pb.RateLimitRequest) outcome {
	t.Helper()
	asked := time.Now()
	refResp, refErr := c.ask(c.ref, req)
	slResp, slErr := c.ask(c.sl, req)
	slack := time.Since(asked)
	c.mu.Lock()
	c.requests++
	c.mu.Unlock()
	differs := refErr != nil || slErr != nil
	var denied bool
	if !differs {
		r := proto.Clone(refResp).(*pb.RateLimitResponse)
		s := proto.Clone(slResp).(*pb.RateLimitResponse)
		alignResponse(r, s, slack)
		differs = !proto.Equal(r, s)
		denied = r.OverallCode == overLimit
		for _, st := range r.Statuses {
			denied = denied || st.Code == overLimit
		}
	}
	if differs {
		if now := time.Now(); now.Truncate(seq.window) != seq.start.Truncate(seq.window) {
			t.Logf("%s: differs but the sequence crossed a %v boundary: abandoned", seq.label, seq.window)
			return outcome{abandoned: true}
		}
		t.Errorf("%s: responses differ\nrequest:   %s\nreference: %v %s\nsluice:    %v %s", seq.label,
			text(req), errText(refErr), text(refResp), errText(slErr), text(slResp))
		return outcome{failed: true}
	}
	c.mu.Lock()
	if denied {
		c.denials++
	} else {
		c.full++
	}
	c.mu.Unlock()
	return outcome{goOn: true, denied: denied}
}

// testRandomAll runs the random sequences of testRandom, compared in full
// by checker.same, past denials to each sequence's last request.
func testRandomAll(t *testing.T, c *checker, r *rand.Rand, sequences int) {
	requests, denied, stopped := randomSequences(t, r, sequences, c.same)
	t.Logf("%d sequences, %d requests compared in full, %d of them denied; %d sequences abandoned at a window boundary",
		sequences, requests, denied, stopped)
}
