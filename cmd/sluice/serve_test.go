package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// parseServe parses args with env set, and validates the flags. It returns
// the flags, and the exit code with serve's message when it stops.
func parseServe(t *testing.T, env map[string]string, args ...string) (serveFlags, int, string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var f serveFlags
	var out strings.Builder
	fs := serveFlagSet(&f, &out)
	if code, done := parse(fs, args); done {
		return f, code, out.String()
	}
	if err := f.validate(); err != nil {
		return f, 2, err.Error()
	}
	return f, 0, ""
}

// flagCase is one parse of serve's flags: the value want of the flag under
// test when the parse succeeds, else the exit code and a part of the
// message.
type flagCase[T comparable] struct {
	name     string
	env      map[string]string
	args     []string
	want     T
	wantCode int
	wantErr  string
}

// testFlag runs cases through parseServe and checks field (read by get).
func testFlag[T comparable](t *testing.T, field string, get func(serveFlags) T, tests []flagCase[T]) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, code, msg := parseServe(t, tt.env, tt.args...)
			if code != tt.wantCode || !strings.Contains(msg, tt.wantErr) {
				t.Errorf("serve %v (env %v): exit %d %q, want %d and %q", tt.args, tt.env, code, msg, tt.wantCode, tt.wantErr)
			}
			if got := get(f); code == 0 && got != tt.want {
				t.Errorf("serve %v (env %v): %s = %v, want %v", tt.args, tt.env, field, got, tt.want)
			}
		})
	}
}

func TestServeFlagGRPCWorkers(t *testing.T) {
	testFlag(t, "grpcWorkers", func(f serveFlags) int { return f.transport.grpcWorkers }, []flagCase[int]{
		{"default", nil, nil, defaultGRPCWorkers, 0, ""},
		{"flag", nil, []string{"--grpc-workers", "16"}, 16, 0, ""},
		{"env", map[string]string{"SLUICE_GRPC_WORKERS": "32"}, nil, 32, 0, ""},
		{"flag wins", map[string]string{"SLUICE_GRPC_WORKERS": "32"}, []string{"--grpc-workers", "8"}, 8, 0, ""},
		{"one", nil, []string{"--grpc-workers", "1"}, 1, 0, ""},
		{"zero", nil, []string{"--grpc-workers", "0"}, 0, 2, "--grpc-workers 0"},
		{"negative", nil, []string{"--grpc-workers=-3"}, -3, 2, "--grpc-workers -3"},
		{"too many", nil, []string{"--grpc-workers", "100000"}, 100000, 2, "--grpc-workers 100000"},
		{"not a number", nil, []string{"--grpc-workers", "lots"}, 0, 2, "-grpc-workers"},
		{"bad env", map[string]string{"SLUICE_GRPC_WORKERS": "0x"}, nil, 0, 2, "SLUICE_GRPC_WORKERS"},
	})
}

func TestServeHelpListsGRPCWorkers(t *testing.T) {
	var f serveFlags
	var out strings.Builder
	fs := serveFlagSet(&f, &out)
	fs.Usage()
	if got := out.String(); !strings.Contains(got, "-grpc-workers") || !strings.Contains(got, "SLUICE_GRPC_WORKERS") || !strings.Contains(got, "(default 128)") {
		t.Errorf("serve -h lacks --grpc-workers, its variable or its default 128:\n%s", got)
	}
}

func TestServeFlagGCHeapFloor(t *testing.T) {
	testFlag(t, "gcHeapFloor", func(f serveFlags) uint64 { return uint64(f.runtime.gcHeapFloor) }, []flagCase[uint64]{
		{"default", nil, nil, 64 << 20, 0, ""},
		{"flag", nil, []string{"--gc-heap-floor", "256MB"}, 256e6, 0, ""},
		{"bytes", nil, []string{"--gc-heap-floor=134217728"}, 128 << 20, 0, ""},
		{"off", nil, []string{"--gc-heap-floor", "0"}, 0, 0, ""},
		{"env", map[string]string{"SLUICE_GC_HEAP_FLOOR": "1GiB"}, nil, 1 << 30, 0, ""},
		{"flag wins", map[string]string{"SLUICE_GC_HEAP_FLOOR": "1GiB"}, []string{"--gc-heap-floor", "32MiB"}, 32 << 20, 0, ""},
		{"below 1MiB", nil, []string{"--gc-heap-floor", "64"}, 64, 2, "--gc-heap-floor 64"},
		{"bad unit", nil, []string{"--gc-heap-floor", "64XB"}, 0, 2, "-gc-heap-floor"},
		{"negative", nil, []string{"--gc-heap-floor=-1"}, 0, 2, "-gc-heap-floor"},
		{"bad env", map[string]string{"SLUICE_GC_HEAP_FLOOR": "lots"}, nil, 0, 2, "SLUICE_GC_HEAP_FLOOR"},
	})
}

// TestE2EGCHeapFloor checks that serve applies the floor: the Go collector's
// go_gc_gogc_percent in /metrics is raised above GOGC=100 while the heap is
// small, and stays at 100 with --gc-heap-floor 0.
func TestE2EGCHeapFloor(t *testing.T) {
	tests := []struct {
		args      []string
		wantAbove bool
	}{
		{nil, true},
		{[]string{"--gc-heap-floor", "0"}, false},
	}
	for _, tt := range tests {
		p := start(t, []string{"GOGC=100"}, tt.args...)
		_, body := p.get(t, "/metrics")
		got, ok := seriesValue(t, body, "go_gc_gogc_percent")
		if !ok {
			got = -1
		}
		if tt.wantAbove && got <= 100 || !tt.wantAbove && got != 100 {
			t.Errorf("serve %v with GOGC=100: go_gc_gogc_percent = %v, want above 100: %v", tt.args, got, tt.wantAbove)
		}
	}
}

func TestServeFlagLeaseRefreshAhead(t *testing.T) {
	testFlag(t, "leaseRefresh", func(f serveFlags) float64 { return f.redis.tiered.leaseRefresh }, []flagCase[float64]{
		{"default", nil, nil, 0.25, 0, ""},
		{"flag", nil, []string{"--lease-refresh-ahead", "0.5"}, 0.5, 0, ""},
		{"env", map[string]string{"SLUICE_LEASE_REFRESH_AHEAD": "0.1"}, nil, 0.1, 0, ""},
		{"off", nil, []string{"--lease-refresh-ahead", "0"}, 0, 0, ""},
		{"one", nil, []string{"--lease-refresh-ahead", "1"}, 1, 2, "--lease-refresh-ahead 1"},
		{"negative", nil, []string{"--lease-refresh-ahead=-0.5"}, -0.5, 2, "--lease-refresh-ahead -0.5"},
		{"bad env", map[string]string{"SLUICE_LEASE_REFRESH_AHEAD": "half"}, nil, 0, 2, "SLUICE_LEASE_REFRESH_AHEAD"},
	})
}

func TestServeFlagFailureMode(t *testing.T) {
	redis := []string{"--redis", "redis://127.0.0.1:1"}
	testFlag(t, "failover.mode", func(f serveFlags) sluice.FailureMode { return f.redis.failover.mode }, []flagCase[sluice.FailureMode]{
		{"default", nil, nil, sluice.FailClosed, 0, ""},
		{"closed", nil, []string{"--failure-mode", "closed"}, sluice.FailClosed, 0, ""},
		{"open, memory store", nil, []string{"--failure-mode", "open"}, sluice.FailOpen, 0, ""},
		{"open with replicas", nil, append([]string{"--failure-mode", "open", "--replicas", "3"}, redis...), sluice.FailOpen, 0, ""},
		{"env", map[string]string{"SLUICE_FAILURE_MODE": "open"}, nil, sluice.FailOpen, 0, ""},
		{"error", nil, append([]string{"--failure-mode", "error"}, redis...), sluice.FailError, 0, ""},
		{"uncounted", nil, append([]string{"--failure-mode", "uncounted"}, redis...), sluice.FailUncounted, 0, ""},
		{"open without replicas", nil, append([]string{"--failure-mode", "open"}, redis...), 0, 2, "--failure-mode open needs --replicas N"},
		{"unknown", nil, []string{"--failure-mode", "maybe"}, 0, 2, `--failure-mode "maybe": want closed, error, open or uncounted`},
		{"open_unbounded", nil, []string{"--failure-mode", "open_unbounded"}, 0, 2, `--failure-mode "open_unbounded": want closed, error, open or uncounted`},
		{"default by name", nil, []string{"--failure-mode", "default"}, 0, 2, `--failure-mode "default": want closed, error, open or uncounted`},
		{"empty", nil, []string{"--failure-mode="}, 0, 2, `--failure-mode "": want closed, error, open or uncounted`},
		{"replicas negative", nil, []string{"--replicas=-1"}, 0, 2, "--replicas -1: must be >= 0"},
	})
}

func TestServeFlagHeaderNames(t *testing.T) {
	testFlag(t, "limitHeader", func(f serveFlags) string { return f.service.headerNames[0] }, []flagCase[string]{
		{"default", nil, nil, "RateLimit-Limit", 0, ""},
		{"flag", nil, []string{"--limit-header", "X-RateLimit-Limit"}, "X-RateLimit-Limit", 0, ""},
		{"env", map[string]string{"SLUICE_LIMIT_HEADER": "X-Limit"}, nil, "X-Limit", 0, ""},
		{"empty", nil, []string{"--limit-header", ""}, "", 2, `--limit-header "": want an HTTP header name`},
		{"space", nil, []string{"--limit-header", "X Limit"}, "X Limit", 2, `--limit-header "X Limit": want an HTTP header name`},
	})
	testFlag(t, "resetHeader", func(f serveFlags) string { return f.service.headerNames[2] }, []flagCase[string]{
		{"colon", nil, []string{"--reset-header", "X-Reset:"}, "X-Reset:", 2, `--reset-header "X-Reset:"`},
	})
}

func TestServeFlagGlobalModes(t *testing.T) {
	testFlag(t, "shadowMode", func(f serveFlags) bool { return f.service.shadowMode }, []flagCase[bool]{
		{"default", nil, nil, false, 0, ""},
		{"flag", nil, []string{"--shadow-mode"}, true, 0, ""},
		{"env", map[string]string{"SLUICE_SHADOW_MODE": "true"}, nil, true, 0, ""},
	})
	testFlag(t, "quotaMode", func(f serveFlags) bool { return f.service.quotaMode }, []flagCase[bool]{
		{"default", nil, nil, false, 0, ""},
		{"env", map[string]string{"SLUICE_QUOTA_MODE": "1"}, nil, true, 0, ""},
	})
}

func TestServeFlagLimits(t *testing.T) {
	testFlag(t, "limits", func(f serveFlags) limitsFlags { return f.limits }, []flagCase[limitsFlags]{
		{"defaults", nil, nil, limitsFlags{maxRate: 1e9, maxLogRate: 500, maxBurst: 1e9, maxHits: 1e9, maxPeriod: 366 * 24 * time.Hour,
			maxDescriptors: 16, maxDescriptorEntries: 16, memoryMaxKeys: 1_000_000, maxPermits: 10000,
			maxPermitLease: 10 * time.Minute, maxPermitsPerClient: 1000}, 0, ""},
		{"flags", nil, []string{"--max-rate", "5", "--max-log-rate", "4", "--max-burst", "6", "--max-hits", "7", "--max-period", "1h",
			"--max-descriptors", "8", "--max-descriptor-entries", "9", "--memory-max-keys", "0", "--max-permits", "10",
			"--max-permit-lease", "1h", "--max-permits-per-client", "20"},
			limitsFlags{maxRate: 5, maxLogRate: 4, maxBurst: 6, maxHits: 7, maxPeriod: time.Hour, maxDescriptors: 8, maxDescriptorEntries: 9, maxPermits: 10,
				maxPermitLease: time.Hour, maxPermitsPerClient: 20}, 0, ""},
		{"env", map[string]string{"SLUICE_MAX_RATE": "11", "SLUICE_MAX_LOG_RATE": "100000", "SLUICE_MEMORY_MAX_KEYS": "12", "SLUICE_MAX_PERMITS_PER_CLIENT": "13"}, []string{"--max-descriptors", "1", "--max-descriptor-entries", "1", "--max-period", "1ms"},
			limitsFlags{maxRate: 11, maxLogRate: 100_000, maxBurst: 1e9, maxHits: 1e9, maxPeriod: time.Millisecond, maxDescriptors: 1, maxDescriptorEntries: 1, memoryMaxKeys: 12, maxPermits: 10000,
				maxPermitLease: 10 * time.Minute, maxPermitsPerClient: 13}, 0, ""},
		{"permit lease past the library's bound", nil, []string{"--max-permit-lease", "25h"}, limitsFlags{}, 2, "--max-permit-lease 25h0m0s: must be within [10ms, 24h0m0s]"},
		{"permits per client 0", nil, []string{"--max-permits-per-client", "0"}, limitsFlags{}, 2, "--max-permits-per-client 0: must be >= 1"},
		{"rate 0", nil, []string{"--max-rate", "0"}, limitsFlags{}, 2, "--max-rate 0: must be >= 1"},
		{"log rate 0", nil, []string{"--max-log-rate", "0"}, limitsFlags{}, 2, "--max-log-rate 0: must be >= 1"},
		{"burst 0", nil, []string{"--max-burst", "0"}, limitsFlags{}, 2, "--max-burst 0: must be >= 1"},
		{"hits 0", nil, []string{"--max-hits", "0"}, limitsFlags{}, 2, "--max-hits 0: must be >= 1"},
		{"descriptors 0", nil, []string{"--max-descriptors", "0"}, limitsFlags{}, 2, "--max-descriptors 0: must be >= 1"},
		{"entries 0", nil, []string{"--max-descriptor-entries", "0"}, limitsFlags{}, 2, "--max-descriptor-entries 0: must be >= 1"},
		{"period below 1ms", nil, []string{"--max-period", "999us"}, limitsFlags{}, 2, "--max-period 999µs: must be >= 1ms"},
		{"permits 0", nil, []string{"--max-permits", "0"}, limitsFlags{}, 2, "--max-permits 0: must be within [1, 10000]"},
		{"permits past the library's bound", nil, []string{"--max-permits", "10001"}, limitsFlags{}, 2, "--max-permits 10001: must be within [1, 10000]"},
		{"memory keys negative", nil, []string{"--memory-max-keys=-1"}, limitsFlags{}, 2, "--memory-max-keys -1: must be >= 0"},
	})
}
