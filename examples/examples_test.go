// Package examples tests the copyable configurations under examples/: the
// sluice configurations load, every descriptor the Envoy example can send
// matches a rule, requests as Envoy sends them get the answers the
// comments promise, and every YAML file parses.
package examples

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testserver/servetest"
	"github.com/sluicehq/sluice/internal/testserver/window"
	"github.com/sluicehq/sluice/service/config"
)

func TestMain(m *testing.M) {
	code := m.Run()
	servetest.Cleanup()
	os.Exit(code)
}

// TestConfigCheck runs sluice check on examples/config, as CI does.
func TestConfigCheck(t *testing.T) {
	out, err := exec.Command(servetest.Binary(t), "check", "config").CombinedOutput()
	if err != nil || string(out) != "ok: 2 domain(s): edge, partners\n" {
		t.Errorf("sluice check config: %v %q", err, out)
	}
}

// envoyRequest is a request as it reaches Envoy.
type envoyRequest struct {
	listener string
	path     string
	headers  map[string]string // lower-case names
	remote   string
}

// bootstrap is the part of an Envoy bootstrap this test reads.
type bootstrap struct {
	StaticResources struct {
		Listeners []struct {
			Name         string
			FilterChains []struct {
				Filters []struct {
					Name        string
					TypedConfig struct {
						HTTPFilters []struct {
							Name        string
							TypedConfig struct {
								Type   string `yaml:"@type"`
								Domain string
							} `yaml:"typed_config"`
						} `yaml:"http_filters"`
						RouteConfig struct {
							VirtualHosts []struct {
								Routes []envoyRoute
							} `yaml:"virtual_hosts"`
						} `yaml:"route_config"`
					} `yaml:"typed_config"`
				}
			} `yaml:"filter_chains"`
		}
		Clusters []struct {
			Name                          string
			TypedExtensionProtocolOptions map[string]struct {
				ExplicitHTTPConfig struct {
					HTTP2 *struct{} `yaml:"http2_protocol_options"`
				} `yaml:"explicit_http_config"`
			} `yaml:"typed_extension_protocol_options"`
		}
	} `yaml:"static_resources"`
}

type envoyRoute struct {
	Match struct{ Path, Prefix string }
	Route struct {
		RateLimits []struct {
			Actions []map[string]struct {
				DescriptorKey   string `yaml:"descriptor_key"`
				DescriptorValue string `yaml:"descriptor_value"`
				HeaderName      string `yaml:"header_name"`
			}
		} `yaml:"rate_limits"`
	}
}

// listener is one listener of the bootstrap: its rate-limit domain and
// routes.
type listener struct {
	domain string
	routes []envoyRoute
}

func readBootstrap(t *testing.T, path string) map[string]listener {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrap
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(false)
	if err := dec.Decode(&bs); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]listener{}
	for _, l := range bs.StaticResources.Listeners {
		var li listener
		for _, fc := range l.FilterChains {
			for _, f := range fc.Filters {
				if f.Name != "envoy.filters.network.http_connection_manager" {
					continue
				}
				for _, hf := range f.TypedConfig.HTTPFilters {
					if hf.Name == "envoy.filters.http.ratelimit" {
						li.domain = hf.TypedConfig.Domain
					}
				}
				for _, vh := range f.TypedConfig.RouteConfig.VirtualHosts {
					li.routes = append(li.routes, vh.Routes...)
				}
			}
		}
		if li.domain == "" || len(li.routes) == 0 {
			t.Fatalf("%s: listener %s has no rate-limit filter or no routes", path, l.Name)
		}
		out[l.Name] = li
	}
	// The rate-limit cluster must speak HTTP/2: gRPC needs it.
	for _, c := range bs.StaticResources.Clusters {
		if c.Name != "sluice" {
			continue
		}
		if opt, ok := c.TypedExtensionProtocolOptions["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; !ok || opt.ExplicitHTTPConfig.HTTP2 == nil {
			t.Errorf("%s: cluster sluice lacks http2_protocol_options", path)
		}
		return out
	}
	t.Fatalf("%s: no cluster sluice", path)
	return nil
}

// descriptors returns what Envoy sends for req: the domain, and one
// descriptor for each rate_limits entry of the first matching route whose
// actions all produce an entry (a request_headers action whose header is
// absent drops its descriptor, as Envoy does).
func descriptors(t *testing.T, ls map[string]listener, req envoyRequest) (string, [][]config.Entry) {
	t.Helper()
	l, ok := ls[req.listener]
	if !ok {
		t.Fatalf("no listener %s", req.listener)
	}
	for _, r := range l.routes {
		if r.Match.Path != "" && r.Match.Path != req.path || r.Match.Path == "" && !strings.HasPrefix(req.path, r.Match.Prefix) {
			continue
		}
		var out [][]config.Entry
	entries:
		for _, rl := range r.Route.RateLimits {
			var d []config.Entry
			for _, a := range rl.Actions {
				if len(a) != 1 {
					t.Fatalf("action %v: want one action a map", a)
				}
				for name, v := range a {
					switch name {
					case "remote_address":
						d = append(d, config.Entry{Key: "remote_address", Value: req.remote})
					case "generic_key":
						k := v.DescriptorKey
						if k == "" {
							k = "generic_key"
						}
						d = append(d, config.Entry{Key: k, Value: v.DescriptorValue})
					case "request_headers":
						h, ok := req.headers[strings.ToLower(v.HeaderName)]
						if !ok {
							continue entries
						}
						d = append(d, config.Entry{Key: v.DescriptorKey, Value: h})
					default:
						t.Fatalf("action %s: not known to this test", name)
					}
				}
			}
			out = append(out, d)
		}
		return l.domain, out
	}
	t.Fatalf("no route of %s for %s", req.listener, req.path)
	return "", nil
}

// TestEnvoyDescriptors checks that every descriptor the Envoy example's
// actions can produce matches a rule of examples/config, for every route,
// with the headers present or absent and several values of each.
func TestEnvoyDescriptors(t *testing.T) {
	c, err := config.Load("config")
	if err != nil {
		t.Fatal(err)
	}
	ls := readBootstrap(t, "envoy/envoy.yaml")
	samples := map[string][]string{"x-api-key": {"k-1", "k-2"}, "x-plan": {"free", "pro", "gold", ""}}
	checked := 0
	for name, l := range ls {
		for _, r := range l.routes {
			path := r.Match.Path
			if path == "" {
				path = r.Match.Prefix + "x"
			}
			// Every combination of the headers' samples, and their absence.
			var hs []map[string]string
			hs = append(hs, map[string]string{})
			for h, vs := range samples {
				var next []map[string]string
				for _, m := range hs {
					next = append(next, m)
					for _, v := range vs {
						m2 := map[string]string{h: v}
						for k, x := range m {
							m2[k] = x
						}
						next = append(next, m2)
					}
				}
				hs = next
			}
			for _, h := range hs {
				for _, remote := range []string{"203.0.113.7", "2001:db8::1"} {
					domain, ds := descriptors(t, ls, envoyRequest{listener: name, path: path, headers: h, remote: remote})
					for _, d := range ds {
						m, ok := c.Match(domain, d)
						if !ok || len(m.Rules) == 0 {
							t.Errorf("listener %s, %s, headers %v: descriptor %v of domain %s matches no rule", name, path, h, d, domain)
						}
						checked++
					}
				}
			}
		}
	}
	if checked < 100 {
		t.Errorf("checked only %d descriptors", checked)
	}
}

// TestEnvoyRequests sends sluice serve, loaded with examples/config, the
// ShouldRateLimit calls Envoy makes for requests to the example, and checks
// the answers against what edge.yaml and partners.yaml say.
func TestEnvoyRequests(t *testing.T) {
	s := servetest.Start(t, "--config", "config")
	conn, err := grpc.NewClient(s.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewRateLimitServiceClient(conn)
	ls := readBootstrap(t, "envoy/envoy.yaml")
	var t0 *testing.T // the running subtest
	call := func(req envoyRequest) *pb.RateLimitResponse {
		t := t0
		t.Helper()
		domain, ds := descriptors(t, ls, req)
		if len(ds) == 0 {
			// Envoy does not call the service for a request with no
			// descriptor: the request goes through.
			return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}
		}
		r := &pb.RateLimitRequest{Domain: domain}
		for _, d := range ds {
			pd := &rlpb.RateLimitDescriptor{}
			for _, e := range d {
				pd.Entries = append(pd.Entries, &rlpb.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
			}
			r.Descriptors = append(r.Descriptors, pd)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, r)
		if err != nil {
			t.Fatalf("ShouldRateLimit(%v): %v", req, err)
		}
		return resp
	}
	codes := func(resp *pb.RateLimitResponse) string {
		var cs []string
		for _, st := range resp.Statuses {
			cs = append(cs, st.Code.String())
		}
		return resp.OverallCode.String() + " " + strings.Join(cs, ",")
	}

	// The configurations count in windows of the real clock (a fixed
	// minute, a sliding 30 s, a day): a sequence's answers hold within
	// one window (internal/testserver/window), and each attempt takes a
	// fresh address or key.
	t.Run("login: 5 in any 30 s per address", func(t *testing.T) {
		t0 = t
		window.Run(t, 30*time.Second, 10*time.Second, func(f *window.Findings, attempt int) {
			req := envoyRequest{listener: "edge", path: "/login", remote: fmt.Sprintf("198.51.100.%d", 10+attempt), headers: map[string]string{}}
			for i := range 5 {
				if got := codes(call(req)); got != "OK OK,OK" {
					f.Errorf("login %d: %s, want OK (remote_address, route+remote_address)", i+1, got)
					return
				}
			}
			if got := codes(call(req)); got != "OVER_LIMIT OK,OVER_LIMIT" {
				f.Errorf("login 6: %s, want the route's sliding window over", got)
			}
			other := req
			other.remote = fmt.Sprintf("198.51.100.%d", 20+attempt)
			if got := codes(call(other)); got != "OK OK,OK" {
				f.Errorf("login from another address: %s, want OK", got)
			}
		})
	})
	t.Run("health checks are never limited", func(t *testing.T) {
		t0 = t
		req := envoyRequest{listener: "edge", path: "/healthz", remote: "198.51.100.3"}
		for i := range 700 {
			if got := codes(call(req)); got != "OK OK" {
				t.Fatalf("healthz %d: %s, want OK", i+1, got)
			}
		}
	})
	t.Run("shadow rule reports, never denies", func(t *testing.T) {
		t0 = t
		window.Run(t, time.Minute, 20*time.Second, func(f *window.Findings, attempt int) {
			req := envoyRequest{listener: "edge", path: "/", remote: fmt.Sprintf("198.51.100.%d", 30+attempt)}
			for i := range 120 {
				if got := codes(call(req)); got != "OK OK,OK" {
					f.Errorf("request %d: %s, want OK", i+1, got)
					return
				}
			}
			// Over its limit, a shadow rule answers OK, with nothing
			// remaining; only the metrics and the log tell.
			resp := call(req)
			if got := codes(resp); got != "OK OK,OK" || resp.Statuses[1].LimitRemaining != 0 || resp.Statuses[1].CurrentLimit.GetRequestsPerUnit() != 120 {
				f.Errorf("request 121: %v, want OK with the trial descriptor's 120 a minute spent", resp)
			}
		})
	})
	t.Run("api key: bursts of 40", func(t *testing.T) {
		t0 = t
		req := envoyRequest{listener: "edge", path: "/", remote: "198.51.100.5", headers: map[string]string{"x-api-key": "k-burst"}}
		over := 0
		began := time.Now()
		for range 60 {
			if call(req).OverallCode == pb.RateLimitResponse_OVER_LIMIT {
				over++
			}
		}
		elapsed := time.Since(began)
		// 40 at once and 20 a second: of 60 calls, the burst of 40 is
		// admitted, and at most the tokens refilled while they ran.
		refilled := int(20 * elapsed.Seconds())
		if admitted := 60 - over; admitted < 40 || admitted > 40+refilled {
			t.Errorf("60 calls of one API key in %v: %d admitted, want the burst of 40 and at most the %d tokens refilled meanwhile", elapsed, admitted, refilled)
		}
	})
	t.Run("partner daily quota by plan", func(t *testing.T) {
		t0 = t
		window.Run(t, 24*time.Hour, 2*time.Minute, func(f *window.Findings, attempt int) {
			for _, tt := range []struct {
				plan  string
				quota int
			}{{"free", 1000}, {"gold", 1000}} {
				req := envoyRequest{listener: "partners", path: "/v1/orders", headers: map[string]string{"x-plan": tt.plan, "x-api-key": fmt.Sprintf("p-%s-%d", tt.plan, attempt)}}
				for i := range tt.quota {
					if resp := call(req); resp.OverallCode != pb.RateLimitResponse_OK {
						f.Errorf("plan %s, request %d: %s", tt.plan, i+1, codes(resp))
						return
					}
				}
				resp := call(req)
				if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].CurrentLimit.GetUnit().String() != "DAY" {
					f.Errorf("plan %s, request %d: %v, want OVER_LIMIT on the daily limit", tt.plan, tt.quota+1, resp)
				}
			}
		})
		// No plan header: Envoy sends no descriptor, and the call is OK.
		if resp := call(envoyRequest{listener: "partners", path: "/", headers: map[string]string{"x-api-key": "p-none"}}); len(resp.Statuses) != 0 || resp.OverallCode != pb.RateLimitResponse_OK {
			t.Errorf("no plan: %v, want OK with no statuses", resp)
		}
	})
}

// TestYAMLParses parses every YAML file under examples/ (every document of
// a multi-document file) and loads every sluice configuration embedded in a
// Kubernetes ConfigMap.
func TestYAMLParses(t *testing.T) {
	var files []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ext := filepath.Ext(path); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"config/edge.yaml", "envoy/envoy.yaml", "kubernetes/sluice.yaml", "istio/ratelimit.yaml", "envoy-gateway/envoy-gateway.yaml", "compose/compose.yaml"} {
		if !slices.Contains(files, want) {
			t.Errorf("examples/%s is missing", want)
		}
	}
	configMaps := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for i := 0; ; i++ {
			var doc map[string]any
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Errorf("%s, document %d: %v", f, i+1, err)
				break
			}
			if doc["kind"] != "ConfigMap" {
				continue
			}
			data, _ := doc["data"].(map[string]any)
			for name, v := range data {
				s, _ := v.(string)
				if filepath.Ext(name) != ".yaml" || !strings.Contains(s, "domain:") {
					continue
				}
				configMaps++
				if _, err := config.Parse(fmt.Sprintf("%s: ConfigMap %s", f, name), []byte(s)); err != nil {
					t.Errorf("%v", err)
				}
			}
		}
	}
	if configMaps == 0 {
		t.Error("no sluice configuration found in a ConfigMap")
	}
}

// flagUse is a flag of sluice serve written in a deployment file:
// "- --config=/etc/sluice", "--drain-delay 2s".
var flagUse = regexp.MustCompile(`(?:^|[\s"'\[])--([a-z][a-z0-9-]*)`)

// envUse is a flag's variable in a deployment file: "name: SLUICE_REPLICAS".
var envUse = regexp.MustCompile(`\bSLUICE_([A-Z][A-Z0-9_]*)`)

// TestDeploymentFlags checks that every flag the deployment examples pass
// to sluice serve is one of its flags, and that their grace periods cover
// the drain.
func TestDeploymentFlags(t *testing.T) {
	out, err := exec.Command(servetest.Binary(t), "serve", "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("sluice serve -h: %v\n%s", err, out)
	}
	for _, f := range []string{"kubernetes/sluice.yaml", "compose/compose.yaml", "systemd/sluice.service"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if f == "compose/compose.yaml" { // the sluice service's command only
			var c struct {
				Services map[string]struct{ Command []string }
			}
			if err := yaml.Unmarshal(b, &c); err != nil {
				t.Fatal(err)
			}
			b = []byte(strings.Join(c.Services["sluice"].Command, "\n"))
		}
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			for _, m := range flagUse.FindAllStringSubmatch(line, -1) {
				n++
				if !strings.Contains(string(out), "\n  -"+m[1]+" ") && !strings.Contains(string(out), "\n  -"+m[1]+"\n") {
					t.Errorf("%s: --%s is not a flag of sluice serve", f, m[1])
				}
			}
		}
		if n < 4 {
			t.Errorf("%s: found %d flags of sluice serve, want its command line", f, n)
		}
	}
	// Envoy Gateway runs the image with envoyproxy/ratelimit's variables;
	// sluice's own settings are SLUICE_* variables of the container.
	eg, err := os.ReadFile("envoy-gateway/envoy-gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	vars := envUse.FindAllStringSubmatch(string(eg), -1)
	if len(vars) < 3 {
		t.Errorf("envoy-gateway/envoy-gateway.yaml: found %d SLUICE_* variables, want its container's", len(vars))
	}
	for _, m := range vars {
		flag := strings.ReplaceAll(strings.ToLower(m[1]), "_", "-")
		if !strings.Contains(string(out), "\n  -"+flag+" ") {
			t.Errorf("envoy-gateway/envoy-gateway.yaml: SLUICE_%s is not the variable of a flag of sluice serve", m[1])
		}
	}
	unit, err := os.ReadFile("systemd/sluice.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, opt := range []string{"DynamicUser=yes", "NoNewPrivileges=yes", "ProtectSystem=strict", "CapabilityBoundingSet=\n", "SystemCallFilter=@system-service", "ExecReload=/bin/kill -HUP $MAINPID"} {
		if !strings.Contains(string(unit), "\n"+opt) {
			t.Errorf("systemd/sluice.service lacks %q", opt)
		}
	}
	k8s, err := os.ReadFile("kubernetes/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"terminationGracePeriodSeconds: 25", "--drain-delay=5s", "--shutdown-timeout=15s", "path: /healthz", "path: /readyz", "kind: PodDisruptionBudget", "replicas: 3", "--replicas=3"} {
		if !strings.Contains(string(k8s), want) {
			t.Errorf("kubernetes/sluice.yaml lacks %q", want)
		}
	}
}
