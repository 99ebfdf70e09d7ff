package hostile

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// rereadClass: named pipes put at the paths the service re-reads while it
// runs, whose opening blocks until a writer comes (none does).
//
//   - the admin token file (--admin-token-file): authenticated admin
//     requests, two at once, are answered with the tokens in force within
//     rereadBound, and a regular file put back is read (its new token is
//     accepted within rereadBound);
//   - the configuration file (--config, --reload-interval 100ms, SIGHUP):
//     once a regular file with a new rule replaces the pipe and SIGHUP is
//     sent, the rule is in force within rereadBound.
var rereadClass = class{
	name:  "reread",
	flags: []flagArg{adminFlag, {"reload-interval", "100ms"}},
	start: func(t *testing.T, flags []flagArg) *proc {
		tokens := filepath.Join(t.TempDir(), "tokens")
		writeRegular(t, tokens, "ops:"+rereadToken+"\n")
		return start(t, append(flags, flagArg{"admin-token-file", tokens}))
	},
	run: runReread,
}

const (
	rereadToken    = "0123456789abcdef0123456789abcdef"
	rereadNewToken = "fedcba9876543210fedcba9876543210"
	rereadBound    = 10 * time.Second
)

// argValue is the value of the process' flag --name.
func (p *proc) argValue(name string) string {
	v := ""
	for _, a := range p.cmd.Args {
		if s, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			v = s
		}
	}
	return v
}

// writeRegular puts a regular file holding s at path, by a rename.
func writeRegular(t *testing.T, path, s string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// pipeAt puts a named pipe at path, by a rename.
func pipeAt(t *testing.T, path string) {
	t.Helper()
	tmp := path + ".pipe"
	if err := syscall.Mkfifo(tmp, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func runReread(t *testing.T, h *harness) {
	tokens, cfg := h.p.argValue("admin-token-file"), h.p.argValue("config")
	if tokens == "" || cfg == "" {
		t.Fatalf("no --admin-token-file or --config in %q", h.p.cmd.Args)
	}
	cl := hostileClient(rereadBound)
	defer cl.CloseIdleConnections()
	admin := func(token string) error {
		req, _ := http.NewRequest("GET", "http://"+h.p.admin+"/admin/v1/config", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		code, body, err := statusOf(cl.Do(req))
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("status %d %s", code, trim(body))
		}
		return err
	}
	if err := admin(rereadToken); err != nil {
		t.Fatalf("an admin request with the token: %v", err)
	}

	pipeAt(t, tokens)
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- admin(rereadToken) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("a named pipe at --admin-token-file: an admin request with the token in force: %v (want 200 within %v)", err, rereadBound)
		}
	}
	writeRegular(t, tokens, "ops:"+rereadNewToken+"\n")
	if err := admin(rereadNewToken); err != nil {
		t.Errorf("a regular token file back in place of the pipe: an admin request with its token: %v (want 200 within %v)", err, rereadBound)
	}

	pipeAt(t, cfg)
	syscall.Kill(h.p.pid(), syscall.SIGHUP)
	time.Sleep(300 * time.Millisecond) // a reload or two of the pipe
	writeRegular(t, cfg, hostileConfig+"  - key: reread\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	syscall.Kill(h.p.pid(), syscall.SIGHUP)
	if err := h.ruleInForce(desc("reread", "x"), rereadBound); err != nil {
		t.Errorf("a named pipe at --config, then a regular file with a new rule and SIGHUP: %v", err)
	} else {
		t.Logf("named pipes at the token file and the configuration: admin answered, the files put back were read")
	}
}

// ruleInForce sends d until it is denied (its rule, of 1 an hour, is in
// force), for at most within.
func (h *harness) ruleInForce(d *rlpb.RateLimitDescriptor, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := rpcCtx(probeHang)
		resp, err := h.p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "hostile", Descriptors: []*rlpb.RateLimitDescriptor{d}})
		cancel()
		if err == nil && resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the new rule was not in force within %v (last: %v, %v)", within, resp.GetOverallCode(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
