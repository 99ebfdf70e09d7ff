package hostile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The bounds every class is held to.
const (
	// probeBound: a normal request answers within it (the best of three
	// attempts probeRetryGap apart, so that a moment of a busy machine's
	// scheduling is not taken for a hang); probeHang: an attempt that takes
	// longer is a hang.
	probeBound    = 100 * time.Millisecond
	probeHang     = 5 * time.Second
	probeRetryGap = 50 * time.Millisecond
	// slowRound is a round of probes, one of each kind: a class may have
	// a quarter of its probes, and at least a round, with no attempt
	// within probeBound (slowProbesAllowed). A busy machine stalls a
	// process for a moment now and then, a round at most each time; an
	// attack that holds normal requests back slows every probe while it
	// lasts.
	slowRound = 4
	// After a class, goroutines and RSS must come back within these of
	// their baseline, within recoverWithin.
	afterGoroutines = 20
	afterRSS        = 48 << 20
	recoverWithin   = 10 * time.Second
	// During a class, RSS may rise at most this far above the baseline.
	peakRSS = 256 << 20
	// defaultPeakGoroutines: how far goroutines may rise during a class
	// that sets no bound of its own.
	defaultPeakGoroutines = 150
	// slowlogBound: Redis must log no command this slow (µs).
	slowlogBound = 1000
)

// harness runs one class against one process.
type harness struct {
	t       *testing.T
	p       *proc
	store   string // "memory" or "redis"
	redis   *redisServer
	sameKey string // the key the class attacks; probes use it too

	fresh atomic.Int64

	probeMu  sync.Mutex
	lat      []time.Duration // first attempts
	slow     int             // probes with no attempt within probeBound
	failures []string        // errors, hangs and wrong answers
	slowOnes []string        // probes with no attempt within probeBound

	sampleMu  sync.Mutex
	peakG     int
	peakRSS   int64
	redisPeak int64
}

// probe sends the four normal requests and records their latency and
// failures: POST /v1/check on the class' key and on a fresh key (1000 a
// second), and ShouldRateLimit of hostile=<the class' key> (10 a minute:
// a denial is an answer too) and of probe=<a fresh value> (1000 a second).
func (h *harness) probe() {
	n := h.fresh.Add(1)
	fresh := fmt.Sprintf("probe-fresh-%d", n)
	h.probeOne("http same key", func() error { return h.checkProbe(h.sameKey, false) })
	h.probeOne("http fresh key", func() error { return h.checkProbe(fresh, true) })
	h.probeOne("grpc same key", func() error { return h.rlsProbe(desc("hostile", h.sameKey), false) })
	h.probeOne("grpc fresh key", func() error { return h.rlsProbe(desc("probe", fresh), true) })
}

// probeOne runs attempt up to three times, 50 ms apart, until one answers
// correctly within probeBound. An error or an attempt longer than
// probeHang fails at once.
func (h *harness) probeOne(what string, attempt func() error) {
	var first time.Duration
	ok := false
	for i := range 3 {
		if i > 0 {
			time.Sleep(probeRetryGap)
		}
		start := time.Now()
		err := attempt()
		took := time.Since(start)
		if i == 0 {
			first = took
		}
		if err != nil || took > probeHang {
			h.probeMu.Lock()
			h.lat = append(h.lat, first)
			h.failures = append(h.failures, fmt.Sprintf("%s: %v after %v", what, err, took.Round(time.Millisecond)))
			h.probeMu.Unlock()
			return
		}
		if took <= probeBound {
			ok = true
			break
		}
	}
	h.probeMu.Lock()
	defer h.probeMu.Unlock()
	h.lat = append(h.lat, first)
	if !ok {
		h.slow++
		h.slowOnes = append(h.slowOnes, fmt.Sprintf("%s: three attempts, none within %v (first %v)", what, probeBound, first.Round(time.Millisecond)))
	}
}

// checkProbe is a normal POST /v1/check: 200 with a decision, allowed on a
// fresh key.
func (h *harness) checkProbe(key string, mustAllow bool) error {
	body, _ := json.Marshal(map[string]any{"key": key, "algorithm": "fixed_window", "rate": 1000, "period": "1s"})
	resp, err := h.p.probeHTTP.Post(h.p.httpURL("/v1/check"), "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var d struct {
		Allowed *bool `json:"allowed"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &d) != nil || d.Allowed == nil {
		return fmt.Errorf("status %d %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	if mustAllow && !*d.Allowed {
		return fmt.Errorf("a fresh key was denied: %s", bytes.TrimSpace(b))
	}
	return nil
}

// rlsProbe is a normal ShouldRateLimit of d: a decision, OK on a fresh
// value.
func (h *harness) rlsProbe(d *rlpb.RateLimitDescriptor, mustAllow bool) error {
	ctx, cancel := rpcCtx(probeHang)
	defer cancel()
	resp, err := h.p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "hostile", Descriptors: []*rlpb.RateLimitDescriptor{d}})
	if err != nil {
		return err
	}
	if mustAllow && resp.OverallCode != pb.RateLimitResponse_OK {
		return fmt.Errorf("a fresh value was denied: %v", resp)
	}
	return nil
}

func desc(kv ...string) *rlpb.RateLimitDescriptor {
	d := &rlpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// goroutines reads go_goroutines from the process' /metrics.
func (h *harness) goroutines() (int, error) {
	resp, err := h.p.metricsHTTP.Get(h.p.httpURL("/metrics"))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("/metrics (status %d) has no go_goroutines", resp.StatusCode)
}

// rss is the resident size of pid in bytes, from /proc/PID/status.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
}

// background runs the prober (every 100 ms) and the samplers (RSS every
// 20 ms, with the watchdog; goroutines every 100 ms) until stop is called.
func (h *harness) background() (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	every := func(d time.Duration, f func()) {
		wg.Go(func() {
			tick := time.NewTicker(d)
			defer tick.Stop()
			for {
				select {
				case <-quit:
					return
				case <-tick.C:
					f()
				}
			}
		})
	}
	every(100*time.Millisecond, func() {
		if !h.p.exited() {
			h.probe()
		}
	})
	every(20*time.Millisecond, h.sampleRSS)
	every(100*time.Millisecond, func() {
		if g, err := h.goroutines(); err == nil {
			h.sampleMu.Lock()
			h.peakG = max(h.peakG, g)
			h.sampleMu.Unlock()
		}
	})
	return func() { close(quit); wg.Wait() }
}

// sampleRSS records the peak RSS of sluice and redis-server, and kills
// either when it passes rssLimit.
func (h *harness) sampleRSS() {
	if r, err := rss(h.p.pid()); err == nil {
		h.sampleMu.Lock()
		h.peakRSS = max(h.peakRSS, r)
		h.sampleMu.Unlock()
		if r > rssLimit && !h.p.exited() {
			h.p.kill(fmt.Sprintf("the suite killed sluice: RSS %d MiB > %d MiB", r>>20, rssLimit>>20))
		}
	}
	if h.redis != nil {
		if r, err := rss(h.redis.inst.Pid()); err == nil {
			h.sampleMu.Lock()
			h.redisPeak = max(h.redisPeak, r)
			h.sampleMu.Unlock()
			if r > rssLimit {
				h.redis.killed.Store(true)
				h.redis.inst.Kill()
			}
		}
	}
}

// figures are one row of the suite's table.
type figures struct {
	class, store             string
	started                  bool
	exited                   bool // sluice exited (or was killed) during the class
	probes                   int
	p50, max                 time.Duration
	slow                     int
	gBase, gPeak, gAfter     int
	rssBase, rssPeak, rssAft int64
	slowlogMax               int64 // µs; -1 for the memory store, slowlogUnknown when unread
	slowlogN                 int
	redisGrowth              int64 // used_memory after - before
	exit                     time.Duration
	exitOK                   bool
}

// slowlogUnknown is figures.slowlogMax when Redis' slow log could not be read.
const slowlogUnknown = -2

func (f figures) row() string {
	if !f.started {
		return fmt.Sprintf("%-12s %-6s not started", f.class, f.store)
	}
	mib := func(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 0, 64) }
	slowlog, redisMem := "-", "-"
	switch {
	case f.slowlogMax == slowlogUnknown:
		slowlog, redisMem = "unread", "?"
	case f.slowlogMax >= 0:
		slowlog = fmt.Sprintf("%d (%d)", f.slowlogMax, f.slowlogN)
		redisMem = fmt.Sprintf("%+.1f", float64(f.redisGrowth)/(1<<20))
	}
	exit := "hung"
	switch {
	case f.exited:
		exit = "exited during the class"
	case f.exitOK:
		exit = f.exit.Round(10 * time.Millisecond).String()
	}
	return fmt.Sprintf("%-12s %-6s %4d %7s %7s %3d  %4d/%4d/%4d  %4s/%4s/%4s  %-12s %6s  %s",
		f.class, f.store, f.probes, ms(f.p50), ms(f.max), f.slow,
		f.gBase, f.gPeak, f.gAfter, mib(f.rssBase), mib(f.rssPeak), mib(f.rssAft), slowlog, redisMem, exit)
}

const tableHeader = "class        store  prb     p50     max slw  goroutines b/p/a  RSS MiB b/p/a    slowlog µs(n) redisΔ  SIGTERM"

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
}

// latencies returns the probes' count, median and maximum.
func (h *harness) latencies() (n int, p50, maxLat time.Duration) {
	h.probeMu.Lock()
	defer h.probeMu.Unlock()
	if len(h.lat) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(h.lat)
	slices.Sort(s)
	return len(s), s[len(s)/2], s[len(s)-1]
}

// baseline warms the process up and measures its goroutines and RSS.
func (h *harness) baseline() (g int, r int64) {
	h.t.Helper()
	for range 5 {
		h.probe()
	}
	var gs []int
	var rs []int64
	for range 3 {
		n, err := h.goroutines()
		if err != nil {
			h.t.Fatalf("baseline goroutines: %v", err)
		}
		m, err := rss(h.p.pid())
		if err != nil {
			h.t.Fatalf("baseline RSS: %v", err)
		}
		gs, rs = append(gs, n), append(rs, m)
		time.Sleep(30 * time.Millisecond)
	}
	slices.Sort(gs)
	slices.Sort(rs)
	// The probes of the warm-up are not held against the class.
	h.probeMu.Lock()
	h.lat, h.failures, h.slowOnes, h.slow = nil, nil, nil, 0
	h.probeMu.Unlock()
	return gs[1], rs[1]
}

// recovered polls until goroutines and RSS are back within the bounds of
// their baseline, and returns the last values and whether they were.
func (h *harness) recovered(gBase int, rBase int64) (g int, r int64, ok bool) {
	deadline := time.Now().Add(recoverWithin)
	for {
		var gerr, rerr error
		g, gerr = h.goroutines()
		r, rerr = rss(h.p.pid())
		if gerr == nil && rerr == nil && g <= gBase+afterGoroutines && r <= rBase+afterRSS {
			return g, r, true
		}
		if time.Now().After(deadline) || h.p.exited() {
			return g, r, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// slowProbesAllowed is how many of n probes may have no attempt within
// probeBound.
func slowProbesAllowed(n int) int { return max(slowRound, n/4) }

// reportProbes reports the probes that failed (an error, a hang, a wrong
// answer), and the slow ones when there are more than slowProbesAllowed;
// at most ten of each.
func (h *harness) reportProbes() {
	h.t.Helper()
	h.probeMu.Lock()
	defer h.probeMu.Unlock()
	if len(h.failures) > 0 {
		shown := h.failures[:min(len(h.failures), 10)]
		h.t.Errorf("%d of %d probes failed (a normal request must answer, correctly, within %v); the first:\n  %s",
			len(h.failures), len(h.lat), probeHang, strings.Join(shown, "\n  "))
	}
	if n, allowed := len(h.slowOnes), slowProbesAllowed(len(h.lat)); n > allowed {
		shown := h.slowOnes[:min(n, 10)]
		h.t.Errorf("%d of %d probes had no attempt within %v, want at most %d (a quarter, and at least a round of %d); the first:\n  %s",
			n, len(h.lat), probeBound, allowed, slowRound, strings.Join(shown, "\n  "))
	} else if n > 0 {
		h.t.Logf("%d of %d probes had no attempt within %v (at most %d allowed: a busy machine's moments)", n, len(h.lat), probeBound, allowed)
	}
}

// statusOf reads an HTTP answer: status and body.
func statusOf(resp *http.Response, err error) (int, string, error) {
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), nil
}

// warmScripts makes sluice call every script it may run on Redis (a
// decision and a peek of each algorithm, concurrent decisions, which are
// batched, a ShouldRateLimit of several descriptors, decided in one call,
// and a permit's acquire and release), before the slow log is reset: a script's first call on a Redis
// compiles it, a cost of its size and never of the input.
func (h *harness) warmScripts() {
	h.t.Helper()
	cl := hostileClient(probeHang)
	defer cl.CloseIdleConnections()
	var wg sync.WaitGroup
	for _, alg := range algorithms {
		for _, cost := range []int{1, 0} {
			wg.Go(func() {
				body := fmt.Sprintf(`{"key":"warm-%s","algorithm":%q,"rate":10,"period":"1h","cost":%d}`, alg, alg, cost)
				if code, b, err := statusOf(cl.Post(h.p.httpURL("/v1/check"), "application/json", strings.NewReader(body))); err != nil || code != 200 {
					h.t.Errorf("warming the scripts: %s: %d %s %v", body, code, trim(b), err)
				}
			})
		}
	}
	for _, op := range [][2]string{
		{"acquire", `{"key":"warm-permit","max":1,"lease":"1s","holder":"warm"}`},
		{"release", `{"key":"warm-permit","holder":"warm"}`},
	} {
		if code, b, err := statusOf(cl.Post(h.p.httpURL("/v1/"+op[0]), "application/json", strings.NewReader(op[1]))); err != nil || code != 200 {
			h.t.Errorf("warming the scripts: /v1/%s: %d %s %v", op[0], code, trim(b), err)
		}
	}
	wg.Wait()
	if err := h.rlsProbe(desc("probe", "warm-1"), true); err != nil {
		h.t.Errorf("warming the scripts: %v", err)
	}
	ctx, cancel := rpcCtx(probeHang)
	defer cancel()
	if _, err := h.p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "hostile",
		Descriptors: []*rlpb.RateLimitDescriptor{desc("f", "warm-1"), desc("f", "warm-2"), desc("hostile", "warm")}}); err != nil {
		h.t.Errorf("warming the scripts: ShouldRateLimit of three descriptors: %v", err)
	}
}
