package main

import (
	"strings"
	"testing"
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

func TestServeFlagGRPCWorkers(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		want     int
		wantCode int
		wantErr  string
	}{
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, code, msg := parseServe(t, tt.env, tt.args...)
			if code != tt.wantCode || !strings.Contains(msg, tt.wantErr) {
				t.Errorf("serve %v (env %v): exit %d %q, want %d and %q", tt.args, tt.env, code, msg, tt.wantCode, tt.wantErr)
			}
			if got := f.grpcWorkers; code == 0 && got != tt.want {
				t.Errorf("serve %v (env %v): grpcWorkers = %d, want %d", tt.args, tt.env, got, tt.want)
			}
		})
	}
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
