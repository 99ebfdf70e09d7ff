package compat

// TestConfigAcceptance is a differential test of configuration loading:
// which files the reference (envoyproxy/ratelimit) and sluice accept.
//
// The corpus (testdata/configs, listed with its expectations in
// config_corpus_test.go) holds valid files that use every key of the
// reference, each style of YAML (anchors, merge keys, flow style, YAML 1.1
// scalars, document markers, BOM, CRLF) and directories of several files,
// and invalid variants, each one change to a valid file: an unknown key at
// each level, a known key in the wrong place, every wrong type of each
// field, numbers out of range, bad units, unlimited with a unit,
// duplicates, bad replaces, share_threshold on an exact value, nesting,
// empty and comment-only files, several documents, sluice's extensions.
// The generated part applies random single mutations (delete a key, rename
// a key, duplicate a list item, change a scalar's type) to the valid files,
// seeded by SLUICE_COMPAT_SEED (logged), so that differences no one listed
// turn up.
//
// For each configuration:
//
//   - the reference's verdict: it runs with the files as its runtime
//     directory (on a redis-server shared by all, with a CACHE_KEY_PREFIX
//     of its own) and gets one ShouldRateLimit for the file's domain. With
//     a bad configuration it starts anyway and answers every request with
//     "no rate limit configuration loaded" (src/service/ratelimit.go); its
//     log then has "Error loading new configuration: FILE: problem", which
//     must agree with the answer. A non-configuration panic while loading
//     ends the process: a rejection too.
//   - sluice's verdict: sluice check DIR (exit 0 or 1, file:line: key:
//     problem). When it rejects, sluice serve --config DIR must refuse to
//     start, with the same message.
//   - when both accept: sluice serve starts on the files, and every limit
//     the reference loaded (its /rlconfig dump on the debug port) is asked
//     for twice on both, the answers compared; then one request with all of
//     them, compared by checker.step.
//
// Corpus cases must give the verdicts config_corpus_test.go lists (with a
// part of each side's error); a verdict difference must be one of
// knownDifferences, each with its reason and classification. A generated
// mutation may only differ as a knownDifference with a matcher recognises.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

// configWorkers is how many configurations are tried at once (each a
// reference process, and a sluice process when both accept).
const configWorkers = 8

// defaultMutants is the number of generated mutations;
// SLUICE_COMPAT_CONFIG_MUTANTS changes it.
const defaultMutants = 300

// verdict is one side's verdict on a configuration.
type verdict struct {
	accepted bool
	// msg is why it rejected: the reference's "Error loading new
	// configuration" log line (or how it died), sluice check's error.
	msg string
}

func (v verdict) String() string {
	if v.accepted {
		return "accepts"
	}
	return "rejects: " + v.msg
}

// acceptance is the state shared by the cases of TestConfigAcceptance.
type acceptance struct {
	redis  string
	prefix atomic.Int64 // numbers the reference processes' CACHE_KEY_PREFIX

	mu       sync.Mutex
	pairs    map[string]int      // "reference/sluice" verdicts -> configurations
	seen     map[string][]string // known difference -> the cases that showed it
	limits   int                 // limits asked for on both (twice each)
	combined int                 // requests with all the limits of a domain
	full     int                 // ... compared in full (the others at a denial)
}

func (a *acceptance) count(group string, ref, sl verdict, diff string, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	word := func(v verdict) string {
		if v.accepted {
			return "accept"
		}
		return "reject"
	}
	a.pairs[group+": reference "+word(ref)+", sluice "+word(sl)]++
	if diff != "" {
		a.seen[diff] = append(a.seen[diff], group+"/"+name)
	}
}

func TestConfigAcceptance(t *testing.T) {
	referenceBin(t)
	began := time.Now()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SLUICE_COMPAT_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("SLUICE_COMPAT_SEED: %v", err)
		}
	}
	n := defaultMutants
	if s := os.Getenv("SLUICE_COMPAT_CONFIG_MUTANTS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("SLUICE_COMPAT_CONFIG_MUTANTS: %v", err)
		}
	}
	t.Logf("seed %d (replay with SLUICE_COMPAT_SEED=%d), %d generated mutations", seed, seed, n)
	checkCorpus(t)
	a := &acceptance{redis: redistest.Server(t).Addr, pairs: map[string]int{}, seen: map[string][]string{}}

	t.Run("corpus", func(t *testing.T) {
		inParallel(len(corpus), func(i int) {
			c := corpus[i]
			t.Run(c.name, func(t *testing.T) { a.corpusCase(t, c) })
		})
	})
	muts := mutants(t, rand.New(rand.NewPCG(seed, 0x5eed)), n)
	t.Run("generated", func(t *testing.T) {
		inParallel(len(muts), func(i int) {
			m := muts[i]
			t.Run(m.name, func(t *testing.T) { a.generatedCase(t, m) })
		})
	})

	ran := map[string]int{}
	for _, k := range slices.Sorted(maps.Keys(a.pairs)) {
		t.Logf("%4d  %s", a.pairs[k], k)
		group, _, _ := strings.Cut(k, ":")
		ran[group] += a.pairs[k]
	}
	for _, d := range knownDifferences {
		cases := slices.Sorted(slices.Values(a.seen[d.id]))
		if len(cases) == 0 {
			continue
		}
		if len(cases) > 6 {
			cases = append(cases[:6:6], fmt.Sprintf("... %d in all", len(cases)))
		}
		t.Logf("known difference %s, %s, %s:\n    %s\n    seen in %s", d.id, d.class(), d.kind, d.reason, strings.Join(cases, ", "))
	}
	t.Logf("answers compared where both accept: %d limits (2 requests each); %d requests with all the limits of a domain (%d compared in full, %d at a denial)",
		a.limits, a.combined, a.full, a.combined-a.full)
	t.Logf("%d corpus cases and %d generated mutations in %v", ran["corpus"], ran["generated"], time.Since(began).Round(time.Millisecond))
}

// inParallel runs f(0) ... f(n-1) on configWorkers goroutines: subtests run
// from several goroutines at once (testing allows it) are not limited by
// -parallel, which is GOMAXPROCS by default.
func inParallel(n int, f func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range configWorkers {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// checkCorpus checks that corpus and testdata/configs list the same
// configurations, and that each known difference has a corpus case.
func checkCorpus(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join("testdata", "configs"))
	if err != nil {
		t.Fatal(err)
	}
	onDisk := map[string]bool{}
	for _, e := range entries {
		onDisk[strings.TrimSuffix(e.Name(), ".yaml")] = true
	}
	listed := map[string]bool{}
	used := map[string]bool{}
	for _, c := range corpus {
		if listed[c.name] {
			t.Errorf("corpus lists %s twice", c.name)
		}
		listed[c.name] = true
		if !onDisk[c.name] {
			t.Errorf("corpus lists %s, not in testdata/configs", c.name)
		}
		if c.diff != "" && difference(c.diff).answers || c.answers != "" && !difference(c.answers).answers {
			t.Errorf("%s: a verdict difference as diff, an answer difference as answers", c.name)
		}
		used[c.diff], used[c.answers] = true, true
		if c.ref && c.refErr != "" || !c.ref && c.refErr == "" {
			t.Errorf("%s: refErr is the part of the reference's error to expect, when (and only when) it rejects", c.name)
		}
		if slAccepts := c.ref != (c.diff != ""); slAccepts && c.slErr != "" || !slAccepts && c.slErr == "" {
			t.Errorf("%s: slErr is the part of sluice's error to expect, when (and only when) it rejects", c.name)
		}
	}
	for name := range onDisk {
		if !listed[name] {
			t.Errorf("testdata/configs/%s is not in corpus", name)
		}
	}
	for _, d := range knownDifferences {
		if !used[d.id] {
			t.Errorf("known difference %s has no corpus case", d.id)
		}
	}
}

// caseFiles reads a corpus case: name.yaml, or every file under the
// directory name (by their paths in it).
func caseFiles(t *testing.T, name string) map[string][]byte {
	t.Helper()
	base := filepath.Join("testdata", "configs")
	if b, err := os.ReadFile(filepath.Join(base, name+".yaml")); err == nil {
		return map[string][]byte{name + ".yaml": b}
	}
	files := map[string][]byte{}
	root := filepath.Join(base, name)
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files[rel] = b
		return nil
	})
	if err != nil || len(files) == 0 {
		t.Fatalf("testdata/configs/%s: %v (%d files)", name, err, len(files))
	}
	return files
}

func (a *acceptance) corpusCase(t *testing.T, c corpusCase) {
	files := caseFiles(t, c.name)
	e := a.evaluate(t, files, c.settings)
	defer func() {
		if t.Failed() {
			t.Logf("configuration:\n%s", showFiles(files))
		}
	}()
	wantSl := c.ref
	if c.diff != "" {
		wantSl = difference(c.diff).sluiceAccepts
	}
	if e.ref.accepted != c.ref {
		t.Errorf("the reference %s; the corpus says it %s", e.ref, word(c.ref))
	} else if !e.ref.accepted && !strings.Contains(e.ref.msg, c.refErr) {
		t.Errorf("the reference rejects it, but not with %q: %s", c.refErr, e.ref.msg)
	}
	if e.sl.accepted != wantSl {
		why := "as the reference"
		if c.diff != "" {
			why = "known difference " + c.diff
		}
		t.Errorf("sluice %s; expected: it %s (%s)", e.sl, word(wantSl), why)
	} else if !e.sl.accepted && !strings.Contains(e.sl.msg, c.slErr) {
		t.Errorf("sluice rejects it, but not with %q: %s", c.slErr, e.sl.msg)
	}
	if e.ref.accepted != e.sl.accepted {
		d := difference(c.diff)
		t.Logf("known difference %s, %s: reference %s; sluice %s", d.id, d.class(), e.ref, e.sl)
	}
	diff := c.diff
	if e.ref.accepted && e.sl.accepted && !t.Failed() {
		diffs := a.compare(t, e, c.answers == "")
		switch {
		case c.answers == "" && len(diffs) > 0:
			t.Errorf("both accept it, but answer differently:\n%s", strings.Join(diffs, "\n"))
		case c.answers != "" && len(diffs) == 0:
			t.Errorf("both accept it and answer the same; the corpus expects known answer difference %s", c.answers)
		case c.answers != "":
			diff = c.answers
			t.Logf("known answer difference %s:\n%s", c.answers, strings.Join(diffs, "\n"))
		}
	}
	a.count("corpus", e.ref, e.sl, diff, c.name)
}

func word(accepts bool) string {
	if accepts {
		return "accepts"
	}
	return "rejects"
}

func (a *acceptance) generatedCase(t *testing.T, m mutant) {
	files := map[string][]byte{m.base + ".yaml": m.data}
	e := a.evaluate(t, files, settings{})
	defer func() {
		if t.Failed() {
			t.Logf("mutation of testdata/configs/%s.yaml: %s\n%s", m.base, m.what, showFiles(files))
		}
	}()
	diff := ""
	switch {
	case e.ref.accepted != e.sl.accepted:
		for _, d := range knownDifferences {
			if d.match != nil && !d.answers && d.sluiceAccepts == e.sl.accepted && d.match(e.ref, e.sl) {
				diff = d.id
				break
			}
		}
		if diff == "" {
			t.Errorf("verdicts differ, and no known difference explains it: reference %s; sluice %s", e.ref, e.sl)
		} else {
			t.Logf("%s: known difference %s: reference %s; sluice %s", m.what, diff, e.ref, e.sl)
		}
	case e.ref.accepted:
		if diffs := a.compare(t, e, true); len(diffs) > 0 {
			t.Errorf("both accept it, but answer differently:\n%s", strings.Join(diffs, "\n"))
		}
	}
	a.count("generated", e.ref, e.sl, diff, m.name)
}

func showFiles(files map[string][]byte) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(&b, "--- %s\n%s", name, files[name])
		if !bytes.HasSuffix(files[name], []byte("\n")) {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// evaluation is what evaluate found out about one configuration.
type evaluation struct {
	ref, sl verdict
	set     settings
	dir     string   // the configuration directory
	refSvc  *service // the reference, running
	debug   string   // the base URL of its debug listener (/rlconfig)
	domains []string // the domains sluice check loaded
}

var domainLine = regexp.MustCompile(`(?m)^\s*"?domain"?\s*:\s*["']?([^"'\s#,}]+)`)

// evaluate writes files into a fresh directory and gets both verdicts,
// each run with set.
func (a *acceptance) evaluate(t *testing.T, files map[string][]byte, set settings) *evaluation {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	domain := "compat-config"
	for _, name := range slices.Sorted(maps.Keys(files)) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			t.Fatal(err)
		}
		if m := domainLine.FindSubmatch(files[name]); m != nil && domain == "compat-config" {
			domain = string(m[1])
		}
	}
	e := &evaluation{dir: dir, set: set}
	e.refSvc, e.debug, e.ref = a.reference(t, root, domain, set.refEnv...)
	e.sl, e.domains = sluiceCheck(t, dir, set.slArgs...)
	if !e.sl.accepted {
		serveRefuses(t, dir, e.sl.msg, set.slArgs...)
	}
	return e
}

// reference runs the reference on the configuration under root and
// returns its verdict, retrying when a port it was given was taken in the
// meantime.
func (a *acceptance) reference(t *testing.T, root, domain string, env ...string) (*service, string, verdict) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		s, debug, v, err := a.tryReference(t, root, domain, env...)
		if err == nil {
			return s, debug, v
		}
		if attempt == 3 {
			t.Fatalf("reference: %v", err)
		}
		t.Logf("reference: %v; again", err)
	}
}

var errPortTaken = errors.New("a port was taken before the reference listened")

// givenPorts are the ports given to reference processes so far. The
// reference listens with SO_REUSEPORT: two processes given one port would
// both listen on it, and the kernel would share its connections between
// them. A port is given once per run.
var givenPorts = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

// uniquePort returns a loopback port that is free, that no other reference
// of this run was given and, where the system says so, below its ephemeral
// range: the kernel never gives those to a listener on port 0 (sluice's) or
// to an outgoing connection, which would make the reference fail to
// listen.
func uniquePort(t *testing.T) string {
	t.Helper()
	low, high := 10000, 0
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			high, _ = strconv.Atoi(f[0])
		}
	}
	for range 1000 {
		p := 0
		if high-low >= 4096 {
			p = low + rand.IntN(high-low)
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				continue
			}
			l.Close()
		} else {
			p = freePort(t)
		}
		givenPorts.Lock()
		taken := givenPorts.m[p]
		givenPorts.m[p] = true
		givenPorts.Unlock()
		if !taken {
			return strconv.Itoa(p)
		}
	}
	t.Fatal("no free port for the reference")
	return ""
}

func (a *acceptance) tryReference(t *testing.T, root, domain string, env ...string) (*service, string, verdict, error) {
	t.Helper()
	httpPort, grpcPort, debugPort := uniquePort(t), uniquePort(t), uniquePort(t)
	cmd := exec.Command(referenceBin(t))
	cmd.Dir = root
	cmd.Env = referenceEnv(root, a.redis, httpPort, grpcPort, debugPort,
		append([]string{"CACHE_KEY_PREFIX=cfg" + strconv.FormatInt(a.prefix.Add(1), 10) + "_"}, env...)...)
	s := run(t, "reference", cmd)
	health := "http://127.0.0.1:" + httpPort + "/healthcheck"
	for deadline := time.Now().Add(20 * time.Second); ; {
		if strings.Contains(s.out.String(), "Failed to open debug HTTP listener") {
			return nil, "", verdict{}, errPortTaken // the process goes on without it
		}
		resp, err := http.Get(health)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if s.exited() {
			out := s.out.String()
			if strings.Contains(out, "address already in use") {
				return nil, "", verdict{}, fmt.Errorf("%w: %s", errPortTaken, tail(out, 300))
			}
			// A panic that is not a RateLimitConfigError ends the
			// process (SetConfig re-panics): a rejection too.
			return s, "", verdict{msg: "exited (" + fmt.Sprint(s.exitErr) + "): " + crash(out)}, nil
		}
		if time.Now().After(deadline) {
			t.Fatalf("reference not healthy on %s within 20s (last: %v)", health, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := grpc.NewClient("127.0.0.1:"+grpcPort, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.rls = pb.NewRateLimitServiceClient(conn)
	s.http = "http://127.0.0.1:" + httpPort

	// One request for the file's domain, on a key no file configures.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = s.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlpb.RateLimitDescriptor{
		{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "compat-config-probe", Value: "1"}}},
	}}, grpc.WaitForReady(true))
	logged := configError(s.out.String())
	// The answers came from this process only if it listens on every port
	// it was given: it logs "Listening for ..." and then fails at once when
	// it cannot (fatal for HTTP and gRPC).
	for !listening(s.out.String(), httpPort, grpcPort, debugPort) && !s.exited() {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if s.exited() || strings.Contains(s.out.String(), "Failed to open") {
		return nil, "", verdict{}, fmt.Errorf("%w: %s", errPortTaken, tail(s.out.String(), 300))
	}
	switch {
	case err == nil && logged == "":
		return s, "http://127.0.0.1:" + debugPort, verdict{accepted: true}, nil
	case err == nil:
		t.Fatalf("the reference answers, but logged %q", logged)
	case strings.Contains(status.Convert(err).Message(), "no rate limit configuration loaded") && logged != "":
		return s, "", verdict{msg: logged}, nil
	case strings.Contains(status.Convert(err).Message(), "no rate limit configuration loaded"):
		t.Fatalf("the reference has no configuration, but logged no error:\n%s", tail(s.out.String(), 4000))
	default:
		t.Fatalf("the reference's answer to the probe: %v", err)
	}
	panic("unreachable")
}

// listening reports whether the reference's output says it listens on
// its three ports.
func listening(out, httpPort, grpcPort, debugPort string) bool {
	for _, l := range []string{"HTTP on '127.0.0.1:" + httpPort, "gRPC on '127.0.0.1:" + grpcPort, "debug on '127.0.0.1:" + debugPort} {
		if !strings.Contains(out, "Listening for "+l+"'") {
			return false
		}
	}
	return true
}

var logMsg = regexp.MustCompile(`level=error msg=("(?:[^"\\]|\\.)*")`)

// configError returns the message of the reference's last "Error loading
// new configuration" log line, "" if none.
func configError(out string) string {
	last := ""
	for _, m := range logMsg.FindAllStringSubmatch(out, -1) {
		msg, err := strconv.Unquote(m[1])
		if err == nil && strings.HasPrefix(msg, "Error loading new configuration: ") {
			last = msg
		}
	}
	return last
}

// crash returns the panic of a process's output.
func crash(out string) string {
	if i := strings.Index(out, "panic: "); i >= 0 {
		out = out[i:]
		if lines := strings.SplitN(out, "\n", 3); len(lines) > 1 {
			return lines[0] + " " + lines[1]
		}
		return out
	}
	return tail(out, 400)
}

// sluiceCheck runs sluice check [args] DIR: its verdict and the domains it
// loaded.
func sluiceCheck(t *testing.T, dir string, args ...string) (verdict, []string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(sluiceBin, append(append([]string{"check"}, args...), dir)...)
	cmd.Env = minimalEnv()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		_, list, ok := strings.Cut(strings.TrimSpace(stdout.String()), "domain(s): ")
		if !ok {
			t.Fatalf("sluice check: exit 0, %q", stdout.String())
		}
		return verdict{accepted: true}, strings.Split(list, ", ")
	case errors.As(err, &exit) && exit.ExitCode() == 1 && stderr.Len() > 0:
		return verdict{msg: strings.TrimSpace(stderr.String())}, nil
	default:
		t.Fatalf("sluice check: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	return verdict{}, nil
}

// serveRefuses checks that sluice serve refuses to start on a configuration
// that sluice check rejected with msg, and says why.
func serveRefuses(t *testing.T, dir, msg string, args ...string) {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready.json")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sluiceBin, append([]string{"serve", "--config", dir,
		"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--ready-file", ready,
		"--log-level", "warn", "--reload-interval", "0"}, args...)...)
	cmd.Env = minimalEnv()
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Errorf("sluice serve ran on a configuration sluice check rejects (killed after 15s):\n%s", tail(string(out), 2000))
	case !errors.As(err, &exit) || exit.ExitCode() == 0:
		t.Errorf("sluice serve on a configuration sluice check rejects: %v\n%s", err, tail(string(out), 2000))
	case !strings.Contains(string(out), msg):
		t.Errorf("sluice serve refuses to start, but does not say %q:\n%s", msg, tail(string(out), 2000))
	}
	if _, err := os.Stat(ready); err == nil {
		t.Errorf("sluice serve wrote its ready file on a configuration sluice check rejects")
	}
}

// limitLine is one limit of the reference's /rlconfig dump
// ("domain.key_value.key2: unit=MINUTE requests_per_unit=5, ...").
type limitLine struct {
	line, domain, unit string
	entries            []*rlpb.RateLimitDescriptor_Entry
}

var dumpLine = regexp.MustCompile(`^(.+): unit=(\w+) requests_per_unit=\d+, shadow_mode: (?:true|false), quota_mode: (?:true|false)$`)

// limits reads the reference's loaded limits from its debug listener and
// makes a request descriptor for each: the key and value of each level
// ("key_value", split at the first '_'), a wildcard value with each '*'
// replaced by "w1", "u1" for a key-only level.
func limits(t *testing.T, debug string, domains []string) []limitLine {
	t.Helper()
	resp, err := http.Get(debug + "/rlconfig")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("reference /rlconfig: %v %d %q", err, resp.StatusCode, body)
	}
	var out []limitLine
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		if line == "" {
			continue
		}
		m := dumpLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("reference /rlconfig: unexpected line %q", line)
		}
		l := limitLine{line: line, unit: m[2]}
		full := m[1]
		for _, d := range domains {
			if strings.HasPrefix(full, d+".") && len(d) > len(l.domain) {
				l.domain = d
			}
		}
		if l.domain == "" { // a domain sluice did not load
			l.domain, _, _ = strings.Cut(full, ".")
		}
		for _, seg := range strings.Split(strings.TrimPrefix(full, l.domain+"."), ".") {
			key, value, _ := strings.Cut(seg, "_")
			switch {
			case value == "":
				value = "u1"
			case strings.Contains(value, "*"):
				value = strings.ReplaceAll(value, "*", "w1")
			}
			l.entries = append(l.entries, &rlpb.RateLimitDescriptor_Entry{Key: key, Value: value})
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(x, y limitLine) int { return strings.Compare(x.line, y.line) })
	return out
}

// unitWindow is the length of the fixed window of a unit, as far as a
// difference across its boundary matters: every boundary of a longer
// unit is a minute's.
func unitWindow(unit string) time.Duration {
	if unit == "SECOND" {
		return time.Second
	}
	return time.Minute
}

// compare starts sluice serve on the configuration both accept and asks
// both, twice, for every limit the reference loaded; then, when combined
// is set and they agreed, for all of them in one request (compared by
// checker.step). It returns the differences of the first part.
func (a *acceptance) compare(t *testing.T, e *evaluation, combined bool) []string {
	t.Helper()
	sl := startSluice(t, "sluice", e.dir, e.set.slArgs...)
	lines := limits(t, e.debug, e.domains)
	var diffs []string
	byDomain := map[string][]*rlpb.RateLimitDescriptor{}
	shortest := map[string]time.Duration{}
	first := map[string]time.Time{} // a domain's first request: its counters count from there
	for _, l := range lines {
		req := &pb.RateLimitRequest{Domain: l.domain, Descriptors: []*rlpb.RateLimitDescriptor{{Entries: l.entries}}}
		began := time.Now()
		if _, ok := first[l.domain]; !ok {
			first[l.domain] = began
		}
		for i := range 2 {
			asked := time.Now()
			r, rerr := e.refSvc.should(req)
			s, serr := sl.should(req)
			slack := time.Since(asked)
			if rerr != nil || serr != nil {
				diffs = append(diffs, fmt.Sprintf("  %s\n    request:   %s\n    reference: %v %s\n    sluice:    %v %s",
					l.line, text(req), errText(rerr), text(r), errText(serr), text(s)))
				break
			}
			if i == 0 && len(r.Statuses) == 1 && r.Statuses[0].CurrentLimit == nil && l.unit != "UNKNOWN" {
				t.Logf("the request for %q does not reach that limit in the reference (a '.' or '_' in a key or value): compared all the same", l.line)
			}
			rc, sc := proto.Clone(r).(*pb.RateLimitResponse), proto.Clone(s).(*pb.RateLimitResponse)
			alignResponse(rc, sc, slack)
			if proto.Equal(rc, sc) {
				continue
			}
			if w := unitWindow(l.unit); time.Now().Truncate(w) != began.Truncate(w) {
				t.Logf("%s: answers differ across a %v boundary: not compared", l.line, w)
				break
			}
			diffs = append(diffs, fmt.Sprintf("  %s (request %d)\n    request:   %s\n    reference: %s\n    sluice:    %s",
				l.line, i+1, text(req), text(r), text(s)))
			break
		}
		byDomain[l.domain] = append(byDomain[l.domain], &rlpb.RateLimitDescriptor{Entries: l.entries})
		if w := unitWindow(l.unit); shortest[l.domain] == 0 || w < shortest[l.domain] {
			shortest[l.domain] = w
		}
	}
	c := newChecker(e.refSvc, sl)
	if combined && len(diffs) == 0 {
		for _, d := range slices.Sorted(maps.Keys(byDomain)) {
			// The counters of the domain's limits count from its first
			// request: a difference after a boundary passed since then
			// is abandoned (the two services may have seen that
			// boundary between their answers to one request).
			seq := newSequence("all the limits of " + d + " in one request")
			seq.start, seq.window = first[d], shortest[d]
			c.step(t, seq, &pb.RateLimitRequest{Domain: d, Descriptors: byDomain[d]})
		}
	}
	a.mu.Lock()
	a.limits += len(lines)
	a.combined += c.full + c.denials
	a.full += c.full
	a.mu.Unlock()
	t.Logf("compared the answers on %d limits, and %d requests with all of them", len(lines), c.full+c.denials)
	return diffs
}
