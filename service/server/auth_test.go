package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/clientip"
)

// auth sends GET /v1/auth from the socket peer remote with the header
// lines hdr (name, value pairs; a repeated name adds a line).
func auth(t testing.TB, h http.Handler, remote string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest("GET", "/v1/auth", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestAuth(t *testing.T) {
	s, _ := newTestServer(t)
	// 5 per 30s per API key (sliding log); the path /healthz is unlimited.
	for i := range 5 {
		w := auth(t, s, "203.0.113.1:1", "X-Api-Key", "k1", "X-Original-URI", "/healthz?x=1")
		if w.Code != 200 || w.Header().Get("RateLimit-Remaining") != fmt.Sprint(4-i) || w.Header().Get("RateLimit-Limit") != "5" {
			t.Errorf("auth %d = %d %v, want 200 with RateLimit-Remaining %d", i+1, w.Code, w.Header(), 4-i)
		}
	}
	w := auth(t, s, "203.0.113.1:1", "X-Api-Key", "k1")
	if w.Code != 429 || w.Header().Get("Retry-After") != "30" || w.Header().Get("RateLimit-Remaining") != "0" {
		t.Errorf("6th auth = %d %v, want 429 with Retry-After 30", w.Code, w.Header())
	}
	// For nginx: denials as 403.
	s403, _ := newTestServer(t, WithAuth(Auth{Domain: "example", Sources: DefaultAuth().Sources, DenyStatus: 403}))
	for range 5 {
		auth(t, s403, "203.0.113.1:1", "X-Api-Key", "k")
	}
	if w := auth(t, s403, "203.0.113.1:1", "X-Api-Key", "k"); w.Code != 403 || w.Header().Get("Retry-After") == "" {
		t.Errorf("denial with DenyStatus 403 = %d %v, want 403 with Retry-After", w.Code, w.Header())
	}
}

// TestAuthSpoofing sends what a hostile client can make arrive at
// /v1/auth with the default configuration (remote_address: 20 a minute):
// no variation of the forwarding headers buys a fresh quota, and no
// request goes unlimited.
func TestAuthSpoofing(t *testing.T) {
	tests := []struct {
		name   string
		remote string
		lines  func(i int) []string // header name, value pairs of request i
	}{
		{
			// A client that reaches sluice directly claims to be a proxy.
			name: "XFF from an untrusted peer", remote: "198.51.100.7:5000",
			lines: func(i int) []string { return []string{"X-Forwarded-For", fmt.Sprintf("10.1.0.%d", i)} },
		},
		{
			name: "X-Real-Ip from an untrusted peer", remote: "198.51.100.7:5000",
			lines: func(i int) []string { return []string{"X-Real-Ip", fmt.Sprintf("10.1.0.%d", i)} },
		},
		{
			// The client's own X-Forwarded-For line arrives before the
			// line its (trusted) proxy adds.
			name: "client's XFF line before the proxy's", remote: "127.0.0.1:5000",
			lines: func(i int) []string {
				return []string{"X-Forwarded-For", fmt.Sprintf("10.1.0.%d", i), "X-Forwarded-For", "203.0.113.9"}
			},
		},
		{
			name: "client's hops prepended in the proxy's line", remote: "127.0.0.1:5000",
			lines: func(i int) []string { return []string{"X-Forwarded-For", fmt.Sprintf("10.1.0.%d, 203.0.113.9", i)} },
		},
		{
			// The proxy sets only X-Real-Ip and passes the client's
			// X-Forwarded-For through: the two disagree.
			name: "proxy sets only X-Real-Ip", remote: "127.0.0.1:5000",
			lines: func(i int) []string {
				return []string{"X-Forwarded-For", fmt.Sprintf("10.1.0.%d", i), "X-Real-Ip", "203.0.113.9"}
			},
		},
		{
			name: "IPv6 addresses of one /64", remote: "127.0.0.1:5000",
			lines: func(i int) []string { return []string{"X-Forwarded-For", fmt.Sprintf("2001:db8:1:2::%x", i+1)} },
		},
		{
			name: "unparseable address", remote: "127.0.0.1:5000",
			lines: func(i int) []string { return []string{"X-Forwarded-For", fmt.Sprintf("client-%d", i)} },
		},
		{name: "no header from a trusted proxy", remote: "127.0.0.1:5000", lines: func(int) []string { return nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			admitted := 0
			for i := range 40 {
				if w := auth(t, s, tt.remote, tt.lines(i)...); w.Code == 200 {
					admitted++
				}
			}
			if admitted > 20 {
				t.Errorf("%d of 40 requests admitted, want at most 20 (remote_address: 20 a minute)", admitted)
			}
		})
	}
}

func TestIdentityClient(t *testing.T) {
	trusted, err := clientip.ParsePrefixes("127.0.0.0/8", "::1", "10.0.0.0/8", "2001:db8:ff::/48")
	if err != nil {
		t.Fatal(err)
	}
	xffReal := []string{"X-Forwarded-For", "X-Real-Ip"}
	var manyTrusted, clientPrepended []string
	for range clientip.MaxHops + 1 {
		manyTrusted = append(manyTrusted, "X-Forwarded-For", "10.0.0.7")
	}
	for range 1000 {
		clientPrepended = append(clientPrepended, "X-Forwarded-For", "garbage, 6.6.6.6")
	}
	clientPrepended = append(clientPrepended, "Forwarded", strings.Repeat("x", 100000)) // not read: not a source header
	clientPrepended = append(clientPrepended, "X-Forwarded-For", "203.0.113.9")
	tests := []struct {
		name    string
		remote  string
		headers []string // the source's headers; xffReal when nil
		lines   []string // name, value pairs
		bits    int
		want    string // key, or "error: " and the error
	}{
		{name: "untrusted peer ignores spoofed XFF", remote: "198.51.100.7:1", lines: []string{"X-Forwarded-For", "203.0.113.9"}, want: "198.51.100.7"},
		{name: "untrusted peer ignores spoofed X-Real-Ip", remote: "198.51.100.7:1", lines: []string{"X-Real-Ip", "203.0.113.9"}, want: "198.51.100.7"},
		{name: "untrusted peer without headers", remote: "198.51.100.7:1", want: "198.51.100.7"},
		{name: "untrusted IPv6 peer grouped", remote: "[2001:db8:1:2:3::4]:1", bits: 64, want: "2001:db8:1:2::/64"},
		{name: "one trusted hop", remote: "127.0.0.1:1", lines: []string{"X-Forwarded-For", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "XFF lines joined, right to left", remote: "127.0.0.1:1",
			lines: []string{"X-Forwarded-For", "6.6.6.6, 203.0.113.9", "X-Forwarded-For", "10.2.2.2"}, want: "203.0.113.9"},
		{name: "client's own XFF line first", remote: "127.0.0.1:1",
			lines: []string{"X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "XFF all trusted: leftmost", remote: "127.0.0.1:1", lines: []string{"X-Forwarded-For", "10.9.9.9, 10.2.2.2"}, want: "10.9.9.9"},
		{name: "XFF with ports", remote: "127.0.0.1:1", lines: []string{"X-Forwarded-For", "[2001:db8:2::7]:5000, 10.0.0.3:8080"}, bits: 128, want: "2001:db8:2::7"},
		{name: "X-Real-Ip from a trusted proxy", remote: "127.0.0.1:1", lines: []string{"X-Real-Ip", "203.0.113.5"}, want: "203.0.113.5"},
		{name: "XFF and X-Real-Ip agree", remote: "127.0.0.1:1",
			lines: []string{"X-Forwarded-For", "6.6.6.6, 203.0.113.5", "X-Real-Ip", "203.0.113.5"}, want: "203.0.113.5"},
		{name: "X-Real-Ip is a trusted balancer", remote: "127.0.0.1:1",
			lines: []string{"X-Forwarded-For", "203.0.113.5, 10.9.9.9", "X-Real-Ip", "10.9.9.9"}, want: "203.0.113.5"},
		{name: "XFF and X-Real-Ip disagree", remote: "127.0.0.1:1",
			lines: []string{"X-Forwarded-For", "6.6.6.6", "X-Real-Ip", "203.0.113.5"},
			want:  "error: no client identity: X-Forwarded-For names client 6.6.6.6 but X-Real-Ip names 203.0.113.5 (list in --auth-descriptors only the headers your proxy sets)"},
		{name: "Forwarded quoted IPv6 with port", remote: "[::1]:1", headers: []string{"Forwarded"},
			lines: []string{"Forwarded", `for=192.0.2.1, for="[2001:db8:cafe:1:2::17]:4711";proto=https`}, bits: 64, want: "2001:db8:cafe:1::/64"},
		{name: "Forwarded lines with IPv4 ports", remote: "127.0.0.1:1", headers: []string{"Forwarded"},
			lines: []string{"Forwarded", "for=6.6.6.6", "Forwarded", `for="203.0.113.60:8080", for="10.1.1.1:_p"`}, want: "203.0.113.60"},
		{name: "Forwarded obfuscated", remote: "127.0.0.1:1", headers: []string{"Forwarded"}, lines: []string{"Forwarded", "for=_hidden"},
			want: `error: no client identity: Forwarded hop "_hidden" reported by trusted 127.0.0.1: node "_hidden" is obfuscated`},
		{name: "Forwarded malformed", remote: "127.0.0.1:1", headers: []string{"Forwarded"}, lines: []string{"Forwarded", `for="1.2.3.4`},
			want: `error: no client identity: Forwarded from trusted proxy 127.0.0.1: quoted string at offset 4 is not closed`},
		{name: "IPv6 /64 grouping", remote: "127.0.0.1:1", lines: []string{"X-Forwarded-For", "2001:db8:1:2:aaaa:bbbb:cccc:dddd"}, bits: 64, want: "2001:db8:1:2::/64"},
		{name: "IPv6 /48 grouping", remote: "127.0.0.1:1", lines: []string{"X-Forwarded-For", "2001:db8:1:2::9"}, bits: 48, want: "2001:db8:1::/48"},
		{name: "IPv6 by address", remote: "127.0.0.1:1", lines: []string{"X-Forwarded-For", "2001:DB8:1:2:0::9"}, bits: 128, want: "2001:db8:1:2::9"},
		{name: "IPv4 not grouped", remote: "127.0.0.1:1", lines: []string{"X-Forwarded-For", "203.0.113.9"}, bits: 64, want: "203.0.113.9"},
		{name: "IPv4-mapped is IPv4", remote: "127.0.0.1:1", lines: []string{"X-Forwarded-For", "::ffff:203.0.113.9"}, bits: 64, want: "203.0.113.9"},
		{name: "mapped trusted peer", remote: "[::ffff:127.0.0.1]:1", lines: []string{"X-Forwarded-For", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "zone stripped", remote: "127.0.0.1:1", lines: []string{"X-Forwarded-For", "fe80::1%eth0"}, bits: 128, want: "fe80::1"},
		{name: "unparseable", remote: "127.0.0.1:1", lines: []string{"X-Forwarded-For", "not-an-ip"},
			want: `error: no client identity: X-Forwarded-For hop "not-an-ip" reported by trusted 127.0.0.1: node "not-an-ip" is not an address`},
		{name: "unknown", remote: "127.0.0.1:1", lines: []string{"X-Forwarded-For", "unknown, 10.0.0.2"},
			want: `error: no client identity: X-Forwarded-For hop "unknown" reported by trusted 10.0.0.2: node is "unknown"`},
		{name: "X-Real-Ip list", remote: "127.0.0.1:1", lines: []string{"X-Real-Ip", "1.2.3.4, 5.6.7.8"},
			want: `error: no client identity: X-Real-Ip hop "1.2.3.4, 5.6.7.8" reported by trusted 127.0.0.1: node "1.2.3.4, 5.6.7.8" is not an address`},
		{name: "no header from a trusted proxy", remote: "127.0.0.1:1",
			want: "error: no client identity: trusted proxy 127.0.0.1 sent none of X-Forwarded-For, X-Real-Ip"},
		{name: "only empty XFF elements", remote: "127.0.0.1:1", lines: []string{"X-Forwarded-For", " , ,"},
			want: "error: no client identity: trusted proxy 127.0.0.1 sent none of X-Forwarded-For, X-Real-Ip"},
		{name: "bad socket peer", remote: "@", want: `error: no client identity: socket peer "@": not an address`},
		{name: "too many trusted hops", remote: "127.0.0.1:1", lines: manyTrusted,
			want: "error: no client identity: X-Forwarded-For from trusted proxy 10.0.0.7: proxy chain too long: more than 32 trusted hops"},
		{name: "client-prepended hops never read", remote: "127.0.0.1:1", lines: clientPrepended, want: "203.0.113.9"},
		{name: "custom single-address header", remote: "127.0.0.1:1", headers: []string{"Cf-Connecting-Ip"},
			lines: []string{"Cf-Connecting-Ip", "203.0.113.77"}, want: "203.0.113.77"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/v1/auth", nil)
			r.RemoteAddr = tt.remote
			for i := 0; i+1 < len(tt.lines); i += 2 {
				r.Header.Add(tt.lines[i], tt.lines[i+1])
			}
			src := Source{Key: "remote_address", Headers: tt.headers, Address: true}
			if src.Headers == nil {
				src.Headers = xffReal
			}
			got, _, err := Identity{Trusted: trusted, IPv6Bits: tt.bits}.client(r, src)
			if err != nil {
				got = "error: " + err.Error()
				if !errors.Is(err, errNoIdentity) {
					t.Errorf("error %v does not wrap errNoIdentity", err)
				}
			}
			if got != tt.want {
				t.Errorf("client(RemoteAddr %q, %q)\n got %s\nwant %s", tt.remote, tt.lines, got, tt.want)
			}
		})
	}
}

// TestAuthNoIdentity checks the answers to a request without a client
// address: denied, or counted on one shared key.
func TestAuthNoIdentity(t *testing.T) {
	deny := DefaultAuth()
	s, _ := newTestServer(t, WithAuth(deny))
	w := auth(t, s, "127.0.0.1:1", "X-Forwarded-For", "garbage")
	var p problemBody
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != 429 || p.Field != "remote_address" ||
		!strings.Contains(p.Detail, `no client identity: X-Forwarded-For hop "garbage"`) || w.Header().Get("Retry-After") != "" {
		t.Errorf("no identity, deny = %d %v %s, want 429 without Retry-After, naming the hop", w.Code, w.Header(), w.Body)
	}
	deny.DenyStatus = 403
	s, _ = newTestServer(t, WithAuth(deny))
	if w := auth(t, s, "127.0.0.1:1"); w.Code != 403 {
		t.Errorf("no identity, deny with DenyStatus 403 = %d, want 403", w.Code)
	}

	shared := DefaultAuth()
	shared.Identity.NoIdentityKey = "unidentified"
	s, _ = newTestServer(t, WithAuth(shared))
	var got []int
	for i := range 22 {
		hdr := []string{"X-Forwarded-For", fmt.Sprintf("bad-%d", i)}
		if i%2 == 1 {
			hdr = nil // no header at all
		}
		got = append(got, auth(t, s, "127.0.0.1:1", hdr...).Code)
	}
	want := make([]int, 22)
	for i := range want {
		want[i] = 200
		if i >= 20 {
			want[i] = 429
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("shared no-identity key: statuses (-want +got):\n%s", diff)
	}
	// Identified clients keep their own quota.
	if w := auth(t, s, "127.0.0.1:1", "X-Forwarded-For", "203.0.113.1"); w.Code != 200 {
		t.Errorf("identified client after the shared key is used up = %d, want 200", w.Code)
	}
}

func TestParseAuthSources(t *testing.T) {
	got, err := ParseAuthSources("ip=x-forwarded-for, path=X-Original-URI|x-forwarded-uri, remote_address=cf-connecting-ip, k=x-api-key")
	want := []Source{
		{"ip", []string{"X-Forwarded-For"}, true},
		{"path", []string{"X-Original-Uri", "X-Forwarded-Uri"}, false},
		{"remote_address", []string{"Cf-Connecting-Ip"}, true},
		{"k", []string{"X-Api-Key"}, false},
	}
	if err != nil || !cmp.Equal(got, want) {
		t.Errorf("ParseAuthSources = %v, %v, want %v", got, err, want)
	}
	for _, bad := range []string{"", "ip", "=X", "ip="} {
		if _, err := ParseAuthSources(bad); err == nil {
			t.Errorf("ParseAuthSources(%q): no error", bad)
		}
	}
}

func TestParseNoIdentity(t *testing.T) {
	tests := []struct {
		give, want, err string
	}{
		{give: "deny", want: ""},
		{give: "key:unidentified", want: "unidentified"},
		{give: "key:" + strings.Repeat("a", MaxNoIdentityKey), want: strings.Repeat("a", MaxNoIdentityKey)},
		{give: "key:" + strings.Repeat("a", MaxNoIdentityKey+1), err: "NAME must have 1 to 64 characters"},
		{give: "key:", err: "NAME must have 1 to 64 characters"},
		{give: "key:a b", err: `NAME has ' '`},
		{give: "key:192.0.2.1", err: "NAME is an address"},
		{give: "key:2001:db8::1", err: `NAME has ':'`},
		{give: "allow", err: "want deny or key:NAME"},
	}
	for _, tt := range tests {
		got, err := ParseNoIdentity(tt.give)
		if got != tt.want || (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("ParseNoIdentity(%q) = %q, %v; want %q, error containing %q", tt.give, got, err, tt.want, tt.err)
		}
	}
}

// FuzzAuthIdentity sends arbitrary forwarding headers from a trusted and
// an untrusted peer: never a panic, always a key or a no-identity error,
// and a key is a canonical address or prefix.
func FuzzAuthIdentity(f *testing.F) {
	for _, s := range [][2]string{
		{"203.0.113.9", ""}, {"6.6.6.6, 203.0.113.9", "203.0.113.9"}, {"[2001:db8::1]:80, 10.0.0.1", ""},
		{"unknown", ""}, {"", "::ffff:1.2.3.4"}, {" , ,", "fe80::1%eth0"}, {"_x", "1.2.3.4:99999"},
	} {
		f.Add(s[0], s[1], "127.0.0.1:1")
	}
	f.Add("1.2.3.4", "5.6.7.8", "[::1]:9")
	f.Add("1.2.3.4", "", "garbage")
	trusted, _ := clientip.ParsePrefixes("127.0.0.0/8", "::1", "10.0.0.0/8")
	id := Identity{Trusted: trusted, IPv6Bits: 64}
	src := Source{Key: "remote_address", Headers: []string{"X-Forwarded-For", "X-Real-Ip"}, Address: true}
	f.Fuzz(func(t *testing.T, xff, xrealip, remote string) {
		r := httptest.NewRequest("GET", "/v1/auth", nil)
		r.RemoteAddr = remote
		for l := range strings.SplitSeq(xff, "\n") {
			r.Header.Add("X-Forwarded-For", l)
		}
		if xrealip != "" {
			r.Header.Add("X-Real-Ip", xrealip)
		}
		key, _, err := id.client(r, src)
		if err != nil {
			if key != "" || !errors.Is(err, errNoIdentity) {
				t.Fatalf("client = %q, %v; want an error wrapping errNoIdentity and no key", key, err)
			}
			return
		}
		if a, perr := clientip.ParseNode(key); perr == nil {
			if a.String() != key || a.Is6() {
				t.Fatalf("key %q is not a canonical IPv4 address (IPv6 is grouped by /64)", key)
			}
		} else if !strings.HasSuffix(key, "::/64") && !strings.HasSuffix(key, "/64") {
			t.Fatalf("key %q is neither an IPv4 address nor a /64", key)
		}
	})
}

// BenchmarkIdentityClient measures establishing the client address: a
// typical nginx request, and the worst that 1 MiB of headers from a
// trusted proxy can ask (the walk stops after 32 hops or 256 list elements;
// a Forwarded line longer than 16 KiB is refused unparsed, one of 16 KiB
// is parsed once).
func BenchmarkIdentityClient(b *testing.B) {
	trusted, _ := clientip.ParsePrefixes(DefaultTrustedProxies...)
	id := Identity{Trusted: trusted, IPv6Bits: 64}
	src := DefaultAuth().Sources[0]
	for _, bb := range []struct {
		name  string
		lines []string
	}{
		{"nginx", []string{"X-Forwarded-For", "6.6.6.6, 203.0.113.9", "X-Real-Ip", "203.0.113.9"}},
		{"ipv6", []string{"X-Forwarded-For", "2001:db8:1:2::77"}},
		{"commas=1MiB", []string{"X-Forwarded-For", strings.Repeat(",", 1<<20) + "127.0.0.1"}},
		{"trusted-hops=1MiB", []string{"X-Forwarded-For", strings.Repeat("127.0.0.1,", 1<<20/10)}},
	} {
		b.Run(bb.name, func(b *testing.B) {
			r := httptest.NewRequest("GET", "/v1/auth", nil)
			r.RemoteAddr = "127.0.0.1:5000"
			for i := 0; i+1 < len(bb.lines); i += 2 {
				r.Header.Add(bb.lines[i], bb.lines[i+1])
			}
			b.ReportAllocs()
			for b.Loop() {
				id.client(r, src)
			}
		})
	}
	for _, n := range []int{clientip.MaxForwardedLine, 1 << 20} {
		b.Run(fmt.Sprintf("forwarded=%dKiB", n>>10), func(b *testing.B) {
			r := httptest.NewRequest("GET", "/v1/auth", nil)
			r.RemoteAddr = "127.0.0.1:5000"
			last := "for=203.0.113.9"
			r.Header.Add("Forwarded", strings.Repeat(`for="[2001:db8::1]:1", `, (n-len(last))/24)+last)
			src := Source{Key: "remote_address", Headers: []string{"Forwarded"}, Address: true}
			b.ReportAllocs()
			for b.Loop() {
				id.client(r, src)
			}
		})
	}
}
