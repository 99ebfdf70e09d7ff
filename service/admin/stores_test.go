package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rls"
	"github.com/sluicehq/sluice/service/server"
	"github.com/sluicehq/sluice/stack"
)

// TestRedisInspectReset inspects and resets a rule's counter in a real
// Redis, through redisstore and through the stack sluice serve --redis
// --tiered builds, and checks that a second engine on
// the same Redis, another replica, sees the reset.
func TestRedisInspectReset(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	open := func(t *testing.T) sluice.Store {
		rs, err := redisstore.Open(ctx, srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		return rs
	}
	stores := map[string]func(t *testing.T) sluice.Store{
		"redisstore": open,
		"stack": func(t *testing.T) sluice.Store {
			// A busy machine's round trips outlast failover's default
			// 50 ms: a decision degraded by one would be denied.
			s, err := stack.New(open(t), stack.WithTiered(), stack.WithFailover(failover.WithTimeout(10*time.Second)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, mk(t), Auth{})
			if _, ok := f.store.(sluice.Resetter); !ok {
				t.Fatalf("%T cannot reset", f.store)
			}
			replica := engine.New(open(t), f.eng.Config())
			user := engine.Entry{Key: "user", Value: "redis-" + name}
			if got := decide(t, f.eng, 3, user); got != 3 {
				t.Fatalf("admitted %d of 3", got)
			}
			_, body, _ := f.do(t, "GET", "/admin/v1/inspect?domain=api&descriptor=user=redis-"+name, "")
			if st := decodeInspect(t, body).Descriptors[0].Rules[0].State; st.Remaining != 0 || !st.Over || st.RetryAfterMS <= 0 {
				t.Fatalf("inspect = %s, want used up", body)
			}
			if got := decide(t, replica, 1, user); got != 0 {
				t.Fatalf("the replica admitted %d before the reset, want 0", got)
			}
			if code, body, _ := f.do(t, "POST", "/admin/v1/reset?domain=api&descriptor=user=redis-"+name, ""); code != 200 {
				t.Fatalf("reset = %d %s", code, body)
			}
			if got := decide(t, replica, 4, user); got != 3 {
				t.Errorf("the replica admitted %d of 4 after the reset, want the full limit 3", got)
			}
		})
	}
}

// TestCheckKeyNamespace checks that a key selector is the state POST
// /v1/check counts on.
func TestCheckKeyNamespace(t *testing.T) {
	store := memstore.New()
	f := newFixture(t, store, Auth{})
	api := server.New(rls.New(f.eng), store)
	check := func() bool {
		r := httptest.NewRequest("POST", "/v1/check", strings.NewReader(`{"key":"k1","algorithm":"gcra","rate":2,"period":"1m"}`))
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("/v1/check = %d %s", w.Code, w.Body)
		}
		return strings.Contains(w.Body.String(), `"allowed":true`)
	}
	if c1, c2, c3 := check(), check(), check(); !c1 || !c2 || c3 {
		t.Fatalf("/v1/check x3 allowed = %v %v %v, want true true false", c1, c2, c3)
	}
	_, body, _ := f.do(t, "GET", "/admin/v1/inspect?key=k1&algorithm=gcra&rate=2&period=1m", "")
	if st := decodeInspect(t, body).State; st == nil || st.Remaining != 0 || !st.Over || st.RetryAfterMS <= 0 || st.RetryAfterMS > 30_000 {
		t.Fatalf("inspect = %s, want used up, a retry within 30s", body)
	}
	if code, body, _ := f.do(t, "POST", "/admin/v1/reset?key=k1&algorithm=gcra&rate=2&period=1m", ""); code != 200 {
		t.Fatalf("reset = %d %s", code, body)
	}
	if c1, c2 := check(), check(); !c1 || !c2 {
		t.Errorf("/v1/check after reset allowed = %v %v, want true true", c1, c2)
	}
}
