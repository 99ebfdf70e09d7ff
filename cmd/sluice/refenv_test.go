package main

import (
	"bytes"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/service/engine"
)

// envOf is a lookup over m.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// flagsOf are the plan's assignments as flag → value.
func flagsOf(p refPlan) map[string]string {
	m := map[string]string{}
	for _, a := range p.Assign {
		m[a.Flag] = a.Value
	}
	return m
}

func varsOf(ns []refNote) []string {
	var vs []string
	for _, n := range ns {
		vs = append(vs, n.Var)
	}
	sort.Strings(vs)
	return vs
}

// envoyGatewayDefaultEnv is the environment of Envoy Gateway's rate-limit
// Deployment (internal/infrastructure/kubernetes/ratelimit, testdata
// deployments/default.yaml).
var envoyGatewayDefaultEnv = map[string]string{
	"RUNTIME_ROOT":                       "/data",
	"RUNTIME_SUBDIRECTORY":               "ratelimit",
	"RUNTIME_IGNOREDOTFILES":             "true",
	"RUNTIME_WATCH_ROOT":                 "false",
	"LOG_LEVEL":                          "info",
	"USE_STATSD":                         "false",
	"CONFIG_TYPE":                        "GRPC_XDS_SOTW",
	"CONFIG_GRPC_XDS_SERVER_URL":         "envoy-gateway:18001",
	"CONFIG_GRPC_XDS_NODE_ID":            "envoy-ratelimit",
	"GRPC_SERVER_USE_TLS":                "true",
	"GRPC_SERVER_TLS_CERT":               "/certs/tls.crt",
	"GRPC_SERVER_TLS_KEY":                "/certs/tls.key",
	"GRPC_SERVER_TLS_CA_CERT":            "/certs/ca.crt",
	"CONFIG_GRPC_XDS_SERVER_USE_TLS":     "true",
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":    "/certs/tls.crt",
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":     "/certs/tls.key",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT":  "/certs/ca.crt",
	"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
	"REDIS_SOCKET_TYPE":                  "tcp",
	"REDIS_URL":                          "redis.redis.svc:6379",
	"USE_PROMETHEUS":                     "true",
	"PROMETHEUS_ADDR":                    ":19001",
	"PROMETHEUS_MAPPER_YAML":             "/etc/statsd-exporter/conf.yaml",
}

// envoyGatewayEnv is envoyGatewayDefaultEnv with Redis over TLS, as
// redis-tls-settings.yaml adds it.
var envoyGatewayEnv = func() map[string]string {
	env := maps.Clone(envoyGatewayDefaultEnv)
	env["REDIS_TLS"] = "true"
	env["REDIS_TLS_CLIENT_CERT"] = "/redis-certs/tls.crt"
	env["REDIS_TLS_CLIENT_KEY"] = "/redis-certs/tls.key"
	return env
}()

func TestReferencePlanEnvoyGateway(t *testing.T) {
	p := referencePlan(envOf(envoyGatewayEnv))
	if len(p.Errors) > 0 {
		t.Fatalf("errors: %+v", p.Errors)
	}
	want := map[string]string{
		"log-level":                                 "info",
		"debug-addr":                                "0.0.0.0:6070",
		"reference-stats-prometheus":                ":19001",
		"reference-stats-prometheus-mapper":         "/etc/statsd-exporter/conf.yaml",
		"reference-stats-prometheus-mapper-lenient": "true",
		"tls-cert":                                  "/certs/tls.crt",
		"tls-key":                                   "/certs/tls.key",
		"tls-grpc-only":                             "true",
		"xds-server":                                "envoy-gateway:18001",
		"xds-node-id":                               "envoy-ratelimit",
		"xds-tls":                                   "true",
		"xds-tls-ca":                                "/certs/ca.crt",
		"xds-tls-cert":                              "/certs/tls.crt",
		"xds-tls-key":                               "/certs/tls.key",
		"redis":                                     "rediss://redis.redis.svc:6379",
		"redis-tls-cert":                            "/redis-certs/tls.crt",
		"redis-tls-key":                             "/redis-certs/tls.key",
		"counting":                                  "all",
		"failure-mode":                              "error",
		"xds-force-start":                           "true",
	}
	if got := flagsOf(p); !maps.Equal(got, want) {
		t.Errorf("flags:\n got %v\nwant %v", got, want)
	}
	wantIgnored := []string{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "GRPC_SERVER_TLS_CA_CERT",
		"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_WATCH_ROOT"}
	wantIgnored = slices.DeleteFunc(wantIgnored, func(v string) bool { _, ok := envoyGatewayEnv[v]; return !ok })
	if got := varsOf(p.Ignored); !slices.Equal(got, wantIgnored) {
		t.Errorf("ignored: got %v, want %v", got, wantIgnored)
	}
	// The reference's counting, from its default: no variable set.
	for _, a := range p.Assign {
		if a.Flag == "counting" && !a.Default {
			t.Errorf("--counting from %q, want the reference's default", a.Var)
		}
		if a.Flag == "log-level" && (a.Default || a.Var != "LOG_LEVEL") {
			t.Errorf("--log-level from %q (default %v), want LOG_LEVEL", a.Var, a.Default)
		}
	}
}

func TestReferencePlanDefaults(t *testing.T) {
	p := referencePlan(envOf(nil))
	if len(p.Errors) > 0 || len(p.Ignored) > 0 {
		t.Fatalf("errors %+v, ignored %+v", p.Errors, p.Ignored)
	}
	want := map[string]string{
		"debug-addr": "0.0.0.0:6070",
		"log-level":  "warn",
		"config":     "/srv/runtime_data/current/config",
		// RUNTIME_IGNOREDOTFILES is false by default: dot files are read.
		"config-dot-files": "true",
		"redis":            "unix:///var/run/nutcracker/ratelimit.sock",
		"counting":         "all",
		"failure-mode":     "error",
		// USE_STATSD is true by default: to localhost:8125, over TCP.
		"statsd":          "localhost:8125",
		"statsd-protocol": "tcp",
	}
	if got := flagsOf(p); !maps.Equal(got, want) {
		t.Errorf("flags:\n got %v\nwant %v", got, want)
	}
	for _, a := range p.Assign {
		if !a.Default {
			t.Errorf("%+v: not the reference's default", a)
		}
	}
}

func TestReferencePlan(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		flags map[string]string // the flags expected among the plan's (others unchecked)
		unset []string          // flags the plan must not set
	}{
		{"http", map[string]string{"HOST": "127.0.0.1", "PORT": "9000"}, map[string]string{"http": "127.0.0.1:9000"}, nil},
		{"http port only", map[string]string{"PORT": "9000"}, map[string]string{"http": ":9000"}, nil},
		{"http host only", map[string]string{"HOST": "0.0.0.0"}, map[string]string{"http": "0.0.0.0:8080"}, nil},
		{"grpc", map[string]string{"GRPC_HOST": "::1", "GRPC_PORT": "9001"}, map[string]string{"grpc": "[::1]:9001"}, nil},
		{"no listeners by default", nil, nil, []string{"http", "grpc", "admin"}},
		{"debug", map[string]string{"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0"}, map[string]string{"debug-addr": "127.0.0.1:0"}, []string{"admin"}},
		{"prometheus", map[string]string{"USE_PROMETHEUS": "true"}, map[string]string{"reference-stats-prometheus": ":9090", "debug-addr": "0.0.0.0:6070"},
			[]string{"admin", "statsd", "reference-stats-prometheus-path", "reference-stats-prometheus-mapper"}},
		{"prometheus all", map[string]string{"USE_STATSD": "false", "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "127.0.0.1:9102", "PROMETHEUS_PATH": "/stats",
			"PROMETHEUS_MAPPER_YAML": "/etc/m.yaml"},
			map[string]string{"reference-stats-prometheus": "127.0.0.1:9102", "reference-stats-prometheus-path": "/stats", "reference-stats-prometheus-mapper": "/etc/m.yaml", "reference-stats-prometheus-mapper-lenient": "true"}, []string{"statsd"}},
		{"prometheus off", map[string]string{"USE_PROMETHEUS": "false", "PROMETHEUS_ADDR": ":1"}, map[string]string{"debug-addr": "0.0.0.0:6070"}, []string{"admin", "reference-stats-prometheus"}},
		{"statsd", map[string]string{"STATSD_HOST": "stats.local", "STATSD_PORT": "9125", "STATSD_PROTOCOL": "UDP"},
			map[string]string{"statsd": "stats.local:9125", "statsd-protocol": "udp"}, []string{"statsd-dogstatsd", "reference-stats-log"}},
		{"statsd flush and tags", map[string]string{"USE_STATSD": "true", "STATS_FLUSH_INTERVAL": "1s", "EXTRA_TAGS": "env:prod,zone:a"},
			map[string]string{"statsd": "localhost:8125", "reference-stats-flush-interval": "1s", "reference-stats-tags": "env:prod,zone:a"}, nil},
		{"dogstatsd", map[string]string{"USE_STATSD": "false", "USE_DOG_STATSD": "true", "STATSD_PORT": "8126", "USE_DOG_STATSD_MOGRIFIERS": "HITS",
			"DOG_STATSD_MOGRIFIER_HITS_PATTERN": `^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`,
			"DOG_STATSD_MOGRIFIER_HITS_NAME":    "ratelimit.service.rate_limit.$3", "DOG_STATSD_MOGRIFIER_HITS_TAGS": "domain:$1,descriptor:$2"},
			map[string]string{"statsd": "localhost:8126", "statsd-dogstatsd": "true",
				"statsd-mogrifiers": `[{"pattern":"^ratelimit\\.service\\.rate_limit\\.([^.]+)\\.(.*)\\.([^.]+)$","name":"ratelimit.service.rate_limit.$3","tags":{"descriptor":"$2","domain":"$1"}}]`},
			[]string{"statsd-protocol"}},
		{"stats to the log", map[string]string{"USE_STATSD": "false"}, map[string]string{"reference-stats-log": "true"}, []string{"statsd", "reference-stats-prometheus"}},
		{"stats disabled", map[string]string{"DISABLE_STATS": "true", "USE_PROMETHEUS": "true"}, map[string]string{"reference-stats-log": "false"}, []string{"statsd", "reference-stats-prometheus"}},
		{"grpc tls", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c", "GRPC_SERVER_TLS_KEY": "k", "GRPC_CLIENT_TLS_CACERT": "ca", "GRPC_CLIENT_TLS_SAN": "spiffe://x"},
			map[string]string{"tls-cert": "c", "tls-key": "k", "tls-grpc-only": "true", "tls-client-ca": "ca", "tls-client-san": "spiffe://x"}, nil},
		{"grpc tls off", map[string]string{"GRPC_SERVER_USE_TLS": "false", "GRPC_SERVER_TLS_CERT": "c", "GRPC_SERVER_TLS_KEY": "k"}, nil, []string{"tls-cert", "tls-key", "tls-grpc-only"}},
		{"connection age", map[string]string{"GRPC_MAX_CONNECTION_AGE": "1h", "GRPC_MAX_CONNECTION_AGE_GRACE": "30s"},
			map[string]string{"grpc-max-connection-age": "1h", "grpc-max-connection-age-grace": "30s"}, nil},
		{"log trace", map[string]string{"LOG_LEVEL": "TRACE"}, map[string]string{"log-level": "debug"}, nil},
		{"log warning", map[string]string{"LOG_LEVEL": "Warning"}, map[string]string{"log-level": "warn"}, nil},
		{"log fatal", map[string]string{"LOG_LEVEL": "fatal"}, map[string]string{"log-level": "error"}, nil},
		{"log json", map[string]string{"LOG_FORMAT": "JSON"}, map[string]string{"log-format": "json"}, nil},
		{"file config", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit"}, map[string]string{"config": "/data/ratelimit/config"}, []string{"xds-server"}},
		{"file config app dir", map[string]string{"CONFIG_TYPE": "FILE", "RUNTIME_ROOT": "/srv", "RUNTIME_APPDIRECTORY": "rl", "RUNTIME_WATCH_ROOT": "false"}, map[string]string{"config": "/srv/rl"}, nil},
		{"xds defaults", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}, map[string]string{"xds-server": "localhost:18000", "xds-node-id": "default"},
			[]string{"config", "xds-tls", "xds-node-metadata", "xds-headers"}},
		{"xds all", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "cp:1", "CONFIG_GRPC_XDS_NODE_ID": "n",
			"CONFIG_GRPC_XDS_NODE_METADATA": "a=1,b=2", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-a:1,x-b:2",
			"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "ca", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "c",
			"CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "k", "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "cp.example",
			"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "1s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "30s", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "0.25",
			"XDS_CLIENT_BACKOFF_JITTER": "false", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "8388608"},
			map[string]string{"xds-server": "cp:1", "xds-node-id": "n", "xds-node-metadata": "a=1,b=2", "xds-headers": "x-a:1,x-b:2",
				"xds-tls": "true", "xds-tls-ca": "ca", "xds-tls-cert": "c", "xds-tls-key": "k", "xds-tls-server-name": "cp.example",
				"xds-backoff-initial": "1s", "xds-backoff-max": "30s", "xds-backoff-random-factor": "0.25", "xds-backoff-jitter": "false",
				"xds-max-message-size": "8388608"}, []string{"config"}},
		{"xds without tls", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "c"}, nil, []string{"xds-tls", "xds-tls-cert"}},
		{"redis tcp", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "10.0.0.1:6379"}, map[string]string{"redis": "redis://10.0.0.1:6379"}, nil},
		{"redis TCP upper case", map[string]string{"REDIS_SOCKET_TYPE": "TCP", "REDIS_URL": "r:6379", "REDIS_TYPE": "single"}, map[string]string{"redis": "redis://r:6379"}, nil},
		{"redis password", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_AUTH": "s3cret"}, map[string]string{"redis": "redis://:s3cret@r:6379"}, nil},
		{"redis user and password", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_AUTH": "rl:p@ss/w:rd"},
			map[string]string{"redis": "redis://rl:p%40ss%2Fw%3Ard@r:6379"}, nil},
		{"redis unix", map[string]string{"REDIS_URL": "/run/redis.sock", "REDIS_AUTH": "pw"}, map[string]string{"redis": "unix://:pw@/run/redis.sock"}, nil},
		{"redis tls", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6380", "REDIS_TLS": "true", "REDIS_TLS_CACERT": "ca", "REDIS_TLS_CLIENT_CERT": "c", "REDIS_TLS_CLIENT_KEY": "k"},
			map[string]string{"redis": "rediss://r:6380", "redis-tls-ca": "ca", "redis-tls-cert": "c", "redis-tls-key": "k"}, nil},
		{"redis tls off", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_TLS_CACERT": "ca"}, map[string]string{"redis": "redis://r:6379"}, []string{"redis-tls-ca"}},
		{"redis cluster", map[string]string{"REDIS_TYPE": "CLUSTER", "REDIS_URL": "a:7000,b:7001", "REDIS_AUTH": "pw"}, map[string]string{"redis": "redis+cluster://:pw@a:7000,b:7001"}, nil},
		{"redis sentinel", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_SENTINEL_AUTH": "sp"},
			map[string]string{"redis": "redis+sentinel://s1:26379,s2:26379?master=mymaster&sentinel_password=sp"}, nil},
		{"redis sentinel tls user", map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "m,s1:26379", "REDIS_TLS": "true", "REDIS_AUTH": "u:p", "REDIS_SENTINEL_AUTH": "su:sp"},
			map[string]string{"redis": "rediss+sentinel://u:p@s1:26379?master=m&sentinel_password=sp&sentinel_user=su"}, nil},
		{"redis timeout", map[string]string{"REDIS_TIMEOUT": "2s"}, map[string]string{"redis-timeout": "2s"}, nil},
		{"redis health", map[string]string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true"}, map[string]string{"readyz-breaker": "true"}, nil},
		{"cache key prefix", map[string]string{"CACHE_KEY_PREFIX": "eg_"}, map[string]string{"redis-key-prefix": "eg_"}, nil},
		{"local cache", map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "1048576"}, nil, []string{"tiered"}},
		{"stop increment", map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}, map[string]string{"counting": "admitted"}, nil},
		{"count all", map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "false"}, map[string]string{"counting": "all"}, nil},
		{"near limit", map[string]string{"NEAR_LIMIT_RATIO": "0.9"}, map[string]string{"near-limit-ratio": "0.9"}, nil},
		{"headers", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_LIMIT_HEADER": "X-Limit", "LIMIT_REMAINING_HEADER": "X-Left", "LIMIT_RESET_HEADER": "X-Reset"},
			map[string]string{"response-headers": "true", "limit-header": "X-Limit", "remaining-header": "X-Left", "reset-header": "X-Reset"}, nil},
		{"modes", map[string]string{"SHADOW_MODE": "true", "QUOTA_MODE": "1"}, map[string]string{"shadow-mode": "true", "quota-mode": "true"}, nil},
		{"modes off", map[string]string{"SHADOW_MODE": "false", "QUOTA_MODE": "false", "LIMIT_RESPONSE_HEADERS_ENABLED": "false"}, nil, []string{"shadow-mode", "quota-mode", "response-headers"}},
		{"merge domains", map[string]string{"MERGE_DOMAIN_CONFIG": "true"}, map[string]string{"merge-domains": "true"}, nil},
		{"merge domains off", map[string]string{"MERGE_DOMAIN_CONFIG": "false"}, map[string]string{"merge-domains": "false"}, nil},
		{"merge domains unset", nil, nil, []string{"merge-domains"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := referencePlan(envOf(tt.env))
			if len(p.Errors) > 0 {
				t.Fatalf("errors: %+v", p.Errors)
			}
			got := flagsOf(p)
			for f, v := range tt.flags {
				if got[f] != v {
					t.Errorf("--%s = %q, want %q (all: %v)", f, got[f], v, got)
				}
			}
			for _, f := range tt.unset {
				if v, ok := got[f]; ok {
					t.Errorf("--%s = %q, want it unset", f, v)
				}
			}
		})
	}
}

// GRPC_UDS serves gRPC on the Unix socket only: GRPC_HOST and GRPC_PORT
// are then ignored, and --grpc (or SLUICE_GRPC) keeps gRPC on TCP.
func TestReferencePlanGRPCUDS(t *testing.T) {
	p := referencePlan(envOf(map[string]string{"GRPC_UDS": "/run/rl.sock", "GRPC_PORT": "9001"}))
	if got := flagsOf(p); got["grpc-uds"] != "/run/rl.sock" || got["grpc"] != "" {
		t.Errorf("flags %v, want --grpc-uds and no --grpc", got)
	}
	if got := varsOf(p.Ignored); !slices.Equal(got, []string{"GRPC_PORT"}) {
		t.Errorf("ignored %v, want GRPC_PORT", got)
	}
	f, out, code := parseRefEnv(t, map[string]string{"CONFIG_TYPE": "FILE", "GRPC_UDS": "/run/rl.sock"}, "--grpc", "127.0.0.1:1")
	if code != -1 || f.listen.grpcUDS != "" || f.listen.grpc != "127.0.0.1:1" {
		t.Errorf("GRPC_UDS with --grpc: code %d %s, grpc-uds %q grpc %q; want --grpc alone", code, out, f.listen.grpcUDS, f.listen.grpc)
	}
}

// TestReferencePlanMemcache: BACKEND_TYPE=memcache and MEMCACHE_* set the
// --memcache flags; REDIS_* are then ignored.
// TestReferencePlanDotFiles: the reference reads dot files unless
// RUNTIME_IGNOREDOTFILES is true; with xDS there are no files.
func TestReferencePlanDotFiles(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"RUNTIME_ROOT": "/r"}, "true"},
		{map[string]string{"RUNTIME_ROOT": "/r", "RUNTIME_IGNOREDOTFILES": "false"}, "true"},
		{map[string]string{"RUNTIME_ROOT": "/r", "RUNTIME_IGNOREDOTFILES": "true"}, ""},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "x:1"}, ""},
	} {
		if got := flagsOf(referencePlan(envOf(tc.env)))["config-dot-files"]; got != tc.want {
			t.Errorf("%v: --config-dot-files %q, want %q", tc.env, got, tc.want)
		}
	}
}

// TestReferencePlanRedisSkipHostname: REDIS_TLS_SKIP_HOSTNAME_VERIFICATION
// checks Redis's certificate chain but not its name, as the reference;
// false or without TLS, nothing.
func TestReferencePlanRedisSkipHostname(t *testing.T) {
	base := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:1", "REDIS_TLS": "true", "REDIS_TLS_CACERT": "/ca.pem"}
	for _, tc := range []struct {
		skip, tls string
		want      string
	}{{"true", "true", "true"}, {"false", "true", ""}, {"true", "false", ""}} {
		env := maps.Clone(base)
		env["REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"], env["REDIS_TLS"] = tc.skip, tc.tls
		p := referencePlan(envOf(env))
		if got := flagsOf(p)["redis-tls-skip-name-check"]; got != tc.want || len(p.Errors) != 0 {
			t.Errorf("%v: --redis-tls-skip-name-check %q, errors %v; want %q, none", env, got, p.Errors, tc.want)
		}
	}
}

func TestReferencePlanMemcache(t *testing.T) {
	p := referencePlan(envOf(map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "m1:11211,m2:11211",
		"MEMCACHE_MAX_IDLE_CONNS": "8", "MEMCACHE_TLS": "true", "MEMCACHE_TLS_CACERT": "/ca.pem", "MEMCACHE_TLS_CLIENT_CERT": "/c.pem",
		"MEMCACHE_TLS_CLIENT_KEY": "/k.pem", "REDIS_URL": "/r.sock", "CACHE_KEY_PREFIX": "rl_", "LOCAL_CACHE_SIZE_IN_BYTES": "1000",
		"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION": "true"}))
	got := flagsOf(p)
	want := map[string]string{"memcache": "m1:11211,m2:11211", "memcache-max-idle-conns": "8", "memcache-tls": "true",
		"memcache-tls-ca": "/ca.pem", "memcache-tls-cert": "/c.pem", "memcache-tls-key": "/k.pem", "redis-key-prefix": "rl_",
		"memcache-tls-skip-name-check": "true"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("--%s = %q, want %q", k, got[k], v)
		}
	}
	if got["redis"] != "" {
		t.Errorf("--redis = %q with BACKEND_TYPE=memcache", got["redis"])
	}
	if !slices.Contains(varsOf(p.Ignored), "REDIS_URL") {
		t.Errorf("REDIS_URL not ignored: %v", varsOf(p.Ignored))
	}
	p = referencePlan(envOf(map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_SRV": "_memcache._tcp.mc.example", "MEMCACHE_SRV_REFRESH": "30s"}))
	if got := flagsOf(p); got["memcache-srv"] != "_memcache._tcp.mc.example" || got["memcache-srv-refresh"] != "30s" || got["memcache"] != "" {
		t.Errorf("MEMCACHE_SRV: flags %v", got)
	}
	f, out, code := parseRefEnv(t, map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "127.0.0.1:11211", "MEMCACHE_MAX_IDLE_CONNS": "4"})
	if code != -1 {
		t.Fatalf("parse: code %d, %s", code, out)
	}
	if err := f.validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
	if f.redis.memcache.servers != "127.0.0.1:11211" || f.redis.memcache.maxIdleConns != 4 || f.redis.url != "" {
		t.Errorf("memcache %q idle %d redis %q", f.redis.memcache.servers, f.redis.memcache.maxIdleConns, f.redis.url)
	}
}

func TestReferencePlanErrors(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want string // the variable the error names, then part of its message
	}{
		{map[string]string{"PORT": "abc"}, "PORT: \"abc\": want a port number"},
		{map[string]string{"GRPC_PORT": "70000"}, "GRPC_PORT"},
		{map[string]string{"DEBUG_PORT": "-1"}, "DEBUG_PORT"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c"}, "GRPC_SERVER_USE_TLS: true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "yes please"}, "GRPC_SERVER_USE_TLS: \"yes please\": want true or false"},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE": "forever"}, "GRPC_MAX_CONNECTION_AGE: \"forever\": want a duration"},
		{map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL: \"loud\""},
		{map[string]string{"LOG_FORMAT": "xml"}, "LOG_FORMAT: \"xml\": want text or json"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_DELTA"}, "CONFIG_TYPE: \"GRPC_XDS_DELTA\": want FILE or GRPC_XDS_SOTW"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "10"}, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "-1"}, "XDS_CLIENT_BACKOFF_RANDOM_FACTOR"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_JITTER": "often"}, "XDS_CLIENT_BACKOFF_JITTER"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "4MiB"}, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"},
		{map[string]string{"BACKEND_TYPE": "memcache"}, "BACKEND_TYPE: memcache needs MEMCACHE_HOST_PORT or MEMCACHE_SRV"},
		{map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "m:1", "MEMCACHE_SRV": "_mc._tcp.example"}, "MEMCACHE_SRV: set with MEMCACHE_HOST_PORT"},
		{map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "m:1", "MEMCACHE_TLS": "true", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION": "often"}, "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION: \"often\": want true or false"},
		{map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_SRV": "_mc._tcp.example", "MEMCACHE_SRV_REFRESH": "soon"}, "MEMCACHE_SRV_REFRESH"},
		{map[string]string{"BACKEND_TYPE": "dynamo"}, "BACKEND_TYPE: \"dynamo\": want redis"},
		{map[string]string{"REDIS_TYPE": "ring"}, "REDIS_TYPE: \"ring\""},
		{map[string]string{"REDIS_SOCKET_TYPE": "udp"}, "REDIS_SOCKET_TYPE: \"udp\": want tcp or unix"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis://r:6379"}, "REDIS_URL: \"redis://r:6379\": want envoyproxy/ratelimit's form"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r"}, "REDIS_URL: \"r\": want host:port"},
		{map[string]string{"REDIS_URL": "redis.sock"}, "REDIS_URL: \"redis.sock\": REDIS_SOCKET_TYPE unix wants the socket's absolute path"},
		{map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "a:1,b"}, "REDIS_URL: \"b\": want host:port"},
		{map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "s1:26379"}, "REDIS_URL: \"s1:26379\": REDIS_TYPE sentinel wants master-name"},
		{map[string]string{"REDIS_TLS": "true"}, "REDIS_TLS: true with REDIS_SOCKET_TYPE unix"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:1", "REDIS_TLS": "true", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "often"}, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: \"often\": want true or false"},
		{map[string]string{"REDIS_TIMEOUT": "10"}, "REDIS_TIMEOUT"},
		{map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "-5"}, "LOCAL_CACHE_SIZE_IN_BYTES"},
		{map[string]string{"NEAR_LIMIT_RATIO": "1.5"}, "NEAR_LIMIT_RATIO: \"1.5\": want a number above 0, at most 1"},
		{map[string]string{"NEAR_LIMIT_RATIO": "0"}, "NEAR_LIMIT_RATIO"},
		{map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "maybe"}, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"},
		{map[string]string{"SHADOW_MODE": "on"}, "SHADOW_MODE: \"on\": want true or false"},
		{map[string]string{"USE_PROMETHEUS": "2"}, "USE_PROMETHEUS"},
		{map[string]string{"USE_STATSD": "true", "USE_PROMETHEUS": "true"}, "USE_STATSD: the statistics go to one sink"},
		{map[string]string{"USE_DOG_STATSD": "true", "USE_PROMETHEUS": "true"}, "USE_STATSD: the statistics go to one sink"},
		{map[string]string{"STATSD_PORT": "x"}, "STATSD_PORT"},
		{map[string]string{"STATSD_PROTOCOL": "unix"}, `STATSD_PROTOCOL: "unix": want tcp or udp`},
		{map[string]string{"STATS_FLUSH_INTERVAL": "10"}, "STATS_FLUSH_INTERVAL"},
		{map[string]string{"STATS_FLUSH_INTERVAL": "1ms"}, "STATS_FLUSH_INTERVAL"},
		{map[string]string{"EXTRA_TAGS": "novalue"}, "EXTRA_TAGS"},
		{map[string]string{"USE_DOG_STATSD": "true", "USE_DOG_STATSD_MOGRIFIERS": "X"}, "USE_DOG_STATSD_MOGRIFIERS: X (DOG_STATSD_MOGRIFIER_X_PATTERN"},
		{map[string]string{"USE_DOG_STATSD": "true", "USE_DOG_STATSD_MOGRIFIERS": "X", "DOG_STATSD_MOGRIFIER_X_PATTERN": "(", "DOG_STATSD_MOGRIFIER_X_NAME": "n"}, "USE_DOG_STATSD_MOGRIFIERS"},
	}
	for _, tt := range tests {
		p := referencePlan(envOf(tt.env))
		var msgs []string
		for _, n := range p.Errors {
			msgs = append(msgs, n.Var+": "+n.Msg)
		}
		all := strings.Join(msgs, "\n")
		if !strings.Contains(all, tt.want) {
			t.Errorf("%v: errors %q, want one with %q", tt.env, all, tt.want)
		}
	}
}

// refVariables are every environment variable of envoyproxy/ratelimit's
// settings (src/settings/settings.go), and GRPC_SERVER_TLS_CA_CERT, which
// Envoy Gateway sets though the reference does not read it.
var refVariables = []string{
	"HOST", "PORT", "DEBUG_HOST", "DEBUG_PORT", "GRPC_UDS", "GRPC_HOST", "GRPC_PORT",
	"GRPC_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE_GRACE", "GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT",
	"GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN", "GRPC_SERVER_TLS_CA_CERT",
	"LOG_LEVEL", "LOG_FORMAT", "CONFIG_TYPE", "FORCE_START_WITHOUT_INITIAL_CONFIG",
	"CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_SERVER_URL",
	"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
	"CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
	"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
	"XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
	"USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS", "USE_STATSD", "STATSD_HOST", "STATSD_PORT", "STATSD_PROTOCOL", "EXTRA_TAGS",
	"STATS_FLUSH_INTERVAL", "DISABLE_STATS", "USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML",
	"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT",
	"EXPIRATION_JITTER_MAX_SECONDS", "LOCAL_CACHE_SIZE_IN_BYTES", "NEAR_LIMIT_RATIO", "CACHE_KEY_PREFIX", "BACKEND_TYPE",
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "LIMIT_RESPONSE_HEADERS_ENABLED", "LIMIT_LIMIT_HEADER",
	"LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
	"REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL", "REDIS_POOL_SIZE", "REDIS_AUTH", "REDIS_TLS", "REDIS_TLS_CLIENT_CERT",
	"REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "REDIS_PIPELINE_WINDOW",
	"REDIS_PIPELINE_LIMIT", "REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL",
	"REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_SENTINEL_AUTH",
	"REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT",
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "REDIS_TIMEOUT", "REDIS_PERSECOND_TIMEOUT", "REDIS_POOL_ON_EMPTY_BEHAVIOR",
	"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV",
	"MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS", "MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT",
	"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "SHADOW_MODE", "QUOTA_MODE", "RESPONSE_DYNAMIC_METADATA",
	"MERGE_DOMAIN_CONFIG", "TRACING_ENABLED", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE",
	"TRACING_SERVICE_INSTANCE_ID", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE",
}

// refSample is a value of each variable that does something (the
// reference's "on"), with the settings it needs beside it.
func refSample(v string) map[string]string {
	env := map[string]string{v: "x"}
	switch {
	case strings.HasSuffix(v, "_PORT"):
		env[v] = "1234"
	case strings.Contains(v, "TIMEOUT") || strings.Contains(v, "INTERVAL") || strings.Contains(v, "WINDOW") || strings.Contains(v, "REFRESH") ||
		strings.Contains(v, "CONNECTION_AGE"):
		env[v] = "3s"
	case strings.HasPrefix(v, "USE_") || strings.HasSuffix(v, "_TLS") || strings.HasSuffix(v, "_ENABLED") || strings.HasSuffix(v, "_MODE") ||
		strings.Contains(v, "USE_TLS") || strings.Contains(v, "SKIP_") || strings.HasPrefix(v, "RUNTIME_IGNORE") || v == "RUNTIME_WATCH_ROOT" ||
		strings.HasPrefix(v, "FORCE_") || strings.HasPrefix(v, "HEALTHY_") || v == "DISABLE_STATS" || v == "REDIS_PERSECOND" ||
		v == "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT" || v == "RESPONSE_DYNAMIC_METADATA" || v == "MERGE_DOMAIN_CONFIG" ||
		v == "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION" || v == "XDS_CLIENT_BACKOFF_JITTER":
		env[v] = "true"
	case strings.HasSuffix(v, "_RATIO") || strings.HasSuffix(v, "_RATE") || strings.HasSuffix(v, "_FACTOR"):
		env[v] = "0.5"
	case strings.HasSuffix(v, "_SIZE") || strings.HasSuffix(v, "_BYTES") || strings.HasSuffix(v, "_LIMIT") || strings.HasSuffix(v, "_SECONDS") ||
		strings.HasSuffix(v, "_CONNS"):
		env[v] = "100"
	}
	switch v {
	case "LOG_LEVEL":
		env[v] = "debug"
	case "LOG_FORMAT":
		env[v] = "json"
	case "CONFIG_TYPE":
		env[v] = "GRPC_XDS_SOTW"
	case "BACKEND_TYPE":
		env[v] = "redis"
		env["REDIS_URL"] = "/tmp/x.sock" // not the default: BACKEND_TYPE redis is the default
	case "REDIS_SOCKET_TYPE":
		env[v], env["REDIS_URL"] = "tcp", "r:1"
	case "REDIS_TYPE":
		env[v], env["REDIS_URL"] = "cluster", "a:1,b:2"
	case "REDIS_URL":
		env[v] = "/run/r.sock"
	case "REDIS_SENTINEL_AUTH":
		env["REDIS_TYPE"], env["REDIS_URL"] = "sentinel", "m,s:1"
	case "REDIS_TLS":
		env["REDIS_SOCKET_TYPE"], env["REDIS_URL"] = "tcp", "r:1"
	case "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT":
		env["REDIS_TLS"], env["REDIS_SOCKET_TYPE"], env["REDIS_URL"] = "true", "tcp", "r:1"
	case "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN":
		env["GRPC_SERVER_USE_TLS"], env["GRPC_SERVER_TLS_CERT"], env["GRPC_SERVER_TLS_KEY"] = "true", "c", "k"
		env[v] = "other"
	case "PROMETHEUS_ADDR", "PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML":
		env["USE_PROMETHEUS"] = "true"
	case "USE_DOG_STATSD_MOGRIFIERS":
		env["USE_DOG_STATSD"], env["DOG_STATSD_MOGRIFIER_X_PATTERN"], env["DOG_STATSD_MOGRIFIER_X_NAME"] = "true", "^a", "b"
	case "STATSD_PROTOCOL":
		env[v] = "udp"
	case "EXTRA_TAGS":
		env[v] = "k:v"
	case "LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER":
		env[v] = "X-Header"
	case "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT":
		env[v] = "true"
	}
	if strings.HasPrefix(v, "CONFIG_GRPC_XDS_") || strings.HasPrefix(v, "XDS_CLIENT_") {
		env["CONFIG_TYPE"] = "GRPC_XDS_SOTW"
		if strings.Contains(v, "_TLS_") {
			env["CONFIG_GRPC_XDS_SERVER_USE_TLS"] = "true"
		}
	}
	if strings.HasPrefix(v, "REDIS_PERSECOND_") {
		env["REDIS_PERSECOND"] = "true"
	}
	if strings.HasPrefix(v, "MEMCACHE_") {
		env["BACKEND_TYPE"] = "memcache"
		switch v {
		case "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH":
			env["MEMCACHE_SRV"] = "_mc._tcp.example"
		default:
			env["MEMCACHE_HOST_PORT"] = "m:11211"
		}
		if strings.HasPrefix(v, "MEMCACHE_TLS_") {
			env["MEMCACHE_TLS"] = "true"
		}
	}
	return env
}

// TestReferencePlanEveryVariable: each of the reference's variables, set to
// a value that does something, is honoured (it changes an assignment),
// logged as ignored, or a start-up error: none is silently dropped.
func TestReferencePlanEveryVariable(t *testing.T) {
	for _, v := range refVariables {
		env := refSample(v)
		p := referencePlan(envOf(env))
		handled := false
		for _, a := range p.Assign {
			if slices.Contains(strings.Split(a.Var, ","), v) && !a.Default {
				handled = true
			}
		}
		if slices.Contains(varsOf(p.Ignored), v) || slices.Contains(varsOf(p.Errors), v) {
			handled = true
		}
		if v == "LOCAL_CACHE_SIZE_IN_BYTES" && p.LocalCacheKeys > 0 { // the engine's local cache
			handled = true
		}
		if !handled {
			t.Errorf("%s (env %v): neither applied, ignored nor an error: %+v", v, env, p)
		}
	}
}

// TestReferenceEnvDoc: docs/reference-env.md has a row for every variable.
func TestReferenceEnvDoc(t *testing.T) {
	b, err := os.ReadFile("../../docs/reference-env.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range refVariables {
		if !bytes.Contains(b, []byte("| `"+v+"`")) {
			t.Errorf("docs/reference-env.md has no row for %s", v)
		}
	}
}

// TestReferencePlanFlagsExist: every flag the plan sets is one of serve's.
func TestReferencePlanFlagsExist(t *testing.T) {
	var f serveFlags
	fs := serveFlagSet(&f, io.Discard)
	seen := map[string]bool{}
	for _, v := range refVariables {
		for _, a := range referencePlan(envOf(refSample(v))).Assign {
			seen[a.Flag] = true
		}
	}
	for _, a := range referencePlan(envOf(envoyGatewayEnv)).Assign {
		seen[a.Flag] = true
	}
	for name := range seen {
		if fs.Lookup(name) == nil {
			t.Errorf("the plan sets --%s, which serve does not have", name)
		}
	}
	if len(seen) < 30 {
		t.Errorf("the plan sets %d flags in all, want the reference's settings", len(seen))
	}
}

// parseServe parses serve's flags with env as the whole environment.
func parseRefEnv(t *testing.T, env map[string]string, args ...string) (*serveFlags, string, int) {
	t.Helper()
	var f serveFlags
	var out bytes.Buffer
	fs := serveFlagSet(&f, &out)
	code, done := parseEnv(fs, args, envOf(env))
	if !done {
		code = -1
	}
	return &f, out.String(), code
}

func TestReferenceEnvPrecedence(t *testing.T) {
	env := map[string]string{
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", // file config, reference mode (auto)
		"LOG_LEVEL": "debug", "SLUICE_LOG_LEVEL": "error", // a SLUICE_ variable wins
		"PORT": "9000", "GRPC_PORT": "9001", // the flag --grpc wins
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379", "REDIS_AUTH": "pw",
		"SHADOW_MODE": "true", "LIMIT_RESPONSE_HEADERS_ENABLED": "true",
	}
	f, out, code := parseRefEnv(t, env, "--grpc", "127.0.0.1:1")
	if code != -1 {
		t.Fatalf("parse: code %d, %s", code, out)
	}
	if f.listen.http != ":9000" || f.listen.grpc != "127.0.0.1:1" || f.runtime.logLevel != "error" ||
		f.config.file != "/data/ratelimit/config" || f.redis.url != "redis://:pw@127.0.0.1:6379" ||
		!f.service.shadowMode || !f.service.responseHeaders || f.listen.debugAddr != "0.0.0.0:6070" {
		t.Errorf("http %q grpc %q log %q config %q redis %q shadow %v headers %v debug %q",
			f.listen.http, f.listen.grpc, f.runtime.logLevel, f.config.file, f.redis.url, f.service.shadowMode, f.service.responseHeaders, f.listen.debugAddr)
	}
	if !f.runtime.refEnv.on {
		t.Error("reference mode off")
	}
	var overruled []string
	for _, a := range f.runtime.refEnv.overruled {
		overruled = append(overruled, a.Flag)
	}
	sort.Strings(overruled)
	if want := []string{"grpc", "log-level"}; !slices.Equal(overruled, want) {
		t.Errorf("overruled %v, want %v", overruled, want)
	}
	if err := f.validate(); err != nil {
		t.Errorf("validate: %v", err)
	}

	// A SLUICE_ variable or a flag overrules a group: --admin drops
	// DEBUG_PORT's --debug-addr, --redis drops REDIS_TLS_*'s --redis-tls-*.
	env2 := map[string]string{"CONFIG_TYPE": "FILE", "SLUICE_ADMIN": "127.0.0.1:2", "DEBUG_PORT": "7000",
		"REDIS_TLS": "true", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:1", "REDIS_TLS_CACERT": "/ca.pem",
		"BACKEND_TYPE": "memcache"}
	f, out, code = parseRefEnv(t, env2, "--redis", "redis://127.0.0.1:6379")
	if code != -1 {
		t.Fatalf("parse: code %d, %s", code, out)
	}
	if f.listen.admin != "127.0.0.1:2" || f.listen.debugAddr != "" || f.redis.url != "redis://127.0.0.1:6379" || f.tls.redisCA != "" {
		t.Errorf("admin %q debug %q redis %q redis-tls-ca %q", f.listen.admin, f.listen.debugAddr, f.redis.url, f.tls.redisCA)
	}
	if err := f.validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
}

func TestReferenceEnvMode(t *testing.T) {
	generic := map[string]string{"PORT": "9000", "HOST": "127.0.0.1", "LOG_LEVEL": "debug", "REDIS_URL": "redis://h:1", "REDIS_AUTH": "x"}
	for _, args := range [][]string{nil, {"--reference-env", "off"}} {
		f, out, code := parseRefEnv(t, generic, args...)
		if code != -1 {
			t.Fatalf("%v: code %d, %s", args, code, out)
		}
		if f.runtime.refEnv.on || f.listen.http != ":8080" || f.runtime.logLevel != "info" || f.redis.url != "" {
			t.Errorf("%v: generic variables applied: on %v http %q log %q redis %q", args, f.runtime.refEnv.on, f.listen.http, f.runtime.logLevel, f.redis.url)
		}
	}
	// off wins over a distinctive variable, from the flag or SLUICE_REFERENCE_ENV.
	f, _, _ := parseRefEnv(t, map[string]string{"CONFIG_TYPE": "FILE", "SLUICE_REFERENCE_ENV": "off"})
	if f.runtime.refEnv.on || f.config.file != "" {
		t.Errorf("SLUICE_REFERENCE_ENV=off: on %v, config %q", f.runtime.refEnv.on, f.config.file)
	}
	// on applies the reference's defaults without any of its variables.
	f, out, code := parseRefEnv(t, map[string]string{"PORT": "9000"}, "--reference-env=on")
	if code != -1 {
		t.Fatalf("on: code %d, %s", code, out)
	}
	if !f.runtime.refEnv.on || f.listen.http != ":9000" || f.runtime.logLevel != "warn" || f.config.file != "/srv/runtime_data/current/config" ||
		f.redis.url != "unix:///var/run/nutcracker/ratelimit.sock" {
		t.Errorf("on: http %q log %q config %q redis %q", f.listen.http, f.runtime.logLevel, f.config.file, f.redis.url)
	}
	if _, out, code := parseRefEnv(t, nil, "--reference-env", "maybe"); code != 2 || !strings.Contains(out, "want auto, on or off") {
		t.Errorf("--reference-env maybe: code %d, %q", code, out)
	}
}

func TestReferenceEnvErrors(t *testing.T) {
	tests := []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"CONFIG_TYPE": "FILE", "PORT": "abc"}, nil, `PORT: "abc": want a port number`},
		{map[string]string{"CONFIG_TYPE": "FILE", "BACKEND_TYPE": "memcache"}, nil, "BACKEND_TYPE: memcache needs MEMCACHE_HOST_PORT"},
		{map[string]string{"USE_STATSD": "false", "LOG_LEVEL": "verbose", "GRPC_UDS": "/s"}, nil, `LOG_LEVEL: "verbose"`},
		{map[string]string{"USE_STATSD": "false", "GRPC_UDS": "/" + strings.Repeat("s", 200)}, nil, "GRPC_UDS"},
		{map[string]string{"USE_STATSD": "false", "NEAR_LIMIT_RATIO": "1.5"}, nil, "NEAR_LIMIT_RATIO"},
	}
	for _, tt := range tests {
		_, out, code := parseRefEnv(t, tt.env, tt.args...)
		if code != 2 || !strings.Contains(out, tt.want) || !strings.Contains(out, "envoyproxy/ratelimit's environment variables") {
			t.Errorf("%v: code %d, %q; want 2 and %q", tt.env, code, out, tt.want)
		}
	}
	// The user's flag resolves an error that concerns it.
	if _, out, code := parseRefEnv(t, map[string]string{"BACKEND_TYPE": "memcache"}, "--redis", "redis://r:1"); code != -1 {
		t.Errorf("BACKEND_TYPE=memcache with --redis: code %d, %s", code, out)
	}
	if _, out, code := parseRefEnv(t, map[string]string{"CONFIG_TYPE": "FILE", "GRPC_UDS": "/s", "SLUICE_GRPC": ":1"}); code != -1 {
		t.Errorf("GRPC_UDS with SLUICE_GRPC: code %d, %s", code, out)
	}
}

func TestReferenceEnvLog(t *testing.T) {
	f, out, code := parseRefEnv(t, map[string]string{"CONFIG_TYPE": "FILE", "RUNTIME_ROOT": "/data", "USE_STATSD": "true",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:1", "REDIS_AUTH": "hunter2", "REDIS_POOL_SIZE": "20"})
	if code != -1 {
		t.Fatalf("code %d, %s", code, out)
	}
	f.runtime.logFormat = "json"
	if err := f.validate(); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	f.runtime.refEnv.log(f.runtime.logger(&b))
	log := b.String()
	for _, want := range []string{`"level":"WARN"`, "CONFIG_TYPE,RUNTIME_ROOT → --config=/data/config",
		"redis://:xxxxx@r:1", "USE_STATSD → --statsd=localhost:8125", `"var":"REDIS_POOL_SIZE"`, "--log-level=warn"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "hunter2") {
		t.Errorf("log shows the password:\n%s", log)
	}
}

// The reference's TRACING_* variables turn on sluice's tracing with the
// reference's defaults (http, service RateLimit, every trace); off, they do
// nothing.
func TestReferencePlanTracing(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want map[string]string // the --tracing* flags assigned
		errs []string
	}{
		{map[string]string{"TRACING_SERVICE_NAME": "x", "TRACING_SAMPLING_RATE": "0.5"}, map[string]string{}, nil},
		{map[string]string{"TRACING_ENABLED": "true"},
			map[string]string{"tracing": "true", "tracing-service-name": "RateLimit", "tracing-protocol": "http/protobuf", "tracing-sample-ratio": "1"}, nil},
		{map[string]string{"TRACING_ENABLED": "1", "TRACING_SERVICE_NAME": "edge", "TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SAMPLING_RATE": "0.25"},
			map[string]string{"tracing": "true", "tracing-service-name": "edge", "tracing-protocol": "grpc", "tracing-sample-ratio": "0.25"}, nil},
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "7"},
			map[string]string{"tracing": "true", "tracing-service-name": "RateLimit", "tracing-protocol": "http/protobuf", "tracing-sample-ratio": "1"}, nil},
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "-1"},
			map[string]string{"tracing": "true", "tracing-service-name": "RateLimit", "tracing-protocol": "http/protobuf", "tracing-sample-ratio": "0"}, nil},
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "udp", "TRACING_SAMPLING_RATE": "half"},
			map[string]string{"tracing": "true", "tracing-service-name": "RateLimit", "tracing-sample-ratio": "1"},
			[]string{"TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE"}},
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_SERVICE_NAMESPACE": "edge-ns", "TRACING_SERVICE_INSTANCE_ID": "pod-7"},
			map[string]string{"tracing": "true", "tracing-service-name": "RateLimit", "tracing-protocol": "http/protobuf", "tracing-sample-ratio": "1",
				"tracing-service-namespace": "edge-ns", "tracing-service-instance-id": "pod-7"}, nil},
		{map[string]string{"TRACING_ENABLED": "true", "OTEL_RESOURCE_ATTRIBUTES": "a=b, service.instance.id=from-otel"},
			map[string]string{"tracing": "true", "tracing-service-name": "RateLimit", "tracing-protocol": "http/protobuf", "tracing-sample-ratio": "1"}, nil},
	} {
		p := referencePlan(envOf(tc.env))
		got := map[string]string{}
		for f, v := range flagsOf(p) {
			if strings.HasPrefix(f, "tracing") {
				got[f] = v
			}
		}
		// Unset, the instance is a random UUID, another for each process.
		if _, set := tc.env["TRACING_SERVICE_INSTANCE_ID"]; !set && tc.want["tracing"] == "true" && tc.env["OTEL_RESOURCE_ATTRIBUTES"] == "" {
			id := got["tracing-service-instance-id"]
			if !uuidRE.MatchString(id) || id == flagsOf(referencePlan(envOf(tc.env)))["tracing-service-instance-id"] {
				t.Errorf("%v: tracing-service-instance-id %q, want a random UUID", tc.env, id)
			}
			delete(got, "tracing-service-instance-id")
		}
		if !maps.Equal(got, tc.want) {
			t.Errorf("%v: tracing flags %v, want %v", tc.env, got, tc.want)
		}
		if errs := varsOf(p.Errors); !slices.Equal(errs, tc.errs) {
			t.Errorf("%v: errors %v, want %v", tc.env, errs, tc.errs)
		}
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestReferencePlanLocalCache: LOCAL_CACHE_SIZE_IN_BYTES sizes the local
// cache of over-limit keys, a key for each 256 bytes (at least one).
func TestReferencePlanLocalCache(t *testing.T) {
	for _, tt := range []struct {
		give string
		want int
	}{{"1048576", 4096}, {"100", 1}, {"0", 0}, {"1099511627776", engine.MaxLocalCacheKeys}} {
		if got := referencePlan(envOf(map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": tt.give})).LocalCacheKeys; got != tt.want {
			t.Errorf("LOCAL_CACHE_SIZE_IN_BYTES=%s: %d keys, want %d", tt.give, got, tt.want)
		}
	}
}
