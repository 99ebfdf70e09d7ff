package hostile

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"
)

// identityClass: spoofed and malformed client addresses on GET /v1/auth,
// whose remote_address limit is 3 an hour (hostileConfig). The process
// trusts only 127.0.0.1 as a proxy; an untrusted peer connects from
// another loopback address (127.0.0.2 and up). From an untrusted peer the
// headers do not change the key: the fourth request is denied whatever the
// headers say. From the trusted proxy the client address is the header's,
// IPv6 grouped by /64; an address that cannot be parsed gets the
// --auth-no-identity answer (deny on memory, a named shared key on Redis),
// never an unlimited pass.
var identityClass = class{
	name: "identity",
	flags: []flagArg{
		{"auth-domain", "hostile"},
		{"trusted-proxies", "127.0.0.1/32"},
		{"auth-no-identity", noIdentity["memory"]},
	},
	redisFlags: []flagArg{{"auth-no-identity", noIdentity["redis"]}}, // the last one given wins
	run:        runIdentity,
}

// The --auth-no-identity of each store's run: both must limit.
var noIdentity = map[string]string{"memory": "deny", "redis": "key:hostile-no-identity"}

const identityLimit = 3 // requests_per_unit of remote_address

// authFrom is an HTTP client whose connections come from the loopback
// address ip.
func authFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: dialTimeout}
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// authCase sends identityLimit+1 requests from one peer; headers(i) are the
// identity headers of request i (each value one header line).
type authCase struct {
	name    string
	peer    string
	headers func(i int) map[string][]string
	// shared: the requests share one bucket, so the last is denied;
	// otherwise at least one of them must be refused (no identity).
	shared bool
	// distinct, when set, is the headers of one more request that must
	// have a bucket of its own (admitted).
	distinct map[string][]string
}

func xff(vs ...string) map[string][]string { return map[string][]string{"X-Forwarded-For": vs} }

func identityCases() []authCase {
	untrusted := func(n int) string { return fmt.Sprintf("127.0.0.%d", n+2) }
	return []authCase{
		{name: "X-Forwarded-For rotated by an untrusted peer", peer: untrusted(0), shared: true,
			headers: func(i int) map[string][]string { return xff(fmt.Sprintf("198.51.100.%d", i+1)) }},
		{name: "X-Real-Ip rotated by an untrusted peer", peer: untrusted(1), shared: true,
			headers: func(i int) map[string][]string {
				return map[string][]string{"X-Real-Ip": {fmt.Sprintf("198.51.100.%d", i+1)}}
			}},
		{name: "Forwarded rotated by an untrusted peer", peer: untrusted(2), shared: true,
			headers: func(i int) map[string][]string {
				return map[string][]string{"Forwarded": {fmt.Sprintf("for=198.51.100.%d", i+1)}}
			}},
		{name: "two X-Forwarded-For lines rotated by an untrusted peer", peer: untrusted(3), shared: true,
			headers: func(i int) map[string][]string { return xff(fmt.Sprintf("198.51.100.%d", i+1), "127.0.0.1") }},
		{name: "no identity header from an untrusted peer", peer: untrusted(4), shared: true,
			headers: func(int) map[string][]string { return nil }},
		{name: "garbage X-Forwarded-For from an untrusted peer", peer: untrusted(5), shared: true,
			headers: func(i int) map[string][]string {
				return xff([]string{"not-an-ip", "999.1.1.1", "::::", "1.2.3.4.5"}[i%4])
			}},
		{name: "X-Forwarded-For of the trusted proxy", peer: "127.0.0.1", shared: true,
			headers:  func(int) map[string][]string { return xff("203.0.113.7") },
			distinct: xff("203.0.113.8")},
		{name: "client-chosen hops left of the trusted proxy's", peer: "127.0.0.1", shared: true,
			headers: func(i int) map[string][]string { return xff(fmt.Sprintf("198.51.100.%d, 203.0.113.9", i+1)) }},
		{name: "IPv6 addresses of one /64", peer: "127.0.0.1", shared: true,
			headers: func(i int) map[string][]string {
				return xff([]string{"2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::3", "2001:0db8:0001:0002:0:0:0:4"}[i%4])
			},
			distinct: xff("2001:db8:1:3::1")},
		{name: "IPv4 and IPv4-mapped IPv6 spellings", peer: "127.0.0.1", shared: true,
			headers: func(i int) map[string][]string { return xff([]string{"203.0.113.10", "::ffff:203.0.113.10"}[i%2]) }},
		{name: "garbage X-Forwarded-For from the trusted proxy", peer: "127.0.0.1",
			headers: func(i int) map[string][]string {
				return xff([]string{"not-an-ip", "999.1.1.1", "203.0.113.300", "::::"}[i%4])
			}},
		{name: "unknown and obfuscated identities from the trusted proxy", peer: "127.0.0.1",
			headers: func(i int) map[string][]string {
				return map[string][]string{"X-Forwarded-For": {"unknown"}, "Forwarded": {fmt.Sprintf("for=_hidden%d", i)}, "X-Real-Ip": {"-"}}
			}},
	}
}

func runIdentity(t *testing.T, h *harness) {
	t.Logf("--auth-no-identity %s", noIdentity[h.store])
	get := func(cl *http.Client, hs map[string][]string) (int, error) {
		req, _ := http.NewRequest("GET", h.p.httpURL("/v1/auth"), nil)
		for k, vs := range hs {
			req.Header[k] = vs
		}
		code, _, err := statusOf(cl.Do(req))
		return code, err
	}
	for _, c := range identityCases() {
		cl := authFrom(c.peer)
		var codes []int
		failed := false
		for i := range identityLimit + 1 {
			code, err := get(cl, c.headers(i))
			if err != nil {
				t.Errorf("%s: request %d: %v", c.name, i+1, err)
				failed = true
				break
			}
			codes = append(codes, code)
		}
		if failed {
			continue
		}
		want := append(slices.Repeat([]int{200}, identityLimit), 429)
		switch {
		case c.shared && !slices.Equal(codes, want):
			t.Errorf("%s (from %s): statuses %v, want %v (one bucket, %d an hour)", c.name, c.peer, codes, want, identityLimit)
		case !c.shared && !refusedSome(codes):
			t.Errorf("%s (from %s): statuses %v, want the --auth-no-identity answer (a 400, 403 or 429 at the latest on request %d), never unlimited", c.name, c.peer, codes, identityLimit+1)
		}
		if c.distinct != nil {
			if code, err := get(cl, c.distinct); err != nil || code != 200 {
				t.Errorf("%s: a different client %v: %d %v, want 200 (a bucket of its own)", c.name, c.distinct, code, err)
			}
		}
	}
}

// refusedSome reports whether codes hold a refusal and nothing but 200 and
// refusals.
func refusedSome(codes []int) bool {
	some := false
	for _, c := range codes {
		switch c {
		case 200:
		case 400, 403, 429:
			some = true
		default:
			return false
		}
	}
	return some
}
