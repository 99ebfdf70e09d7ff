package compat

import (
	"fmt"
	"slices"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testserver/window"
)

// testFixedSharePattern reproduces share-pattern-value (fixedDifferences).
func testFixedSharePattern(t *testing.T, c *checker, tok func() string) {
	st := func(r *pb.RateLimitResponse, i int) *pb.RateLimitResponse_DescriptorStatus { return r.GetStatuses()[i] }
	t.Run("share-pattern-value", func(t *testing.T) {
		inOneMinute(t, func(w window.TB) {
			v := tok()
			// Three values on the shared counter of 4 per minute, then the
			// pattern itself: the reference's fourth hit on it, the last
			// one admitted.
			for _, x := range []string{"shA", "shB", "sh" + v} {
				call(t, c, rq(d("grp", v, "shr", x)))
			}
			req := rq(d("grp", v, "shr", "sh*"))
			ref, sl := call(t, c, req)
			msg := fmt.Sprintf("%s\n  request:   %s\n  reference: %s\n  sluice:    %s", fixedWhat("share-pattern-value"), text(req), text(ref), text(sl))
			statusIs(w, "reference", ref, 0, ok, 0)
			if st(sl, 0).Code != ok || st(sl, 0).LimitRemaining != 0 {
				w.Errorf("share-pattern-value: %s", msg)
			}
			// And the next value matching the wildcard is denied.
			req = rq(d("grp", v, "shr", "shZ"))
			ref, sl = call(t, c, req)
			statusIs(w, "reference", ref, 0, overLimit, 0)
			if st(sl, 0).Code != overLimit {
				w.Errorf("share-pattern-value, the next value: %s\n  request:   %s\n  reference: %s\n  sluice:    %s",
					"sluice admits it", text(req), text(ref), text(sl))
			}
		})
	})
}

// testHeaderNames: the RateLimit-* response headers (on in both: the
// reference's LIMIT_RESPONSE_HEADERS_ENABLED, sluice's --response-headers)
// have the reference's default names, in its order, over gRPC and /json:
// for a request admitted, one denied, and none for a request with no limit.
// Renamed headers (the reference's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER,
// LIMIT_RESET_HEADER; sluice's --limit-header, --remaining-header,
// --reset-header) are compared in TestCompatModes.
func testHeaderNames(t *testing.T, c *checker, tok func() string) {
	want := []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}
	names := func(r *pb.RateLimitResponse) []string {
		var out []string
		for _, h := range r.ResponseHeadersToAdd {
			out = append(out, h.Key)
		}
		return out
	}
	for _, transport := range []string{"gRPC", "json"} {
		cc := newChecker(c.ref, c.sl)
		cc.json = transport == "json"
		t.Run(transport, func(t *testing.T) {
			inOneMinute(t, func(w window.TB) {
				x := d("plain", tok())
				for _, tc := range []struct {
					name string
					req  *pb.RateLimitRequest
					want []string
				}{
					{"admitted", rq(x), want},
					{"denied", rq(withHits(x, 6)), want},
					{"no limit", rq(d("nomatch", tok())), nil},
				} {
					ref, sl := call(t, cc, tc.req)
					if !slices.Equal(names(ref), tc.want) || !slices.Equal(names(sl), tc.want) {
						w.Errorf("%s: header names: reference %q, sluice %q, want %q", tc.name, names(ref), names(sl), tc.want)
					}
				}
			})
		})
	}
}
