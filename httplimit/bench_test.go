package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// BenchmarkMiddleware measures the middleware alone (no network): one and
// two policies on memstore, all headers, keys=1 and keys=10000.
func BenchmarkMiddleware(b *testing.B) {
	big := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1_000_000, Period: time.Second}
	for _, policies := range []int{1, 2} {
		for _, keys := range []int{1, 10000} {
			b.Run("policies="+strconv.Itoa(policies)+"/keys="+strconv.Itoa(keys), func(b *testing.B) {
				ps := []httplimit.Policy{{Name: "tenant", Limit: big}}
				if policies == 2 {
					ps = append(ps, httplimit.Policy{Name: "global", Limit: big, Key: httplimit.Constant("all")})
				}
				mw, err := httplimit.New(sluice.New(newMemStore(b)), ps, httplimit.WithKey(httplimit.Header("X-Tenant")))
				if err != nil {
					b.Fatal(err)
				}
				h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
				reqs := make([]*http.Request, keys)
				for i := range reqs {
					reqs[i] = httptest.NewRequest(http.MethodGet, "/", nil)
					reqs[i].Header.Set("X-Tenant", "t"+strconv.Itoa(i))
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, reqs[i%keys])
					i++
				}
			})
		}
	}
}
