package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice"
)

// childEnv, when set in the environment, makes the harness's binary (or
// its test binary) run as one child process: a region member or a region
// service. The parent writes the child's config as one JSON line on its
// standard input; a member then prints "ready", reads "start <µs>", runs its
// load from that instant (CLOCK_REALTIME, shared by every process of the
// machine) and prints its result as JSON on its standard output.
const childEnv = "SLUICE_REGIONS_CHILD"

// childConfig is what the parent tells a child.
type childConfig struct {
	Role     string // "member" or "service"
	Strategy string
	Member   *Member  `json:",omitempty"`
	Service  *Service `json:",omitempty"`
	Key      string
	Deadline time.Duration
	Phases   []memberPhase
	Seed     uint64
}

// memberPhase is one member's offered rate (requests per second) for a
// while.
type memberPhase struct {
	For  time.Duration
	Rate float64
}

// Outcomes of a decision, in a record.
const (
	outAdmitted = iota
	outDenied
	outError
)

// Flags of a record.
const (
	flagDegraded = 1 << iota
	flagDeadline // the error is the caller's deadline
)

// record is one decision: when it was sent and returned (µs since the
// epoch, CLOCK_REALTIME), its outcome, flags, its ResetAfter (µs), and its
// latency (ns): the member's monotonic clock read just before and just
// after its call of Allow, in the goroutine that makes it, so that neither
// a step of the wall clock nor the harness's own timers (the parent's,
// or the member's pacing of its requests) count in it.
type record struct {
	Sent, Returned int64
	Outcome, Flags int64
	ResetAfter     int64
	LatencyNS      int64
}

// recordLen is the numbers of one record in childResult.Records.
const recordLen = 6

// childResult is what a child reports.
type childResult struct {
	Role        string
	Region      int
	Index       int
	Records     []int64 // records, recordLen numbers each
	Sleep       lateness
	IssueLateUS int64 // how late the latest request was issued, at most
	CPU         time.Duration
	Err         string
	// Grants (a service of the hierarchical strategy) are pairs: the home
	// store's window (µs), units it granted the service in that window;
	// Stats its store's counters (JSON).
	Grants []int64         `json:",omitempty"`
	Stats  json.RawMessage `json:",omitempty"`
}

func (r *childResult) records() []record {
	out := make([]record, 0, len(r.Records)/recordLen)
	for i := 0; i+recordLen <= len(r.Records); i += recordLen {
		v := r.Records[i : i+recordLen]
		out = append(out, record{v[0], v[1], v[2], v[3], v[4], v[5]})
	}
	return out
}

// runChild runs this process as a child and returns its exit code.
func runChild() int {
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		fmt.Fprintf(os.Stderr, "regions child: read config: %v\n", err)
		return 2
	}
	var cfg childConfig
	if err := json.Unmarshal([]byte(line), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "regions child: config %q: %v\n", line, err)
		return 2
	}
	signal.Ignore(syscall.SIGINT) // the parent stops its children
	var res childResult
	switch cfg.Role {
	case "member":
		res = runMember(cfg, in)
	case "service":
		res = runService(cfg, in)
	default:
		res.Err = fmt.Sprintf("unknown role %q", cfg.Role)
	}
	res.Role = cfg.Role
	res.CPU = selfCPU()
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintf(os.Stderr, "regions child: write result: %v\n", err)
		return 2
	}
	if res.Err != "" {
		return 1
	}
	return 0
}

func runMember(cfg childConfig, in *bufio.Reader) (res childResult) {
	m := *cfg.Member
	res.Region, res.Index = m.RegionIndex, m.Index
	strat, err := lookupStrategy(cfg.Strategy)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	ctx := context.Background()
	st, err := strat.NewStore(ctx, m)
	if err != nil {
		res.Err = fmt.Sprintf("%s: new store: %v", cfg.Strategy, err)
		return res
	}
	defer func() {
		if c, ok := st.(io.Closer); ok {
			if err := c.Close(); err != nil && res.Err == "" && !errors.Is(err, sluice.ErrClosed) {
				fmt.Fprintf(os.Stderr, "regions member %s/%d: close: %v\n", m.Region, m.Index, err)
			}
		}
	}()
	lim := sluice.New(st)
	// Warm up: connect, load the scripts (a peek changes nothing).
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	lim.AllowN(wctx, cfg.Key+"/warm-up", m.Limit, 0)
	cancel()

	fmt.Println("ready")
	line, err := in.ReadString('\n')
	if err != nil {
		res.Err = fmt.Sprintf("read start: %v", err)
		return res
	}
	start, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(line), "start "), 10, 64)
	if err != nil {
		res.Err = fmt.Sprintf("start line %q: %v", line, err)
		return res
	}
	if w, ok := st.(warmer); ok {
		// Known before the load starts: the key's decisions do not wait
		// for the home store's first answer (as sluice serve --region
		// warms its configuration's keys). Bounded by the start; a
		// decision made while it is on its way does not wait for it.
		wctx, cancel := context.WithDeadline(ctx, time.UnixMicro(start))
		err := w.Warm(wctx, cfg.Key, m.Limit)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "regions member %s/%d: warm: %v\n", m.Region, m.Index, err)
		}
	}
	sleeper := startSleeper()

	var (
		mu   sync.Mutex
		recs = make([]int64, 0, recordLen*1024)
		wg   sync.WaitGroup
	)
	decide := func() {
		defer wg.Done()
		dctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
		t0 := time.Now() // its monotonic reading times the call
		d, err := lim.Allow(dctx, cfg.Key, m.Limit)
		lat := time.Since(t0)
		sent, ret := t0.UnixMicro(), t0.Add(lat).UnixMicro()
		cancel()
		var out, flags int64
		switch {
		case err != nil:
			out = outError
			if errors.Is(err, context.DeadlineExceeded) {
				flags |= flagDeadline
			}
		case d.Allowed:
			out = outAdmitted
		default:
			out = outDenied
		}
		if err == nil && d.Degraded {
			flags |= flagDegraded
		}
		mu.Lock()
		recs = append(recs, sent, ret, out, flags, d.ResetAfter.Microseconds(), lat.Nanoseconds())
		mu.Unlock()
	}

	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(m.RegionIndex)<<32|uint64(m.Index)))
	phaseStart := time.UnixMicro(start)
	var late int64
	for _, p := range cfg.Phases {
		phaseEnd := phaseStart.Add(p.For)
		if p.Rate > 0 {
			gap := time.Duration(float64(time.Second) / p.Rate)
			// Evenly spaced, from a random offset so that members interleave.
			at := phaseStart.Add(time.Duration(rng.Int64N(int64(gap))))
			for at.Before(phaseEnd) {
				if d := time.Until(at); d > 0 {
					time.Sleep(d)
				} else if l := -d.Microseconds(); l > late {
					late = l
				}
				wg.Add(1)
				go decide()
				at = at.Add(gap)
			}
		}
		phaseStart = phaseEnd
	}
	time.Sleep(time.Until(phaseStart))
	wg.Wait()
	res.Sleep = sleeper.stop()
	res.IssueLateUS = late
	mu.Lock()
	res.Records = recs
	mu.Unlock()
	return res
}

// runService runs a RegionService's Serve on the listener passed as file
// descriptor 3, until the parent closes the child's standard input.
func runService(cfg childConfig, in *bufio.Reader) (res childResult) {
	s := *cfg.Service
	res.Region, res.Index = s.RegionIndex, s.Index
	strat, err := lookupStrategy(cfg.Strategy)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	rs, ok := strat.(RegionService)
	if !ok {
		res.Err = fmt.Sprintf("strategy %s runs no region service", cfg.Strategy)
		return res
	}
	f := os.NewFile(3, "listener")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		res.Err = fmt.Sprintf("listener: %v", err)
		return res
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, in) // until the parent closes stdin
		cancel()
	}()
	sleeper := startSleeper()
	fmt.Println("ready")
	err = rs.Serve(ctx, s, ln)
	ln.Close()
	res.Sleep = sleeper.stop()
	if h, ok := rs.(*hierarchical); ok {
		h.report(&res)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		res.Err = fmt.Sprintf("serve: %v", err)
	}
	return res
}
