// Package deploy_test checks the Grafana dashboard and the Prometheus
// alerting rules of this directory against a real Prometheus scraping
// two running sluice serve processes: every PromQL expression must parse
// and return data.
package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/testserver/redistest"
	"github.com/sluicehq/sluice/internal/testserver/servetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	servetest.Cleanup()
	os.Exit(code)
}

const (
	dashboardFile = "grafana/sluice.json"
	alertsFile    = "prometheus/alerts.yaml"
)

// legitimatelyEmpty are the alerts whose condition is empty while the
// fleet is healthy and that the test cannot make true: for them the test
// evaluates the expression without its final comparison, which must
// return data (proving that the metric exists and the query is right).
var legitimatelyEmpty = map[string]string{
	// No store call fails to decide: with Redis down the failover store
	// decides by its policy (counted as degraded), and the memory store
	// cannot fail.
	"SluiceStoreErrors": "sluice_store_errors_total stays 0",
	// Each job of the test has a single replica, so one version a job.
	"SluiceConfigVersionsDiffer": "one replica a job",
}

// firing are the alerts whose condition the test makes true; they must
// be pending or firing once Prometheus has evaluated them.
var firing = []string{
	"SluiceBreakerOpen",
	"SluiceDegradedDecisions",
	"SluiceSharedStoreErrors",
	"SluiceConfigReloadFailing",
	"SluiceNearLimitSustained",
}

// tools finds Debian's prometheus and promtool: missing, the test fails
// in CI (scripts/ensure-prometheus.sh installs them) and is skipped
// elsewhere.
func tools(t *testing.T) (prometheus, promtool string) {
	t.Helper()
	var missing []string
	find := func(name string) string {
		p, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, name)
		}
		return p
	}
	prometheus, promtool = find("prometheus"), find("promtool")
	if len(missing) > 0 {
		msg := fmt.Sprintf("%s not installed: run scripts/ensure-prometheus.sh (apt-get install prometheus)", strings.Join(missing, " and "))
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return prometheus, promtool
}

func TestPromtoolCheckRules(t *testing.T) {
	_, promtool := tools(t)
	out, err := exec.Command(promtool, "check", "rules", alertsFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", alertsFile, err, out)
	}
	if n := len(alertRules(t)); !strings.Contains(string(out), fmt.Sprintf("SUCCESS: %d rules found", n)) {
		t.Fatalf("promtool check rules: want %d rules found:\n%s", n, out)
	}
}

// rule is an alerting rule of alerts.yaml.
type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func alertRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// TestAlertsAnnotated checks what promtool does not: every alert waits
// (for:), has a severity and tells the operator what to do, with a link
// to an existing section of docs/operations.md.
func TestAlertsAnnotated(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(doc), -1) {
		anchors[anchor(m[1])] = true
	}
	rules := alertRules(t)
	if len(rules) == 0 {
		t.Fatal("no alerting rules")
	}
	for _, r := range rules {
		if r.Alert == "" || r.For == "" {
			t.Errorf("%q: want alert and for", r.Alert)
		}
		if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
			t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || len(r.Annotations["description"]) < 80 {
			t.Errorf("%s: want a summary and a description saying what to do", r.Alert)
		}
		const prefix = "https://github.com/sluicehq/sluice/blob/main/docs/operations.md#"
		u := r.Annotations["runbook_url"]
		if !strings.HasPrefix(u, prefix) || !anchors[strings.TrimPrefix(u, prefix)] {
			t.Errorf("%s: runbook_url %q is not a section of docs/operations.md", r.Alert, u)
		}
	}
}

// anchor is the GitHub anchor of a heading.
func anchor(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// dashboard is what the test reads of the Grafana dashboard.
type dashboard struct {
	SchemaVersion int `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"` // a collapsed row's
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// query is one PromQL expression of the dashboard.
type query struct{ where, expr string }

// dashboardQueries walks the panels (and collapsed rows) and returns
// their expressions with the template variables substituted: every
// job, instance and domain, and a short rate window for the test's 1 s
// scrapes.
func dashboardQueries(t *testing.T, d dashboard) []query {
	t.Helper()
	subst := strings.NewReplacer(
		"$__rate_interval", "5s",
		"${job}", ".*", "$job", ".*",
		"${instance}", ".*", "$instance", ".*",
		"${domain}", ".*", "$domain", ".*",
	)
	var qs []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				e := subst.Replace(tg.Expr)
				if strings.Contains(e, "$") {
					t.Errorf("panel %q %s: unknown variable in %q", p.Title, tg.RefID, tg.Expr)
				}
				qs = append(qs, query{fmt.Sprintf("panel %q %s", p.Title, tg.RefID), e})
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
		}
	}
	walk(d.Panels)
	return qs
}

func TestDashboardShape(t *testing.T) {
	d := readDashboard(t)
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d, want a recent one (>= 36)", d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		vars[v.Name] = v.Type + " " + q
	}
	for name, want := range map[string]string{"datasource": "datasource prometheus", "job": "query ", "instance": "query "} {
		if !strings.HasPrefix(vars[name], want) {
			t.Errorf("variable %s: %q, want %q...", name, vars[name], want)
		}
	}
	if n := len(dashboardQueries(t, d)); n < 10 {
		t.Errorf("%d queries in the dashboard, want many more", n)
	}
}

// TestQueriesReturnData is the real check: two sluice serve under load
// (one on the memory store with a failing reload and evictions, one on a
// Redis that is then killed, with --tiered), a Prometheus scraping both
// every second with the alerting rules loaded, and every expression of
// the dashboard and the alerts evaluated through its HTTP API.
func TestQueriesReturnData(t *testing.T) {
	promBin, _ := tools(t)
	d := readDashboard(t)
	qs := dashboardQueries(t, d)
	rules := alertRules(t)

	const cfg = `domain: api
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 5}
`
	memDir, redisDir := t.TempDir(), t.TempDir()
	for _, dir := range []string{memDir, redisDir} {
		if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mem := servetest.Start(t, "--admin", "127.0.0.1:0", "--config", memDir,
		"--reload-interval", "100ms", "--memory-max-keys", "20")
	rs := redistest.Server(t)
	red := servetest.Start(t, "--admin", "127.0.0.1:0", "--config", redisDir,
		"--redis", rs.URL(), "--tiered")
	if mem.Admin == "" || red.Admin == "" {
		t.Fatal("the ready file names no admin listener")
	}

	// A little load, until the test ends: on each server, every 50 ms,
	// six hits on a new key (four within the limit, the fifth near it,
	// the sixth over it), a descriptor no rule matches, and a /v1/check.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	client := &http.Client{Timeout: 2 * time.Second}
	for _, s := range []*servetest.Server{mem, red} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for n := 0; ; n++ {
				for range 6 {
					post(ctx, client, "http://"+s.HTTP+"/json", fmt.Sprintf(`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u%d"}]}]}`, n))
				}
				post(ctx, client, "http://"+s.HTTP+"/json", `{"domain":"api","descriptors":[{"entries":[{"key":"nobody","value":"x"}]}]}`)
				post(ctx, client, "http://"+s.HTTP+"/v1/check", `{"key":"k","algorithm":"sliding_window","rate":3,"period":"1s"}`)
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}

	// Prometheus, scraping both admin listeners every second.
	dir := t.TempDir()
	alerts, err := filepath.Abs(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: sluice-memory
    static_configs: [{targets: [%q]}]
  - job_name: sluice-redis
    static_configs: [{targets: [%q]}]
`, alerts, mem.Admin, red.Admin)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	api := startPrometheus(t, promBin, dir)

	// Both targets up and scraped a few times before the failures below,
	// so that the counters' increases fall inside the rate windows.
	waitFor(t, "both targets up", func() (bool, string) {
		r, err := api.query(`count_over_time(up[1m]) >= 3 and up == 1`)
		if err != nil {
			return false, err.Error()
		}
		return len(r) == 2, fmt.Sprintf("%d targets ready", len(r))
	})

	// Store latency with Redis answering, then, while Prometheus scrapes,
	// Redis gone: Redis calls fail, the breaker opens and decisions are
	// degraded.
	waitMetric(t, red.Admin, `sluice_store_duration_seconds_count`, func(v float64) bool { return v >= 20 })
	rs.Kill()
	waitMetric(t, red.Admin, `sluice_breaker_open`, func(v float64) bool { return v == 1 })
	waitMetric(t, red.Admin, `sluice_degraded_decisions_total{allowed="false",policy="fail_closed"}`, func(v float64) bool { return v > 0 })

	// A configuration that does not load.
	if err := os.WriteFile(filepath.Join(memDir, "api.yaml"), []byte("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, mem.Admin, `sluice_config_reloads_total{result="failure"}`, func(v float64) bool { return v >= 1 })
	waitMetric(t, mem.Admin, `sluice_config_last_reload_successful`, func(v float64) bool { return v == 0 })
	waitMetric(t, mem.Admin, `sluice_memory_evictions_total`, func(v float64) bool { return v > 0 })

	// Prometheus has seen them.
	for _, cond := range []string{
		`sluice_breaker_open{job="sluice-redis"} == 1`,
		`sluice_config_last_reload_successful{job="sluice-memory"} == 0`,
		`sluice_memory_evictions_total{job="sluice-memory"} > 0`,
	} {
		waitFor(t, "Prometheus to see "+cond, func() (bool, string) {
			r, err := api.query(cond)
			if err != nil {
				return false, err.Error()
			}
			return len(r) == 1, fmt.Sprintf("%v", r)
		})
	}
	// At least six scrapes of each: the 5s rate windows hold several
	// samples.
	waitFor(t, "both targets scraped six times", func() (bool, string) {
		r, err := api.query(`count_over_time(up[1m]) >= 6 and up == 1`)
		if err != nil {
			return false, err.Error()
		}
		return len(r) == 2, fmt.Sprintf("%d targets ready", len(r))
	})

	for _, q := range qs {
		r, err := api.query(q.expr)
		if err != nil {
			t.Errorf("%s: %s: %v", q.where, q.expr, err)
			continue
		}
		if len(r) == 0 {
			t.Errorf("%s: %s: no data", q.where, q.expr)
			continue
		}
		if !slices.ContainsFunc(r, func(s sample) bool { return !math.IsNaN(s.value) }) {
			t.Errorf("%s: %s: only NaN: %v", q.where, q.expr, r)
		}
	}

	// The dashboard's variables list both jobs, their instances and the
	// configured domain.
	for _, v := range d.Templating.List {
		m, ok := v.Query.(map[string]any)
		if v.Type != "query" || !ok {
			continue
		}
		q, _ := m["query"].(string)
		lv := regexp.MustCompile(`^label_values\((.+), *(\w+)\)$`).FindStringSubmatch(q)
		if lv == nil {
			t.Errorf("variable %s: query %q, want label_values(selector, label)", v.Name, q)
			continue
		}
		sel := strings.NewReplacer(`"$job"`, `".*"`, `"$instance"`, `".*"`).Replace(lv[1])
		vals, err := api.labelValues(lv[2], sel)
		if err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
			continue
		}
		want := map[string][]string{
			"job":      {"sluice-memory", "sluice-redis"},
			"instance": {mem.Admin, red.Admin},
			"domain":   {"api"},
		}[v.Name]
		slices.Sort(want)
		if !slices.Equal(vals, want) {
			t.Errorf("variable %s: %s = %v, want %v", v.Name, q, vals, want)
		}
	}

	for _, r := range rules {
		res, err := api.query(r.Expr)
		if err != nil {
			t.Errorf("alert %s: %s: %v", r.Alert, r.Expr, err)
			continue
		}
		if why, ok := legitimatelyEmpty[r.Alert]; ok {
			inner := comparison.ReplaceAllString(r.Expr, "")
			if inner == r.Expr {
				t.Errorf("alert %s: %s ends in no comparison", r.Alert, r.Expr)
			}
			res, err := api.query(inner)
			if err != nil || len(res) == 0 {
				t.Errorf("alert %s (empty when healthy: %s): %s: %v, %d series", r.Alert, why, inner, err, len(res))
			}
			continue
		}
		if len(res) == 0 {
			t.Errorf("alert %s: %s: no data", r.Alert, r.Expr)
		}
	}

	t.Logf("%d dashboard queries and %d alert expressions evaluated (%d empty when healthy: their inner part)", len(qs), len(rules), len(legitimatelyEmpty))

	// The rules are loaded and the conditions the test created are seen.
	waitFor(t, "the alerts loaded and pending", func() (bool, string) {
		loaded, err := api.alertStates()
		if err != nil {
			return false, err.Error()
		}
		for _, r := range rules {
			if _, ok := loaded[r.Alert]; !ok {
				return false, fmt.Sprintf("%s not loaded: %v", r.Alert, loaded)
			}
		}
		for _, a := range firing {
			if s := loaded[a]; s != "pending" && s != "firing" {
				return false, fmt.Sprintf("%s is %q", a, s)
			}
		}
		return true, ""
	})
}

// comparison is an expression's final comparison with a number.
var comparison = regexp.MustCompile(`\s*(==|!=|>=|<=|>|<)\s*[0-9.]+\s*$`)

func post(ctx context.Context, c *http.Client, url, body string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return
	}
	if resp, err := c.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// waitFor polls cond every 50 ms for up to 30 s.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
	}
	t.Fatalf("waiting for %s: %s", what, last)
}

// waitMetric waits until the sample named series (name and labels as
// /metrics prints them) of the admin listener at addr satisfies ok.
func waitMetric(t *testing.T, addr, series string, ok func(float64) bool) {
	t.Helper()
	waitFor(t, series, func() (bool, string) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return false, err.Error()
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, found := strings.CutPrefix(line, series+" "); found {
				f, err := strconv.ParseFloat(v, 64)
				return err == nil && ok(f), line
			}
		}
		return false, "not exported"
	})
}

// promAPI is a running Prometheus's HTTP API.
type promAPI struct{ base string }

// startPrometheus runs prometheus with dir/prometheus.yml on a free
// loopback port, its data in dir, and kills it (by its pid) when the test
// ends. The port is found free, then given to prometheus: should another
// process take it in between, prometheus exits and is started again on
// another.
func startPrometheus(t *testing.T, bin, dir string) promAPI {
	t.Helper()
	for attempt := 1; ; attempt++ {
		api, out, ok := tryPrometheus(t, bin, dir)
		if ok {
			return api
		}
		if attempt == 3 || !strings.Contains(out, "address already in use") {
			t.Fatalf("prometheus exited:\n%s", out)
		}
	}
}

func tryPrometheus(t *testing.T, bin, dir string) (api promAPI, output string, ok bool) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	out := &servetest.Output{}
	cmd := exec.Command(bin,
		"--config.file", filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path", filepath.Join(dir, "data"),
		"--web.listen-address", addr,
		"--log.level", "warn")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out)
		}
	})
	api = promAPI{"http://" + addr}
	exited := false
	waitFor(t, "prometheus ready", func() (bool, string) {
		select {
		case <-done:
			exited = true
			return true, ""
		default:
		}
		resp, err := http.Get(api.base + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return api, out.String(), !exited
}

func (p promAPI) get(path string, params url.Values, data any) error {
	resp, err := http.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %v: %s", resp.Status, err, bytes.TrimSpace(b))
	}
	if r.Status != "success" {
		return fmt.Errorf("status %q: %s", r.Status, r.Error)
	}
	return json.Unmarshal(r.Data, data)
}

// sample is one series of an instant query's result.
type sample struct {
	metric map[string]string
	value  float64
}

func (s sample) String() string { return fmt.Sprintf("%v=%g", s.metric, s.value) }

// query evaluates expr now and returns its series (a scalar is one).
func (p promAPI) query(expr string) ([]sample, error) {
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &d); err != nil {
		return nil, err
	}
	parse := func(v []any) float64 {
		s, _ := v[1].(string)
		f, _ := strconv.ParseFloat(s, 64)
		return f
	}
	switch d.ResultType {
	case "vector":
		var vs []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
		}
		if err := json.Unmarshal(d.Result, &vs); err != nil {
			return nil, err
		}
		var out []sample
		for _, v := range vs {
			out = append(out, sample{v.Metric, parse(v.Value)})
		}
		return out, nil
	case "scalar":
		var v []any
		if err := json.Unmarshal(d.Result, &v); err != nil {
			return nil, err
		}
		return []sample{{nil, parse(v)}}, nil
	}
	return nil, fmt.Errorf("result type %q, want vector or scalar", d.ResultType)
}

// labelValues returns the sorted values of label on the series matching
// selector (what Grafana's label_values does).
func (p promAPI) labelValues(label, selector string) ([]string, error) {
	var vals []string
	if err := p.get("/api/v1/label/"+label+"/values", url.Values{"match[]": {selector}}, &vals); err != nil {
		return nil, err
	}
	slices.Sort(vals)
	return vals, nil
}

// alertStates returns the state of each alerting rule loaded (inactive,
// pending, firing), failing on a rule whose evaluation errs.
func (p promAPI) alertStates() (map[string]string, error) {
	var d struct {
		Groups []struct {
			Rules []struct {
				Name      string `json:"name"`
				Type      string `json:"type"`
				State     string `json:"state"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get("/api/v1/rules", url.Values{"type": {"alert"}}, &d); err != nil {
		return nil, err
	}
	states := map[string]string{}
	for _, g := range d.Groups {
		for _, r := range g.Rules {
			if r.Health == "err" {
				return nil, fmt.Errorf("alert %s: %s", r.Name, r.LastError)
			}
			states[r.Name] = r.State
		}
	}
	return states, nil
}
