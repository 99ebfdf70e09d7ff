package engine

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/service/config"
)

// roundTripConfig has a limit counting admitted hits, one counting all, and
// a descriptor with one of each.
const roundTripConfig = `
domain: t
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: all
    rate_limit: {unit: minute, requests_per_unit: 100, counting: all}
  - key: both
    rate_limits:
      - {unit: second, requests_per_unit: 100, counting: all}
      - {unit: minute, requests_per_unit: 1000}
`

// commandCalls is the number of calls of each command Redis has run since
// its statistics were last reset (INFO commandstats).
func commandCalls(t *testing.T, srv *redistest.Instance) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, l := range strings.Split(srv.MustDo("INFO", "commandstats"), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.Atoi(v)
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out
}

// TestOneRoundTrip counts the commands that a request's limits cost a real
// redis-server: every enforcing limit of a request, those counting all
// hits included, is one EVALSHA; deciding the limits counting all apart
// costs one more each. The answers are the same.
func TestOneRoundTrip(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte(roundTripConfig))
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Server(t)
	rs, err := redisstore.Open(context.Background(), srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	reqs := []struct {
		name  string
		descs []Descriptor
		apart int // EVALSHA calls when the charges are decided apart
	}{
		{"admitted and all", []Descriptor{d("user", "a", -1), d("all", "a", -1)}, 2},
		{"one descriptor of both", []Descriptor{d("both", "a", -1)}, 2},
		{"two charges and one admitted", []Descriptor{d("all", "b", -1), d("user", "b", -1), d("both", "b", -1)}, 3},
	}
	for _, apart := range []bool{false, true} {
		e := New(rs, cfg)
		e.chargesApart = apart
		for _, r := range reqs {
			req := &Request{Domain: "t", Descriptors: r.descs}
			if _, err := e.Decide(context.Background(), req); err != nil { // loads the scripts
				t.Fatal(err)
			}
			srv.MustDo("CONFIG", "RESETSTAT")
			res, err := e.Decide(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if res.Code != OK {
				t.Errorf("%s: Decide = %v, want OK", r.name, res.Code)
			}
			// The commands a script runs count too: only the scripts'
			// calls are round trips.
			calls := commandCalls(t, srv)
			want := 1
			if apart {
				want = r.apart
			}
			if calls["evalsha"] != want || calls["eval"] != 0 {
				t.Errorf("%s (apart %v): EVALSHA %d and EVAL %d calls, want %d and 0 (commands %v)", r.name, apart, calls["evalsha"], calls["eval"], want, calls)
			}
		}
	}
}

// TestCrossSlotApart decides a request whose limits lie in different
// Redis Cluster slots through failover, as sluice serve does: they cannot
// be one script, so they are decided one by one, each on Redis, and the
// answer is not degraded.
func TestCrossSlotApart(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte(roundTripConfig))
	if err != nil {
		t.Fatal(err)
	}
	cl := redistest.Cluster(t, 3, 0)
	rs, err := redisstore.Open(context.Background(), "redis+cluster://"+strings.Join(cl.Addrs(), ","))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	// A deadline no scheduling delay reaches: only a store error may
	// degrade a decision here.
	fs, err := failover.New(rs, failover.WithDefaultMode(sluice.FailClosed), failover.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	e := New(fs, cfg)
	for _, descs := range [][]Descriptor{
		{d("user", "a", -1), d("all", "b", -1)},  // a charge and another
		{d("user", "c", -1), d("user", "d", -1)}, // two counting admitted
	} {
		for i := range 3 {
			res, err := e.Decide(context.Background(), &Request{Domain: "t", Descriptors: descs})
			if err != nil {
				t.Fatal(err)
			}
			for j, st := range res.Statuses {
				if st.Code != OK || st.Remaining != uint32(100-i-1) {
					t.Errorf("Decide %d: status %d = %v, remaining %d; want OK, %d", i, j, st.Code, st.Remaining, 100-i-1)
				}
			}
		}
	}
}
