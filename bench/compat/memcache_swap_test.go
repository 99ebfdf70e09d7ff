package compat

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testserver/memcachedtest"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/window"
)

// TestCompatMemcacheSwap: with BACKEND_TYPE=memcache and CACHE_KEY_PREFIX,
// the reference and sluice (under the reference's environment only) count
// on one real memcached under the same item names: hits the reference
// counted in a window are counted by sluice when it takes over in that
// window, and the other way round, nested descriptors included.
func TestCompatMemcacheSwap(t *testing.T) {
	referenceBin(t)
	yaml, err := filepath.Abs(filepath.Join("testdata", "compat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	mc := memcachedtest.Server(t)
	env := []string{"BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT=" + mc.Addr, "CACHE_KEY_PREFIX=swap:"}
	ref := startReferenceOn(t, redistest.Server(t), yaml, env...)
	// SLUICE_REDIS_TIMEOUT: a deadline of every store call that a busy
	// machine cannot pass.
	sl := startSluiceRefEnv(t, redistest.Server(t), yaml, append(env, "SLUICE_REDIS_TIMEOUT=5s")...)
	tok := tokens(rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 27)))
	// counted waits until memcached's item name holds want: the reference
	// adds a request's hits in the background, after it answers. It
	// reports false, with the finding, when the item does not get there
	// (its window may have ended: window.Run then discards the attempt).
	counted := func(w window.TB, name string, want int) bool {
		var got string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			got = mc.MustDo("get " + name)
			if lines := strings.Split(got, "\n"); len(lines) == 3 && lines[1] == strconv.Itoa(want) {
				return true
			}
		}
		w.Errorf("memcached's %s is %q, want the count %d", name, got, want)
		return false
	}
	ask := func(w window.TB, s *service, req *pb.RateLimitRequest, code pb.RateLimitResponse_Code, remaining uint32) bool {
		resp, err := s.should(req)
		if err != nil {
			w.Errorf("%s: %s: %v", s.name, text(req), err)
			return false
		}
		statusIs(w, s.name, resp, 0, code, remaining)
		return true
	}
	inOneMinute(t, func(w window.TB) {
		win := strconv.FormatInt(time.Now().Truncate(time.Minute).Unix(), 10)
		// The reference counts 3 of 5; sluice goes on from 3.
		v := tok()
		x := rq(d("plain", v))
		name := "swap:compat_plain_" + v + "_" + win
		for i := range 3 {
			if !ask(w, ref, x, ok, uint32(4-i)) || !counted(w, name, i+1) {
				return
			}
		}
		ask(w, sl, x, ok, 1)
		ask(w, sl, x, ok, 0)
		ask(w, sl, x, overLimit, 0)
		if !counted(w, name, 6) { // both count a denied hit too
			return
		}
		// sluice counts 2 of 4 on a nested descriptor; the reference goes
		// on from 2.
		o, u := tok(), tok()
		y := rq(d("org", o, "user", u))
		name = fmt.Sprintf("swap:compat_org_%s_user_%s_%s", o, u, win)
		ask(w, sl, y, ok, 3)
		ask(w, sl, y, ok, 2)
		if !counted(w, name, 2) {
			return
		}
		for i, want := range []struct {
			code      pb.RateLimitResponse_Code
			remaining uint32
		}{{ok, 1}, {ok, 0}, {overLimit, 0}} {
			if !ask(w, ref, y, want.code, want.remaining) || !counted(w, name, 3+i) {
				return
			}
		}
	})
}
