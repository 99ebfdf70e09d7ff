package status

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/metrics"
	"github.com/sluicehq/sluice/service/topk"
)

const testConfig = `domain: shop
descriptors:
  - key: tenant
    rate_limit:
      name: per_tenant
      unit: minute
      requests_per_unit: 3
  - key: path
    rate_limit:
      name: per_path
      unit: second
      requests_per_unit: 1000
`

// fixture is a service's metrics, summary and page after known traffic,
// served on loopback.
type fixture struct {
	url  string
	stop func()
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	cfg, err := config.Parse("shop.yaml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	m := metrics.New()
	eng := engine.New(metrics.Observe(st, m, nil), cfg, engine.WithObserver(m))
	ctx := context.Background()
	decide := func(key, value string, times int) {
		for range times {
			req := &engine.Request{Domain: "shop", Hits: 1, Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: key, Value: value}}}}}
			if _, err := eng.Decide(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Rounds of traffic, a sample after each, Interval apart: the
	// sparklines have a history. No decision follows the last sample, so
	// that the page's totals are /metrics'.
	clk := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	page, err := New(Options{
		Gatherer:    m.Registry(),
		Top:         m.Top(),
		Config:      func() *config.Config { return cfg },
		Ready:       func() error { return nil },
		BreakerOpen: func() (bool, bool) { return false, true },
		Replica:     "test-replica",
		Now:         func() time.Time { return clk },
	})
	if err != nil {
		t.Fatal(err)
	}
	page.Sample()
	for i := range 24 {
		decide("tenant", "acme", 2+i%4)
		decide("tenant", "globex", 1+i%2)
		decide("tenant", "initech", i%3/2)
		decide("path", "/cart", 10+i%7*3)
		clk = clk.Add(DefaultInterval)
		page.Sample()
	}
	decide("tenant", "umbrella", 2) // before the last sample: counted in it
	clk = clk.Add(DefaultInterval)
	page.Sample()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{}))
	mux.Handle("GET /admin/top", topk.Handler(m.Top(), "test-replica"))
	mux.Handle("GET /admin/{$}", page)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	f := &fixture{url: "http://" + ln.Addr().String(), stop: func() { srv.Close() }}
	t.Cleanup(f.stop)
	return f
}

func (f *fixture) get(t *testing.T, path string) string {
	t.Helper()
	res, err := http.Get(f.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", path, res.StatusCode, err)
	}
	return string(b)
}

var attrRe = regexp.MustCompile(`([a-z0-9-]+)="([^"]*)"`)

// elements returns the data- attributes of each element of dom with class
// (or id) name.
func elements(dom, attr, name string) []map[string]string {
	re := regexp.MustCompile(`<[a-z]+ [^>]*` + attr + `="` + name + `"[^>]*>`)
	var out []map[string]string
	for _, tag := range re.FindAllString(dom, -1) {
		m := map[string]string{}
		for _, a := range attrRe.FindAllStringSubmatch(tag, -1) {
			m[a[1]] = html.UnescapeString(a[2])
		}
		out = append(out, m)
	}
	return out
}

// promSeries parses the text exposition: the value of each series, keyed
// by name{labels} as written.
func promSeries(t *testing.T, text string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// histogramQuantile computes Prometheus's histogram_quantile over the
// buckets of /metrics.
func histogramQuantile(q float64, series map[string]float64, name string) float64 {
	type b struct{ le, c float64 }
	var bs []b
	re := regexp.MustCompile(`^` + name + `_bucket\{le="([^"]+)"\}$`)
	for k, v := range series {
		if m := re.FindStringSubmatch(k); m != nil {
			le, _ := strconv.ParseFloat(m[1], 64)
			bs = append(bs, b{le, v})
		}
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	total := bs[len(bs)-1].c
	rank := q * total
	for i, x := range bs {
		if x.c >= rank {
			if math.IsInf(x.le, 1) {
				return bs[i-1].le
			}
			lo, below := 0.0, 0.0
			if i > 0 {
				lo, below = bs[i-1].le, bs[i-1].c
			}
			if x.c == below {
				return x.le
			}
			return lo + (x.le-lo)*(rank-below)/(x.c-below)
		}
	}
	return math.NaN()
}

// checkPage asserts that the numbers of the page's dom equal those of
// /metrics and /admin/top.
func checkPage(t *testing.T, dom, metrics, top string) {
	t.Helper()
	series := promSeries(t, metrics)
	var ans topk.Answer
	if err := json.Unmarshal([]byte(top), &ans); err != nil {
		t.Fatal(err)
	}

	if r := elements(dom, "id", "replica"); len(r) != 1 || r[0]["data-replica"] != ans.Replica {
		t.Errorf("replica = %v, want %q", r, ans.Replica)
	}
	if r := elements(dom, "id", "ready"); len(r) != 1 || r[0]["data-ready"] != "true" {
		t.Errorf("ready = %v, want true", r)
	}
	if r := elements(dom, "id", "breaker"); len(r) != 1 || r[0]["data-breaker"] != "closed" {
		t.Errorf("breaker = %v, want closed", r)
	}

	// Decisions per rule.
	want := map[string][2]float64{}
	re := regexp.MustCompile(`^sluice_rls_decisions_total\{domain="([^"]*)",result="([^"]*)",rule="([^"]*)"\}$`)
	for k, v := range series {
		if m := re.FindStringSubmatch(k); m != nil {
			w := want[m[1]+"/"+m[3]]
			w[0] += v
			if m[2] == "over_limit" {
				w[1] += v
			}
			want[m[1]+"/"+m[3]] = w
		}
	}
	rows := elements(dom, "class", "decision")
	if len(rows) != len(want) || len(want) != 2 {
		t.Errorf("decision rows %d, /metrics has %d rules, want 2", len(rows), len(want))
	}
	for _, r := range rows {
		w, ok := want[r["data-domain"]+"/"+r["data-rule"]]
		total, _ := strconv.ParseFloat(r["data-total"], 64)
		over, _ := strconv.ParseFloat(r["data-over"], 64)
		share, _ := strconv.ParseFloat(r["data-share"], 64)
		if !ok || total != w[0] || over != w[1] || share != w[1]/w[0] {
			t.Errorf("row %v: want total %v over %v share %v", r, w[0], w[1], w[1]/w[0])
		}
	}

	// Store latency.
	lat := elements(dom, "id", "latency")
	if len(lat) != 1 {
		t.Fatalf("latency card: %v", lat)
	}
	for _, q := range []struct {
		attr string
		q    float64
	}{{"data-p50", 0.5}, {"data-p99", 0.99}} {
		got, err := strconv.ParseFloat(lat[0][q.attr], 64)
		if w := histogramQuantile(q.q, series, "sluice_store_duration_seconds"); err != nil || math.Abs(got-w) > 1e-12*w {
			t.Errorf("%s = %q, /metrics gives %v", q.attr, lat[0][q.attr], w)
		}
	}
	if calls, _ := strconv.ParseFloat(lat[0]["data-calls"], 64); calls != series["sluice_store_duration_seconds_count"] || calls == 0 {
		t.Errorf("store calls %v, /metrics %v", calls, series["sluice_store_duration_seconds_count"])
	}

	// The keys denied most.
	var wantKeys []string
	for _, r := range ans.Rules {
		for _, k := range r.Keys {
			wantKeys = append(wantKeys, fmt.Sprintf("%s/%s %s %d±%d", r.Domain, r.Rule, k.Key, k.Count, k.Error))
		}
	}
	var gotKeys []string
	for _, r := range elements(dom, "class", "topkey") {
		gotKeys = append(gotKeys, fmt.Sprintf("%s/%s %s %s±%s", r["data-domain"], r["data-rule"], r["data-key"], r["data-count"], r["data-error"]))
	}
	// acme is denied most, then globex, then initech; umbrella never.
	if !slices.Equal(gotKeys, wantKeys) || len(wantKeys) != 3 || !strings.HasPrefix(wantKeys[0], "shop/per_tenant tenant=acme ") {
		t.Errorf("top keys on the page %q, /admin/top %q, want acme, globex, initech", gotKeys, wantKeys)
	}
	if r := elements(dom, "class", "rule"); len(r) != 2 {
		t.Errorf("rules loaded %v, want per_path and per_tenant", r)
	}
}

// TestPage checks the page as served, without a browser.
func TestPage(t *testing.T) {
	f := newFixture(t)
	dom := f.get(t, "/admin/")
	checkPage(t, dom, f.get(t, "/metrics"), f.get(t, "/admin/top?n=5"))
	for _, banned := range []string{"<script src", "<link ", "http://", "https://", "@import"} {
		if strings.Contains(dom, banned) {
			t.Errorf("page has an external asset: %q", banned)
		}
	}
}

// chromium finds Debian's chromium. Without it the test is skipped, unless
// CI is set: then it fails.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium not found: run scripts/ensure-chromium.sh"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// TestPageInChromium loads the page in headless Chromium from a running
// server and checks that the numbers it shows are /metrics' and
// /admin/top's; it keeps a screenshot in $SLUICE_ARTIFACTS (or the test's
// temporary directory).
func TestPageInChromium(t *testing.T) {
	bin := chromium(t)
	f := newFixture(t)
	url := f.url + "/admin/"
	run := func(args ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		home := t.TempDir()
		args = append([]string{"--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
			"--disable-dev-shm-usage", "--user-data-dir=" + filepath.Join(home, "profile")}, args...)
		cmd := exec.CommandContext(ctx, bin, append(args, url)...)
		cmd.Env = append(os.Environ(), "HOME="+home)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) || ctx.Err() != nil {
				t.Fatalf("%s %v: %v\n%s", bin, args, err, stderr.String())
			}
			t.Fatal(err)
		}
		return out
	}
	dom := string(run("--dump-dom"))
	if !strings.Contains(dom, `id="decisions"`) {
		t.Fatalf("chromium's DOM has no decisions table:\n%.2000s", dom)
	}
	checkPage(t, dom, f.get(t, "/metrics"), f.get(t, "/admin/top?n=5"))

	dir := os.Getenv("SLUICE_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "status-page.png")
	run("--screenshot="+shot, "--window-size=1280,900", "--hide-scrollbars")
	b, err := os.ReadFile(shot)
	if err != nil || len(b) < 8 || string(b[1:4]) != "PNG" {
		t.Fatalf("screenshot %s: %v (%d bytes)", shot, err, len(b))
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(b))
}
