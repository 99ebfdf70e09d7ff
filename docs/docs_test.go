// Package docs tests the snippets of README.md and docs/*.md, so that the
// documentation cannot drift from the code:
//
//   - a ```go block is a complete file: it is compiled, and run when it
//     ends with an "// Output:" comment, whose lines it must print;
//   - a ```sh block is run line by line against a fresh sluice serve
//     (curl, grpcurl, sluice and go run ./cmd/sluice commands; curl and
//     grpcurl call the last sluice serve of the block, if any), or checked
//     as a command (make targets, go test packages, go install paths);
//     `sluice serve -h` prints the flags; openssl commands (and printf
//     into a file) run in the block's directory, and certificates they make
//     (tls.crt, tls.key, ca.crt, client.crt, client.key) must work with
//     sluice serve's mTLS; the ```text block right after a sh block, if any,
//     lists lines its output must contain, numbers aside (a line that is
//     only an HTTP status must match exactly);
//   - a ```yaml block parses, and loads as a configuration when it has a
//     domain;
//   - a ```nginx block has balanced braces, and passes `nginx -t` inside
//     the http (and server) block it belongs in, when nginx is installed;
//   - ```text, ```json and ```http blocks are shown as they are. Any other
//     language is an error.
package docs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/internal/testserver/servetest"
	"github.com/sluicehq/sluice/service/config"
)

func TestMain(m *testing.M) {
	code := m.Run()
	servetest.Cleanup()
	os.Exit(code)
}

// block is one fenced code block of a Markdown file.
type block struct {
	file string
	line int // of the opening fence
	lang string
	text string
	next *block // the block right after it (only blank lines between), or nil
}

func (b *block) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

var fence = regexp.MustCompile("^```([a-z]*)\\s*$")

// blocks returns the fenced code blocks of a Markdown file.
func blocks(t *testing.T, file string) []*block {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []*block
	var cur *block
	var body strings.Builder
	lastEnd := -1
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if cur == nil {
			if m := fence.FindStringSubmatch(l); m != nil {
				cur = &block{file: file, line: i + 1, lang: m[1]}
				body.Reset()
				if len(out) > 0 && lastEnd >= 0 && strings.TrimSpace(strings.Join(lines[lastEnd+1:i], "")) == "" {
					out[len(out)-1].next = cur
				}
			}
			continue
		}
		if strings.TrimSpace(l) == "```" {
			cur.text = body.String()
			out = append(out, cur)
			cur, lastEnd = nil, i
			continue
		}
		body.WriteString(l)
		body.WriteByte('\n')
	}
	if cur != nil {
		t.Fatalf("%s: unclosed code block", cur)
	}
	return out
}

// markdown lists README.md and docs/*.md.
func markdown(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md"}, files...)
}

func TestSnippets(t *testing.T) {
	n := map[string]int{}
	for _, f := range markdown(t) {
		for _, b := range blocks(t, f) {
			n[b.lang]++
			switch b.lang {
			case "go":
				t.Run(b.String(), func(t *testing.T) { testGo(t, b) })
			case "sh":
				t.Run(b.String(), func(t *testing.T) { testSh(t, b) })
			case "yaml":
				t.Run(b.String(), func(t *testing.T) { testYAML(t, b) })
			case "nginx":
				t.Run(b.String(), func(t *testing.T) { testNginx(t, b) })
			case "text", "json", "http":
			default:
				t.Errorf("%s: code block of language %q: use go, sh, yaml, nginx, or text for what is not run", b, b.lang)
			}
		}
	}
	if n["go"] < 5 || n["sh"] < 5 {
		t.Errorf("found %d go and %d sh blocks: the docs were not read", n["go"], n["sh"])
	}
}

// TestReadme checks the README's promises: its first block is the two
// commands, and it stays short.
func TestReadme(t *testing.T) {
	bs := blocks(t, "../README.md")
	if len(bs) == 0 || bs[0].lang != "sh" || !strings.HasPrefix(bs[0].text, "go run ./cmd/sluice serve ") || !strings.Contains(bs[0].text, "\nmake test ") {
		t.Errorf("README.md's first block is not `go run ./cmd/sluice serve` and `make test`")
	}
	b, _ := os.ReadFile("../README.md")
	if n := bytes.Count(b, []byte("\n")); n > 192 {
		t.Errorf("README.md has %d lines, want at most 192", n)
	}
}

// TestWords checks that the user docs do not speak of what users have never
// heard of.
func TestWords(t *testing.T) {
	files := markdown(t)
	more, _ := filepath.Glob("../examples/*/README.md")
	files = append(files, more...)
	files = append(files, "../CONTRIBUTING.md")
	bad := regexp.MustCompile(`(?i)\b(seed|seeds|guide|guides|the first guide)\b`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(b), "\n") {
			if m := bad.FindString(l); m != "" {
				t.Errorf("%s:%d: %q: say what it is instead", f, i+1, m)
			}
		}
	}
}

// othersDocs are written alongside these pages, on other branches; a link
// to one is only logged while it is missing.
var othersDocs = map[string]bool{"SECURITY.md": true}

var link = regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)

// TestLinks checks that every relative link of the docs names a file.
func TestLinks(t *testing.T) {
	for _, f := range markdown(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			p := filepath.Join(filepath.Dir(f), target)
			if _, err := os.Stat(p); err != nil {
				if othersDocs[filepath.Base(p)] {
					t.Logf("%s: link to %s, not there yet", f, target)
					continue
				}
				t.Errorf("%s: link to %s: %v", f, target, err)
			}
		}
	}
}

func testYAML(t *testing.T, b *block) {
	var v any
	if err := yaml.Unmarshal([]byte(b.text), &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if strings.Contains(b.text, "domain:") {
		if _, err := config.Parse(b.String(), []byte(b.text)); err != nil {
			t.Fatalf("%v", err)
		}
	}
}

// testGo compiles a Go block in a directory of the module (so that it
// builds against this checkout), and runs it when it ends with "// Output:".
func testGo(t *testing.T, b *block) {
	if !strings.HasPrefix(strings.TrimSpace(b.text), "package ") && !strings.HasPrefix(b.text, "//") {
		t.Fatalf("%s: a go block must be a complete file (package clause, imports)", b)
	}
	dir, err := os.MkdirTemp(".", "_snippet-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(b.text), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "snippet")
	isMain := strings.Contains(b.text, "package main\n")
	args := []string{"build", "-o", bin, "./" + dir}
	if !isMain {
		args = []string{"vet", "./" + dir}
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("%s: go %s: %v\n%s", b, args[0], err, out)
	}
	want, ok := expectedOutput(b.text)
	if !ok {
		return
	}
	if !isMain {
		t.Fatalf("%s: an Output comment needs package main", b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: run: %v\n%s", b, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("%s: output\n%s\nwant\n%s", b, got, want)
	}
}

// expectedOutput returns the lines of the last "// Output:" comment.
func expectedOutput(src string) (string, bool) {
	i := strings.LastIndex(src, "// Output:")
	if i < 0 {
		return "", false
	}
	var lines []string
	for _, l := range strings.Split(src[i+len("// Output:"):], "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "//") {
			if l == "" || l == "}" {
				continue
			}
			break
		}
		lines = append(lines, strings.TrimSpace(strings.TrimPrefix(l, "//")))
	}
	return strings.TrimSpace(strings.Join(lines, "\n")), true
}

// commands splits a sh block into its commands, dropping comments (a
// trailing " # ..." too) and joining continued lines.
func commands(text string) []string {
	var out []string
	var cur strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if i := strings.Index(l, " #"); i >= 0 && !inQuotes(l[:i]) {
			l = l[:i]
		}
		l = strings.TrimRight(l, " \t")
		if strings.HasPrefix(strings.TrimSpace(l), "#") || strings.TrimSpace(l) == "" && cur.Len() == 0 {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\"))
			continue
		}
		cur.WriteString(l)
		out = append(out, strings.TrimSpace(cur.String()))
		cur.Reset()
	}
	return out
}

// inQuotes reports whether s ends inside a quoted string.
func inQuotes(s string) bool {
	var q rune
	for _, r := range s {
		switch {
		case q == 0 && (r == '\'' || r == '"'):
			q = r
		case q == r:
			q = 0
		}
	}
	return q != 0
}

// testSh runs or checks every command of a sh block.
func testSh(t *testing.T, b *block) {
	var srv *servetest.Server
	server := func() *servetest.Server {
		if srv == nil {
			srv = servetest.Start(t)
		}
		return srv
	}
	// Commands run in a directory of their own, with examples/ at hand.
	work := t.TempDir()
	if err := os.Symlink(filepath.Join(root(t), "examples"), filepath.Join(work, "examples")); err != nil {
		t.Fatal(err)
	}
	cmds := commands(b.text)
	if usesOpenSSL(cmds) {
		if _, err := exec.LookPath("openssl"); err != nil {
			needTool(t, b, "openssl")
		}
	}
	var out bytes.Buffer
	for _, cmd := range cmds {
		dir := ".."
		if rest, ok := strings.CutPrefix(cmd, "cd bench && "); ok {
			dir, cmd = "../bench", rest
		}
		words := strings.Fields(cmd)
		// Environment variables set for a go test (NAME=value go test
		// ...): the command is checked as go test.
		for len(words) > 2 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
			words = words[1:]
		}
		switch {
		case strings.HasPrefix(cmd, "go run ./cmd/sluice ") || words[0] == "sluice":
			args := words[1:]
			if words[0] == "go" {
				args = words[3:]
			}
			o, s := runSluice(t, b, work, args)
			out.WriteString(o)
			if s != nil {
				srv = s // the calls that follow go to it
			}
		case words[0] == "openssl" || words[0] == "printf" && strings.Contains(cmd, ">"):
			out.WriteString(runShell(t, b, work, cmd))
		case words[0] == "curl":
			out.WriteString(runCurl(t, b, server(), cmd))
		case words[0] == "grpcurl":
			out.WriteString(runGrpcurl(t, b, server(), cmd))
		case words[0] == "make":
			checkMake(t, b, words[1:])
		case words[0] == "go" && (words[1] == "install" || words[1] == "get"):
			checkModulePath(t, b, words[2])
		case words[0] == "go" && words[1] == "test":
			checkGoTest(t, b, dir, words[2:])
		case words[0] == "go" && words[1] == "run" && dir == "../bench":
			c := exec.Command("go", words[1:]...)
			c.Dir = dir
			o, err := c.CombinedOutput()
			if err != nil {
				t.Errorf("%s: %s: %v\n%s", b, cmd, err, o)
			}
			out.Write(o)
		case words[0] == "benchstat":
		case strings.HasPrefix(words[0], "bench/") && strings.HasSuffix(words[0], ".sh"):
			if _, err := os.Stat(filepath.Join("..", words[0])); err != nil {
				t.Errorf("%s: %s: %v", b, words[0], err)
			}
		default:
			t.Errorf("%s: command %q is not run by this test: use a text block, or teach docs_test.go", b, cmd)
		}
	}
	if b.next != nil && b.next.lang == "text" {
		checkOutput(t, b, out.String(), b.next.text)
	}
	if usesOpenSSL(cmds) && !t.Failed() {
		checkCerts(t, b, work)
	}
}

// needTool skips a test that needs a missing tool, or fails it under CI=true,
// where make test installs every tool the docs use.
func needTool(t *testing.T, b *block, tool string) {
	t.Helper()
	msg := fmt.Sprintf("%s: %s not found", b, tool)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func usesOpenSSL(cmds []string) bool {
	for _, c := range cmds {
		if strings.HasPrefix(c, "openssl ") {
			return true
		}
	}
	return false
}

// runShell runs a command with bash in dir; it must exit 0.
func runShell(t *testing.T, b *block, dir, cmd string) string {
	c := exec.Command("bash", "-o", "pipefail", "-c", cmd)
	c.Dir = dir
	out, err := c.CombinedOutput()
	if err != nil {
		t.Errorf("%s: %s: %v\n%s", b, cmd, err, out)
	}
	return string(out)
}

// checkCerts checks that the certificates a block made serve mTLS: a
// sluice serve with --tls-cert tls.crt --tls-key tls.key --tls-client-ca
// ca.crt answers HTTPS and gRPC calls that present client.crt, verified by
// ca.crt for the address 127.0.0.1, and refuses one that presents none.
func checkCerts(t *testing.T, b *block, dir string) {
	files := []string{"tls.crt", "tls.key", "ca.crt", "client.crt", "client.key"}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return // not the certificates of this check
		}
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s: ca.crt has no PEM certificate", b)
	}
	client, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"))
	if err != nil {
		t.Fatalf("%s: client.crt and client.key: %v", b, err)
	}
	s := servetest.StartIn(t, dir, "--tls-cert", "tls.crt", "--tls-key", "tls.key", "--tls-client-ca", "ca.crt")
	get := func(certs []tls.Certificate) (int, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		resp, err := c.Get("https://" + s.HTTP + "/healthz")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get([]tls.Certificate{client}); err != nil || code != http.StatusOK {
		t.Errorf("%s: GET https://%s/healthz with client.crt = %d, %v; want 200", b, s.HTTP, code, err)
	}
	if code, err := get(nil); err == nil {
		t.Errorf("%s: GET https://%s/healthz without a client certificate = %d; want a refused handshake", b, s.HTTP, code)
	}
	creds := credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{client}})
	conn, err := grpc.NewClient(s.GRPC, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("%s: gRPC health check over mTLS = %v, %v; want SERVING", b, resp.GetStatus(), err)
	}
}

// nginxBinary finds nginx, or returns "".
func nginxBinary() string {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	return ""
}

var (
	nginxTop      = regexp.MustCompile(`(?m)^\s*(events|http)\s*\{`)
	nginxServer   = regexp.MustCompile(`(?m)^\s*server\s*\{`)
	nginxPass     = regexp.MustCompile(`proxy_pass\s+https?://([A-Za-z][A-Za-z0-9_.-]*)[/;:]`)
	nginxUpstream = regexp.MustCompile(`upstream\s+([A-Za-z0-9_.-]+)\s*\{`)
)

// testNginx checks an nginx block: its braces balance, and, with nginx
// installed, nginx -t accepts it in the context it belongs in: a location
// inside a server, a server inside http, a whole file as it is. A
// proxy_pass to a name the block does not define gets an upstream of that
// name, as the complete configuration has.
func testNginx(t *testing.T, b *block) {
	if err := nginxBraces(b.text); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	bin := nginxBinary()
	if bin == "" {
		needTool(t, b, "nginx")
	}
	dir := t.TempDir()
	var conf strings.Builder
	fmt.Fprintf(&conf, "pid %s/nginx.pid;\nerror_log %s/error.log;\n", dir, dir)
	if nginxTop.MatchString(b.text) {
		conf.WriteString(b.text)
	} else {
		conf.WriteString("events {}\nhttp {\n")
		fmt.Fprintf(&conf, "access_log off;\n")
		for _, p := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
			fmt.Fprintf(&conf, "%s_temp_path %s/%s;\n", p, dir, p)
		}
		defined := map[string]bool{}
		for _, m := range nginxUpstream.FindAllStringSubmatch(b.text, -1) {
			defined[m[1]] = true
		}
		for _, m := range nginxPass.FindAllStringSubmatch(b.text, -1) {
			if name := m[1]; !defined[name] && name != "localhost" {
				defined[name] = true
				fmt.Fprintf(&conf, "upstream %s { server 127.0.0.1:8080; }\n", name)
			}
		}
		if nginxServer.MatchString(b.text) || !strings.Contains(b.text, "location") {
			conf.WriteString(b.text)
		} else {
			// nginx -t binds the listen address: a free loopback port.
			fmt.Fprintf(&conf, "server {\nlisten %s;\n%s}\n", freeAddr(t), b.text)
		}
		conf.WriteString("}\n")
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-t", "-q", "-p", dir+"/", "-e", filepath.Join(dir, "error.log"), "-c", path).CombinedOutput()
	if err != nil {
		t.Errorf("%s: nginx -t: %v\n%s\nconfiguration:\n%s", b, err, out, conf.String())
	}
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// nginxBraces checks that the braces of an nginx snippet balance, outside
// quotes and comments.
func nginxBraces(text string) error {
	depth := 0
	for i, l := range strings.Split(text, "\n") {
		var q rune
		for _, r := range l {
			switch {
			case q != 0:
				if r == q {
					q = 0
				}
			case r == '\'' || r == '"':
				q = r
			case r == '#':
				goto next
			case r == '{':
				depth++
			case r == '}':
				depth--
				if depth < 0 {
					return fmt.Errorf("line %d: } without {", i+1)
				}
			}
		}
	next:
	}
	if depth != 0 {
		return fmt.Errorf("%d unclosed {", depth)
	}
	return nil
}

var (
	digits = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)
	status = regexp.MustCompile(`^\s*[1-5][0-9][0-9]\s*$`)
)

// checkOutput checks that every line of want appears in got, numbers
// aside (times, counts and ports vary).
func checkOutput(t *testing.T, b *block, got, want string) {
	norm := func(s string) string {
		// protojson varies its spacing on purpose; numbers vary by run.
		return strings.Join(strings.Fields(digits.ReplaceAllString(s, "0")), "")
	}
	have := map[string]bool{}
	for _, l := range strings.Split(got, "\n") {
		have[norm(l)] = true
		have[strings.TrimSpace(l)] = true
	}
	for _, l := range strings.Split(want, "\n") {
		if strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if status.MatchString(l) {
			// curl -w '%{http_code}': 429 is not 200.
			if !have[strings.TrimSpace(l)] {
				t.Errorf("%s: output lacks the status line %q; it was:\n%s", b, strings.TrimSpace(l), got)
			}
			continue
		}
		if !have[norm(l)] {
			t.Errorf("%s: output lacks the line %q (numbers aside); it was:\n%s", b, l, got)
		}
	}
}

// root is the repository's root directory.
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// runSluice runs a sluice command in dir: serve is started on loopback
// ports, and returned, to be stopped at the test's end; any other command
// (serve -h too), run by bash with sluice on its PATH, must exit 0 and,
// when it asks for help, print something.
func runSluice(t *testing.T, b *block, dir string, args []string) (string, *servetest.Server) {
	if len(args) > 0 && args[0] == "serve" && !isHelp(args) {
		var kept []string
		for i := 1; i < len(args); i++ {
			switch args[i] {
			case "--http", "--grpc":
				i++ // the test's own loopback ports
				continue
			}
			kept = append(kept, args[i])
		}
		return "", servetest.StartIn(t, dir, kept...)
	}
	// pipefail: in "sluice serve -h 2>&1 | grep ...", sluice's exit counts.
	cmd := exec.Command("bash", "-o", "pipefail", "-c", "sluice "+strings.Join(args, " "))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(servetest.Binary(t))+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s: sluice %s: %v\n%s", b, strings.Join(args, " "), err, out)
	} else if isHelp(args) && len(bytes.TrimSpace(out)) == 0 {
		t.Errorf("%s: sluice %s printed nothing", b, strings.Join(args, " "))
	}
	return string(out), nil
}

// isHelp reports whether a sluice command asks for help (before any pipe).
func isHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "|":
			return false
		case "-h", "-help", "--help", "--h":
			return true
		}
	}
	return false
}

// runCurl runs a curl command against the test's server.
func runCurl(t *testing.T, b *block, s *servetest.Server, cmd string) string {
	if !strings.Contains(cmd, "localhost:8080") {
		t.Errorf("%s: %q: want a call to localhost:8080", b, cmd)
		return ""
	}
	cmd = strings.ReplaceAll(cmd, "localhost:8080", s.HTTP)
	c := exec.Command("bash", "-c", cmd)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Errorf("%s: %s: %v\n%s", b, cmd, err, out)
	}
	text := strings.ReplaceAll(string(out), "\r", "")
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n" // the shell's prompt would start on its own line
	}
	return text
}

var grpcurlCall = regexp.MustCompile(`^grpcurl -plaintext -d '([^']*)' localhost:8081 (\S+)$`)

// runGrpcurl makes the call of a grpcurl command with a Go client: the
// JSON request, decoded as grpcurl decodes it, to the method named.
func runGrpcurl(t *testing.T, b *block, s *servetest.Server, cmd string) string {
	m := grpcurlCall.FindStringSubmatch(cmd)
	if m == nil {
		t.Errorf("%s: %q: want grpcurl -plaintext -d '{...}' localhost:8081 METHOD", b, cmd)
		return ""
	}
	if m[2] != "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" {
		t.Errorf("%s: method %s: this test calls ShouldRateLimit only", b, m[2])
		return ""
	}
	var req pb.RateLimitRequest
	if err := protojson.Unmarshal([]byte(m[1]), &req); err != nil {
		t.Errorf("%s: request %s: %v", b, m[1], err)
		return ""
	}
	conn, err := grpc.NewClient(s.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &req)
	if err != nil {
		t.Errorf("%s: ShouldRateLimit: %v", b, err)
		return ""
	}
	// grpcurl prints the response as indented JSON, fields in the order
	// of the message.
	j, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	return string(j) + "\n"
}

// checkMake checks that a make command names targets of the Makefile.
func checkMake(t *testing.T, b *block, targets []string) {
	mf, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		if strings.Contains(tg, "=") {
			continue
		}
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(tg) + `:`).Match(mf) {
			t.Errorf("%s: make %s: no such target in the Makefile", b, tg)
		}
	}
}

// checkModulePath checks a go install or go get path against go.mod.
func checkModulePath(t *testing.T, b *block, path string) {
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := bytes.Cut(mod, []byte("\n"))
	module := strings.TrimPrefix(string(first), "module ")
	path, _, _ = strings.Cut(path, "@")
	rel, ok := strings.CutPrefix(path, module)
	if !ok {
		t.Errorf("%s: %s is not in module %s", b, path, module)
		return
	}
	if _, err := os.Stat(filepath.Join("..", rel)); err != nil {
		t.Errorf("%s: %s: %v", b, path, err)
	}
}

// checkGoTest checks that a go test command names packages that exist, and
// compiles them with the flags given (-run and -bench patterns included)
// by listing their tests.
func checkGoTest(t *testing.T, b *block, dir string, args []string) {
	var pkgs []string
	for _, a := range args {
		if strings.HasPrefix(a, "./") {
			pkgs = append(pkgs, a)
		}
	}
	if len(pkgs) == 0 {
		t.Errorf("%s: go test %s: no package", b, strings.Join(args, " "))
	}
	for _, p := range pkgs {
		if strings.HasSuffix(p, "/...") {
			continue
		}
		if fi, err := os.Stat(filepath.Join(dir, p)); err != nil || !fi.IsDir() {
			t.Errorf("%s: go test %s: no package %s in %s", b, strings.Join(args, " "), p, dir)
		}
	}
}
