package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench/internal/redisserver"
	"github.com/sluicehq/sluice/bench/regions/proxy"
)

// child is one child process of the harness.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr *tailBuffer
	result chan childResult
}

// tailBuffer keeps the last 8 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if n := len(t.buf) - 8<<10; n > 0 {
		t.buf = t.buf[n:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf))
}

// spawn starts this binary again as a child with cfg (see childEnv).
func spawn(cfg childConfig, extra ...*os.File) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.ExtraFiles = extra
	c := &child{cmd: cmd, stderr: &tailBuffer{}, result: make(chan childResult, 1)}
	cmd.Stderr = c.stderr
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c.out = bufio.NewReaderSize(stdout, 1<<20)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		c.kill()
		return nil, fmt.Errorf("child config: %w", err)
	}
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		c.kill()
		return nil, fmt.Errorf("write child config: %w", err)
	}
	return c, nil
}

// ready waits for the child's "ready" line, then collects its result in
// the background.
func (c *child) ready(timeout time.Duration) error {
	line := make(chan error, 1)
	go func() {
		l, err := c.out.ReadString('\n')
		if err == nil && strings.TrimSpace(l) != "ready" {
			err = fmt.Errorf("child said %q, want ready", l)
		}
		line <- err
		if err != nil {
			return
		}
		var r childResult
		if err := json.NewDecoder(c.out).Decode(&r); err != nil {
			r.Err = fmt.Sprintf("read result: %v", err)
		}
		c.result <- r
	}()
	select {
	case err := <-line:
		if err != nil {
			return fmt.Errorf("%w (stderr: %s)", err, c.stderr)
		}
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("child not ready after %v (stderr: %s)", timeout, c.stderr)
	}
}

// kill stops the child by its pid and reaps it.
func (c *child) kill() {
	c.cmd.Process.Kill()
	c.cmd.Wait()
}

// appliedPartition is a partition as the parent applied it: CutAt is
// taken after the link's state changed, HealAt before it changed back
// (µs, CLOCK_REALTIME), so that a call sent after CutAt and returned before
// HealAt crossed a partitioned link all the time.
type appliedPartition struct {
	Partition
	CutAt, HealAt int64
}

// outcome is everything one run produced, for the report.
type outcome struct {
	sc         Scenario
	strategy   string
	start      int64 // µs
	members    []childResult
	services   []childResult
	wan        []proxy.Stats // per region, over the run
	partitions []appliedPartition
	machine    Machine
}

// runScenario runs sc under the named strategy: the home redis-server, a
// WAN link per region, the region services (if the strategy has them) and
// the members, the demand and the partitions; it returns what they measured.
func runScenario(ctx context.Context, sc Scenario, name string) (_ *outcome, err error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	strat, err := lookupStrategy(name)
	if err != nil {
		return nil, err
	}
	rs, err := redisserver.Start() // the home store
	if err != nil {
		return nil, err
	}
	var redisCPU time.Duration
	defer func() {
		if redisCPU == 0 {
			rs.Kill()
		}
	}()

	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	links := make([]*proxy.Link, len(sc.Regions))
	for i, r := range sc.Regions {
		cfg := sc.Link
		cfg.RTT = r.RTT
		cfg.Seed = sc.Seed + uint64(i)
		l, err := proxy.Listen(rs.Addr, cfg)
		if err != nil {
			return nil, err
		}
		links[i] = l
		closers = append(closers, func() { l.Close() })
	}
	var children []*child
	defer func() {
		for _, c := range children {
			if c.cmd.ProcessState == nil {
				c.kill()
			}
		}
	}()

	// The region services, if any, and the local links to them.
	svcAddrs := make([][]string, len(sc.Regions))
	var services []*child
	if rsv, ok := strat.(RegionService); ok {
		n := rsv.ServicesPerRegion()
		if n < 1 || n > maxMembers {
			return nil, fmt.Errorf("strategy %s: ServicesPerRegion %d, want 1 to %d", name, n, maxMembers)
		}
		for ri, r := range sc.Regions {
			for i := range n {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					return nil, err
				}
				addr := ln.Addr().String()
				f, err := ln.(*net.TCPListener).File() // a copy, for the child
				ln.Close()
				if err != nil {
					return nil, err
				}
				cfg := childConfig{Role: "service", Strategy: name, Service: &Service{
					Region: r.Name, RegionIndex: ri, Index: i, Regions: len(sc.Regions), PerRegion: n,
					Members: len(sc.Regions) * sc.Members, HomeAddr: links[ri].Addr(),
					RTT: r.RTT, Jitter: sc.Link.Jitter, Limit: sc.Limit,
				}}
				c, err := spawn(cfg, f)
				f.Close()
				if err != nil {
					return nil, err
				}
				children = append(children, c)
				services = append(services, c)
				if err := c.ready(60 * time.Second); err != nil {
					return nil, fmt.Errorf("service %s/%d: %w", r.Name, i, err)
				}
				local, err := proxy.Listen(addr, proxy.Config{RTT: sc.LocalRTT, Seed: sc.Seed})
				if err != nil {
					return nil, err
				}
				closers = append(closers, func() { local.Close() })
				svcAddrs[ri] = append(svcAddrs[ri], local.Addr())
			}
		}
	}

	// The members.
	var members []*child
	for ri, r := range sc.Regions {
		for i := range sc.Members {
			phases := make([]memberPhase, len(sc.Phases))
			for pi, p := range sc.Phases {
				phases[pi] = memberPhase{For: p.For, Rate: float64(p.Offered[ri]) / float64(sc.Members)}
			}
			cfg := childConfig{Role: "member", Strategy: name, Key: "quota", Deadline: sc.Deadline, Phases: phases, Seed: sc.Seed,
				Member: &Member{
					Region: r.Name, RegionIndex: ri, Index: i, Regions: len(sc.Regions), PerRegion: sc.Members,
					Members: len(sc.Regions) * sc.Members, HomeAddr: links[ri].Addr(), ServiceAddrs: svcAddrs[ri],
					RTT: r.RTT, Jitter: sc.Link.Jitter, Limit: sc.Limit,
				}}
			c, err := spawn(cfg)
			if err != nil {
				return nil, err
			}
			children = append(children, c)
			members = append(members, c)
		}
	}
	for i, c := range members {
		if err := c.ready(60 * time.Second); err != nil {
			return nil, fmt.Errorf("member %d: %w", i, err)
		}
	}

	// The start: the first window boundary at least 300 ms away.
	p := sc.Limit.Period.Microseconds()
	t0 := time.Now().Add(300 * time.Millisecond).UnixMicro()
	t0 += (p - t0%p) % p
	start := time.UnixMicro(t0)
	end := start.Add(sc.Duration())
	mach := startMachine()
	mach.redisPid = rs.Pid()
	mach.redis0 = procCPU(mach.redisPid)
	for _, c := range members {
		fmt.Fprintf(c.stdin, "start %d\n", t0)
	}

	// The WAN counters over the run, and the partitions.
	before := make([]proxy.Stats, len(links))
	after := make([]proxy.Stats, len(links))
	var mu sync.Mutex
	var timers []*time.Timer
	timers = append(timers, time.AfterFunc(time.Until(start), func() {
		mu.Lock()
		defer mu.Unlock()
		for i, l := range links {
			before[i] = l.Stats()
		}
	}), time.AfterFunc(time.Until(end), func() {
		mu.Lock()
		defer mu.Unlock()
		for i, l := range links {
			after[i] = l.Stats()
		}
	}))
	applied := make([]appliedPartition, len(sc.Partitions))
	for i, pt := range sc.Partitions {
		l := links[sc.region(pt.Region)]
		applied[i].Partition = pt
		timers = append(timers, time.AfterFunc(time.Until(start.Add(pt.At)), func() {
			l.SetState(pt.State)
			mu.Lock()
			applied[i].CutAt = time.Now().UnixMicro()
			mu.Unlock()
		}), time.AfterFunc(time.Until(start.Add(pt.At+pt.For)), func() {
			mu.Lock()
			applied[i].HealAt = time.Now().UnixMicro()
			mu.Unlock()
			l.SetState(proxy.Up)
		}))
	}
	defer func() {
		for _, t := range timers {
			t.Stop()
		}
	}()

	out := &outcome{sc: sc, strategy: name, start: t0}
	wait := time.Until(end) + sc.Deadline + 60*time.Second
	deadline := time.After(wait)
	for i, c := range members {
		select {
		case r := <-c.result:
			if r.Err != "" {
				return nil, fmt.Errorf("member %s/%d: %s (stderr: %s)", sc.Regions[r.Region].Name, r.Index, r.Err, c.stderr)
			}
			out.members = append(out.members, r)
		case <-deadline:
			return nil, fmt.Errorf("member %d: no result %v after the start (stderr: %s)", i, wait, c.stderr)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for _, c := range services {
		c.stdin.Close()
		select {
		case r := <-c.result:
			if r.Err != "" {
				return nil, fmt.Errorf("service %s/%d: %s (stderr: %s)", sc.Regions[r.Region].Name, r.Index, r.Err, c.stderr)
			}
			out.services = append(out.services, r)
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("service: no result 30 s after its stop (stderr: %s)", c.stderr)
		}
	}
	for _, c := range children {
		c.cmd.Wait()
	}
	redisCPU = procCPU(rs.Pid()) - mach.redis0
	rs.Kill()

	mu.Lock()
	for i := range links {
		out.wan = append(out.wan, diffStats(after[i], before[i]))
	}
	out.partitions = applied
	mu.Unlock()
	out.machine = mach.finish(redisCPU, out.members, out.services)
	return out, nil
}

func diffStats(a, b proxy.Stats) proxy.Stats {
	return proxy.Stats{
		Conns: a.Conns - b.Conns, Resets: a.Resets - b.Resets,
		ChunksUp: a.ChunksUp - b.ChunksUp, ChunksDown: a.ChunksDown - b.ChunksDown,
		BytesUp: a.BytesUp - b.BytesUp, BytesDown: a.BytesDown - b.BytesDown,
		Lost: a.Lost - b.Lost, HeldUp: a.HeldUp - b.HeldUp,
		DeliveredUp: a.DeliveredUp - b.DeliveredUp, DeliveredDown: a.DeliveredDown - b.DeliveredDown,
	}
}
