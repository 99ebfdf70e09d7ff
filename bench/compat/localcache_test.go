package compat

import (
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/window"
)

// TestCompatLocalCache: with LOCAL_CACHE_SIZE_IN_BYTES, under the
// reference's environment only, both answer alike, compared in full, the
// requests on keys that went over their limit (denied from the local
// cache until the window ends) included: a hit, several, none
// (hits_addend 0), beside another descriptor, on a nested and a shadow_mode
// rule.
func TestCompatLocalCache(t *testing.T) {
	referenceBin(t)
	yaml, err := filepath.Abs(filepath.Join("testdata", "compat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// REDIS_TIMEOUT: a deadline that a busy machine cannot pass.
	env := []string{"LOCAL_CACHE_SIZE_IN_BYTES=1048576", "REDIS_TIMEOUT=5s"}
	ref := startReference(t, yaml, env...)
	sl := startSluiceRefEnv(t, redistest.Server(t), yaml, env...)
	c := newChecker(ref, sl)
	tok := tokens(rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 28)))
	inOneMinute(t, func(w window.TB) {
		x := d("plain", tok()) // 5 a minute
		y := d("org", tok(), "user", tok())
		s := d("shadow", tok())
		seq := newSequence("local cache")
		reqs := []*pb.RateLimitRequest{rqHits(4, x), rq(x), rq(x), rq(x), rqHits(3, x), rq(withHits(x, 0)), rq(x, d("plain", tok()))}
		for range 6 {
			reqs = append(reqs, rq(y), rq(s))
		}
		for _, req := range reqs {
			if o := c.same(t, seq, req); o.failed || o.abandoned {
				return
			}
		}
	})
	c.summary(t)
}
