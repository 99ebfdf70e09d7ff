package topk

import (
	"encoding/json"
	"hash/maphash"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTracker(t testing.TB, opts Options) (*Tracker, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	opts.Now = clk.Now
	tr, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return tr, clk
}

func keyOf(i int) string { return "tenant=t" + strconv.Itoa(i) }

// TestZipf feeds 1M denials over 100k keys drawn from a Zipf distribution
// and checks the true top 10 are reported, each reported count within its
// error of the truth, and every error within the bound.
func TestZipf(t *testing.T) {
	const total, keys = 1_000_000, 100_000
	tr, _ := newTracker(t, Options{})
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, 1.1, 1, keys-1)
	truth := make([]int, keys)
	for range total {
		i := int(z.Uint64())
		truth[i]++
		tr.Denied("d", "rule", "d/"+keyOf(i))
	}
	rep := tr.Report("d", "rule", MaxN)
	if len(rep.Rules) != 1 {
		t.Fatalf("rules = %d, want 1", len(rep.Rules))
	}
	ru := rep.Rules[0]
	if ru.Denials != total {
		t.Errorf("denials = %d, want %d", ru.Denials, total)
	}
	order := make([]int, keys)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return truth[b] - truth[a] })
	reported := map[string]Key{}
	for _, k := range ru.Keys {
		reported[k.Key] = k
	}
	var maxErr, maxOff uint64
	for _, k := range ru.Keys {
		i, _ := strconv.Atoi(strings.TrimPrefix(k.Key, "tenant=t"))
		tc := uint64(truth[i])
		if k.Count-k.Error > tc || tc > k.Count {
			t.Errorf("%s: count %d error %d, true %d: outside [count-error, count]", k.Key, k.Count, k.Error, tc)
		}
		if k.Error > ru.Bound {
			t.Errorf("%s: error %d > bound %d", k.Key, k.Error, ru.Bound)
		}
		maxErr = max(maxErr, k.Error)
		maxOff = max(maxOff, k.Count-tc)
	}
	for rank, i := range order[:10] {
		k, ok := reported[keyOf(i)]
		if !ok {
			t.Errorf("true top %d %s (%d denials) not reported", rank+1, keyOf(i), truth[i])
			continue
		}
		if got := ru.Keys[rank].Key; got != keyOf(i) {
			t.Logf("rank %d: reported %s, true %s", rank+1, got, keyOf(i))
		}
		t.Logf("top %2d %-14s true %6d reported %6d error %d", rank+1, keyOf(i), truth[i], k.Count, k.Error)
	}
	// Every key with more than N/m denials is held (checked on the top 100
	// reported: the keys past them may be reported further down).
	for _, i := range order[:MaxN] {
		if uint64(truth[i]) > ru.Bound {
			if _, ok := reported[keyOf(i)]; !ok {
				t.Errorf("%s denied %d > bound %d times, not reported", keyOf(i), truth[i], ru.Bound)
			}
		}
	}
	t.Logf("1M denials, 100k keys, Zipf s=1.1: bound N_s/m_s = %d, largest reported error %d, largest overestimate %d", ru.Bound, maxErr, maxOff)
}

// TestWindow checks that a report covers the previous and the current
// window and forgets older ones, and merges the two windows' counts.
func TestWindow(t *testing.T) {
	tr, clk := newTracker(t, Options{Counters: 8, Window: time.Minute})
	for range 5 {
		tr.Denied("d", "r", "d/a=1")
	}
	clk.Add(time.Minute)
	for range 3 {
		tr.Denied("d", "r", "d/a=1")
	}
	tr.Denied("d", "r", "d/b=2")
	rep := tr.Report("", "", 10)
	ks := rep.Rules[0].Keys
	if len(ks) != 2 || ks[0] != (Key{Key: "a=1", Count: 8}) || ks[1] != (Key{Key: "b=2", Count: 1}) {
		t.Errorf("keys = %+v, want a=1:8, b=2:1", ks)
	}
	if want := clk.Now().Add(-time.Minute); !rep.From.Equal(want) {
		t.Errorf("from = %v, want %v", rep.From, want)
	}
	clk.Add(time.Minute) // the first window is forgotten
	ks = tr.Report("", "", 10).Rules[0].Keys
	if len(ks) != 2 || ks[0].Count != 3 {
		t.Errorf("a window later: keys = %+v, want a=1:3, b=2:1", ks)
	}
	clk.Add(2 * time.Minute)
	if ks = tr.Report("", "", 10).Rules[0].Keys; len(ks) != 0 {
		t.Errorf("two windows later: keys = %+v, want none", ks)
	}
}

// TestMergeMissing checks that a key missing from a full window's summary
// counts that summary's smallest counter, as count and as error.
func TestMergeMissing(t *testing.T) {
	tr, clk := newTracker(t, Options{Counters: Stripes, Window: time.Minute}) // one counter per stripe
	// Find two keys of one stripe.
	var a, b string
	seen := map[uint64]string{}
	for i := 0; a == ""; i++ {
		k := "k=" + strconv.Itoa(i)
		s := tr.stripeOf(k)
		if o, ok := seen[s]; ok {
			a, b = o, k
		}
		seen[s] = k
	}
	for range 4 {
		tr.Denied("d", "r", "d/"+a)
	}
	clk.Add(time.Minute)
	tr.Denied("d", "r", "d/"+b)
	ks := tr.Report("d", "r", 10).Rules[0].Keys
	// a: 4 in the previous window, at most 1 in the current one (full,
	// holding b once); b: 1 in the current window, at most 4 in the
	// previous one (full, holding a 4 times).
	want := []Key{{Key: a, Count: 5, Error: 1}, {Key: b, Count: 5, Error: 4}}
	if !slices.Equal(ks, want) {
		t.Errorf("keys = %+v, want %+v", ks, want)
	}
}

func (t *Tracker) stripeOf(k string) uint64 {
	return maphash.String(t.seed, k) % Stripes
}

func TestEntries(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"dom/tenant=acme", "tenant=acme"},
		{`d\/x/a=b/c=d`, "a=b/c=d"},
		{`d\\/a=b`, "a=b"},
		{"nodomain", "nodomain"},
	} {
		if got := Entries(tt.in); got != tt.want {
			t.Errorf("Entries(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	long := "d/k=" + strings.Repeat("é", 300)
	got := Entries(long)
	if len(got) > MaxKeyBytes || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "k=é") {
		t.Errorf("Entries(long) = %q (%d bytes), want at most %d bytes ending in …", got, len(got), MaxKeyBytes)
	}
}

func TestMaxRules(t *testing.T) {
	tr, _ := newTracker(t, Options{MaxRules: 2})
	for i := range 3 {
		tr.Denied("d", "r"+strconv.Itoa(i), "d/a=1")
	}
	rep := tr.Report("", "", 10)
	if len(rep.Rules) != 2 || rep.Untracked != 1 {
		t.Errorf("rules %d untracked %d, want 2 and 1", len(rep.Rules), rep.Untracked)
	}
}

func TestOptions(t *testing.T) {
	for _, tt := range []struct {
		o     Options
		field string
	}{
		{Options{Counters: 3}, "Counters"},
		{Options{Counters: MaxCounters + 1}, "Counters"},
		{Options{MaxRules: -1}, "MaxRules"},
		{Options{Window: time.Microsecond}, "Window"},
	} {
		_, err := New(tt.o)
		oe, ok := err.(*OptionError)
		if !ok || oe.Field != tt.field {
			t.Errorf("New(%+v) = %v, want an OptionError on %s", tt.o, err, tt.field)
		}
	}
}

func TestHandler(t *testing.T) {
	tr, _ := newTracker(t, Options{})
	for i := range 5 {
		for range i + 1 {
			tr.Denied("dom", "per_tenant", "dom/"+keyOf(i))
		}
	}
	tr.Denied("other", "x", "other/a=b")
	srv := httptest.NewServer(Handler(tr, "replica-1"))
	defer srv.Close()
	res, err := http.Get(srv.URL + "?domain=dom&n=2")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var a Answer
	if err := json.NewDecoder(res.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	if a.Replica != "replica-1" || a.Scope != "replica" || len(a.Rules) != 1 || a.Window != 60 {
		t.Fatalf("answer = %+v", a)
	}
	want := []Key{{Key: keyOf(4), Count: 5}, {Key: keyOf(3), Count: 4}}
	if r := a.Rules[0]; r.Domain != "dom" || r.Rule != "per_tenant" || r.Denials != 15 || !slices.Equal(r.Keys, want) {
		t.Errorf("rule = %+v, want dom/per_tenant, 15 denials, keys %+v", r, want)
	}
	for _, q := range []struct{ q, field string }{
		{"n=0", "n"}, {"n=101", "n"}, {"n=x", "n"},
		{"domain=" + strings.Repeat("a", MaxQueryName+1), "domain"},
		{"rule=" + strings.Repeat("a", MaxQueryName+1), "rule"},
	} {
		res, err := http.Get(srv.URL + "?" + q.q)
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ Field string }
		json.NewDecoder(res.Body).Decode(&p)
		res.Body.Close()
		if res.StatusCode != 400 || p.Field != q.field || res.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("?%.20s: %d field %q, want 400 naming %s", q.q, res.StatusCode, p.Field, q.field)
		}
	}
}

// BenchmarkDenied is the cost of recording a denial on one hot rule, from
// every P, over 10k keys.
func BenchmarkDenied(b *testing.B) {
	tr, _ := newTracker(b, Options{})
	tr.now = time.Now
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "dom/" + keyOf(i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			tr.Denied("dom", "per_tenant", keys[(i*7919)%len(keys)])
			i++
		}
	})
}

// BenchmarkDeniedHot is a denial of one key already counted: no allocation.
func BenchmarkDeniedHot(b *testing.B) {
	tr, _ := newTracker(b, Options{})
	tr.now = time.Now
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tr.Denied("dom", "per_tenant", "dom/tenant=acme")
		}
	})
}
