package hostile

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// permitTableClass: one client (from 127.0.0.2, an untrusted peer:
// --trusted-proxies 127.0.0.1/32) fills the memory store's table of
// permits (--memory-max-keys permitTable) with permits of distinct keys and
// the longest lease allowed, its X-Forwarded-For rotating:
//
//   - a lease of 24h (the library's longest) is refused, 400 naming the
//     lease (--max-permit-lease);
//   - of permitTable + permitMore acquires, at most
//     --max-permits-per-client are admitted;
//   - another client (127.0.0.3) then acquires a permit of a new key;
//   - the refusals write at most permitLogLines lines to the log.
var permitTableClass = class{
	name: "permit-table",
	flags: []flagArg{
		{"memory-max-keys", fmt.Sprint(permitTable)},
		{"trusted-proxies", "127.0.0.1/32"},
	},
	run: runPermitTable,
}

const (
	permitTable    = 3000
	permitMore     = 300
	permitLogLines = 5
)

// clientFrom is an HTTP client of keep-alive connections from the
// loopback address ip.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: dialTimeout}
	return &http.Client{Timeout: probeHang * 5, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1}}
}

func runPermitTable(t *testing.T, h *harness) {
	perClient := parseBytes(t, bound(t, "max-permits-per-client", "1000"))
	maxLease := bound(t, "max-permit-lease", "10m0s")
	attacker, victim := clientFrom("127.0.0.2"), clientFrom("127.0.0.3")
	defer attacker.CloseIdleConnections()
	defer victim.CloseIdleConnections()
	acquire := func(cl *http.Client, key, lease string, i int) (int, string, error) {
		req, _ := http.NewRequestWithContext(context.Background(), "POST", h.p.httpURL("/v1/acquire"),
			strings.NewReader(fmt.Sprintf(`{"key":%q,"max":1,"lease":%q}`, key, lease)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i%250+1))
		return statusOf(cl.Do(req))
	}

	code, body, err := acquire(attacker, "long-lease", "24h", 0)
	if err != nil || code != http.StatusBadRequest || !strings.Contains(body, "lease") {
		t.Errorf("a permit of a 24h lease: %d %s %v; want 400 naming the lease (--max-permit-lease)", code, trim(body), err)
	}
	logBefore := strings.Count(h.p.stderr.String(), "\n")
	admitted, refused, other := 0, 0, map[int]int{}
	for i := range permitTable + permitMore {
		code, body, err := acquire(attacker, fmt.Sprint("fill-", i), maxLease, i)
		switch {
		case err != nil:
			t.Fatalf("acquire %d: %v", i, err)
		case code == http.StatusOK:
			admitted++
		case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
			refused++
		default:
			other[code]++
			if other[code] == 1 {
				t.Logf("acquire %d: %d %s", i, code, trim(body))
			}
		}
	}
	lines := strings.Count(h.p.stderr.String(), "\n") - logBefore
	t.Logf("one client, %d acquires of distinct keys, lease %s: %d admitted, %d refused, others %v; %d lines logged", permitTable+permitMore, maxLease, admitted, refused, other, lines)
	if int64(admitted) > perClient {
		t.Errorf("one client holds %d permits of the table's %d (--memory-max-keys), more than --max-permits-per-client %d", admitted, permitTable, perClient)
	}
	if lines > permitLogLines {
		t.Errorf("%d refused acquires wrote %d lines to the log, want at most %d", refused, lines, permitLogLines)
	}
	code, body, err = acquire(victim, "victim-"+fmt.Sprint(time.Now().UnixNano()), "30s", 0)
	if err != nil || code != http.StatusOK {
		t.Errorf("another client's permit of a new key, while the first holds what it could: %d %s %v; want 200", code, trim(body), err)
	}
}
