package hostile

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// surfaceClasses attack the surfaces that came after the first classes:
// HTTP/2 header lists, the admin listener, permits, xDS, tracing and the
// files the service re-reads. What they attack does not depend on the
// store, so they run on the memory store only.
var surfaceClasses = []class{
	headerListsClass,
	headerListsLeanClass,
	adminSlowClass,
	permitTableClass,
	xdsClass,
	tracingClass,
	rereadClass,
}

// TestHostileSurfaces runs every surface class against its own process,
// held to the bounds of every class (README.md), and logs the figures.
func TestHostileSurfaces(t *testing.T) {
	var mu sync.Mutex
	var rows []string
	for _, c := range surfaceClasses {
		t.Run(c.name, func(t *testing.T) {
			f := &figures{class: c.name, store: "memory", slowlogMax: -1}
			defer func() {
				mu.Lock()
				rows = append(rows, f.row())
				mu.Unlock()
			}()
			runClass(t, c, f)
		})
	}
	t.Logf("hostile-client figures (as TestHostile's):\n%s\n%s", tableHeader, strings.Join(rows, "\n"))
}

// adminFlag opens the admin listener and keeps /metrics on the data plane
// too (--debug-addr), where the harness samples it.
var adminFlag = flagArg{"debug-addr", "127.0.0.1:0"}

// metric reads one unlabelled metric from the process' /metrics.
func (h *harness) metric(name string) (float64, error) {
	resp, err := h.p.metricsHTTP.Get(h.p.httpURL("/metrics"))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("/metrics (status %d) has no %s", resp.StatusCode, name)
}

// liveHeap forces a garbage collection in the process (GET
// /debug/pprof/heap?gc=1 on its admin listener) and returns its heap then
// (go_memstats_heap_alloc_bytes): the memory it holds live, which a busy
// machine's scheduling does not change.
func (h *harness) liveHeap() int64 {
	h.t.Helper()
	if h.p.admin == "" {
		h.t.Fatal("liveHeap needs the admin listener (adminFlag)")
	}
	cl := hostileClient(probeHang * 15)
	defer cl.CloseIdleConnections()
	code, body, err := statusOf(cl.Get("http://" + h.p.admin + "/debug/pprof/heap?gc=1"))
	if err != nil || code != http.StatusOK {
		if why := h.p.killReason(); why != "" {
			h.t.Fatalf("forcing a GC: %s", why)
		}
		h.t.Fatalf("forcing a GC (/debug/pprof/heap?gc=1): %d %s %v", code, trim(body), err)
	}
	v, err := h.metric("go_memstats_heap_alloc_bytes")
	if err != nil {
		h.t.Fatal(err)
	}
	return int64(v)
}

// mib formats bytes in MiB.
func mib(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB" }

// drain reads r to the end.
func drain(r io.Reader) { io.Copy(io.Discard, r) }
