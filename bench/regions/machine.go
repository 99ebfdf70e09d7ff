package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// sleepTick is the sleeper's interval: each process sleeps this long in a
// loop and records how much later than asked it woke up. That overshoot is
// the scheduling delay every timer and goroutine of the process suffered
// too (the proxy's deliveries, a member's request issuing, a decision's
// return), so it bounds how much of a measured latency is the harness's own.
const sleepTick = 5 * time.Millisecond

// lateness summarises a process's oversleeps, in µs.
type lateness struct {
	Samples       int
	P50, P99, Max int64
}

type sleeper struct {
	stopc chan struct{}
	done  chan lateness
}

func startSleeper() *sleeper {
	s := &sleeper{stopc: make(chan struct{}), done: make(chan lateness, 1)}
	go func() {
		var over []int64
		for {
			select {
			case <-s.stopc:
				s.done <- summarize(over)
				return
			default:
			}
			t := time.Now()
			time.Sleep(sleepTick)
			over = append(over, (time.Since(t) - sleepTick).Microseconds())
		}
	}()
	return s
}

func (s *sleeper) stop() lateness {
	close(s.stopc)
	return <-s.done
}

func summarize(v []int64) lateness {
	if len(v) == 0 {
		return lateness{}
	}
	slices.Sort(v)
	return lateness{Samples: len(v), P50: pct(v, 0.50), P99: pct(v, 0.99), Max: v[len(v)-1]}
}

// pct returns the p-th quantile of sorted v (nearest rank).
func pct(v []int64, p float64) int64 {
	if len(v) == 0 {
		return 0
	}
	i := int(p*float64(len(v))+0.999999) - 1
	return v[min(max(i, 0), len(v)-1)]
}

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadavg reads /proc/loadavg's three averages.
func loadavg() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		l[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return l
}

// cpuTimes reads the machine's busy and total jiffies from /proc/stat.
func cpuTimes() (busy, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0
	}
	for i, s := range f[1:] {
		v, _ := strconv.ParseInt(s, 10, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

// clockTick is the kernel's USER_HZ, which /proc/<pid>/stat counts in; 100
// on every Linux this runs on.
const clockTick = 100

// procCPU reads a process's user+system CPU time from /proc/<pid>/stat.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: fields count from
	// after its closing parenthesis.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64) // utime, field 14
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * time.Second / clockTick
}

// machine measures the machine while a run lasts.
type machine struct {
	mu            sync.Mutex
	loadBefore    [3]float64
	busy0, total0 int64
	start         time.Time
	self0         time.Duration
	sleeper       *sleeper
	redisPid      int
	redis0        time.Duration
}

func startMachine() *machine {
	m := &machine{loadBefore: loadavg(), start: time.Now(), self0: selfCPU(), sleeper: startSleeper()}
	m.busy0, m.total0 = cpuTimes()
	return m
}

// Machine is the report's account of the machine during a run.
type Machine struct {
	CPUs       int
	LoadBefore [3]float64
	LoadAfter  [3]float64
	// Busy is the share of all CPUs busy during the run (every process of
	// the machine, the harness's included).
	Busy float64
	// HarnessCPU is the CPU time of the harness (parent, members,
	// services) and RedisCPU redis-server's, as a share of one CPU over
	// the run.
	HarnessCPU, RedisCPU float64
	// Parent and WorstChild are the oversleeps of the parent (which runs
	// the proxies) and of the worst child (by p99).
	Parent, WorstChild lateness
	IssueLateMaxMS     float64
	Starved            bool
	Warnings           []string
}

// Thresholds past which a run is reported as starved: its latencies then
// hold the harness's own scheduling delay.
const (
	starvedP99   = 5 * time.Millisecond  // a process's p99 oversleep
	starvedIssue = 50 * time.Millisecond // a request issued this late
)

// finish measures the machine at the end of a run.
func (m *machine) finish(redisCPU time.Duration, members, services []childResult) Machine {
	wall := time.Since(m.start)
	busy1, total1 := cpuTimes()
	out := Machine{
		CPUs: runtime.NumCPU(), LoadBefore: m.loadBefore, LoadAfter: loadavg(),
		Parent: m.sleeper.stop(),
	}
	if d := total1 - m.total0; d > 0 {
		out.Busy = float64(busy1-m.busy0) / float64(d)
	}
	harness := selfCPU() - m.self0
	var issueLate int64
	for _, r := range append(append([]childResult(nil), members...), services...) {
		harness += r.CPU
		if r.Sleep.P99 > out.WorstChild.P99 || r.Sleep.P99 == out.WorstChild.P99 && r.Sleep.Max > out.WorstChild.Max {
			out.WorstChild = r.Sleep
		}
		issueLate = max(issueLate, r.IssueLateUS)
	}
	out.HarnessCPU = harness.Seconds() / wall.Seconds()
	out.RedisCPU = redisCPU.Seconds() / wall.Seconds()
	out.IssueLateMaxMS = float64(issueLate) / 1000
	for _, l := range []struct {
		who string
		l   lateness
	}{{"parent (proxies)", out.Parent}, {"worst child", out.WorstChild}} {
		if time.Duration(l.l.P99)*time.Microsecond > starvedP99 {
			out.Starved = true
			out.Warnings = append(out.Warnings, fmt.Sprintf("%s: 1%% of 5 ms sleeps overslept %.1f ms or more (max %.1f ms): latencies include that much of the harness's own scheduling delay",
				l.who, float64(l.l.P99)/1000, float64(l.l.Max)/1000))
		}
	}
	if time.Duration(issueLate)*time.Microsecond > starvedIssue {
		out.Starved = true
		out.Warnings = append(out.Warnings, fmt.Sprintf("a member issued a request %.0f ms after its planned time: the offered load came in bursts", out.IssueLateMaxMS))
	}
	if out.LoadBefore[0] > float64(out.CPUs) {
		out.Warnings = append(out.Warnings, fmt.Sprintf("load average %.2f on %d CPUs before the run: other work shared the machine", out.LoadBefore[0], out.CPUs))
	}
	return out
}
