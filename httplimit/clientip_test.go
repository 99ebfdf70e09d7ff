package httplimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/clientip"
)

func mustPrefixes(t testing.TB, s ...string) []netip.Prefix {
	t.Helper()
	p, err := httplimit.ParsePrefixes(s...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestChainHeaderNames: the header names ClientIP.Header takes are the
// ones the chain walk reads.
func TestChainHeaderNames(t *testing.T) {
	for _, tt := range []struct{ give, want string }{
		{httplimit.HeaderXForwardedFor, clientip.XForwardedFor},
		{httplimit.HeaderForwarded, clientip.Forwarded},
		{httplimit.HeaderXRealIP, clientip.XRealIP},
	} {
		if tt.give != tt.want || http.CanonicalHeaderKey(tt.give) != tt.give {
			t.Errorf("header %q, want %q in canonical form", tt.give, tt.want)
		}
	}
}

func TestClientIPAddr(t *testing.T) {
	trusted := mustPrefixes(t, "10.0.0.0/8", "2001:db8:1::/48", "192.0.2.1")
	tests := []struct {
		name   string
		remote string
		header string // ClientIP.Header
		values []string
		want   string // address, or "error: ..." prefix
	}{
		{name: "untrusted peer, no header", remote: "198.51.100.7:1234", want: "198.51.100.7"},
		{name: "untrusted peer ignores spoofed XFF", remote: "198.51.100.7:1234", values: []string{"1.2.3.4"}, want: "198.51.100.7"},
		{name: "untrusted peer ignores spoofed Forwarded", remote: "198.51.100.7:1234", header: "Forwarded", values: []string{"for=1.2.3.4"}, want: "198.51.100.7"},
		{name: "trusted peer, no header", remote: "10.1.1.1:80", want: "10.1.1.1"},
		{name: "trusted peer, one hop", remote: "10.1.1.1:80", values: []string{"203.0.113.9"}, want: "203.0.113.9"},
		{name: "client-prepended hops never reached", remote: "10.1.1.1:80", values: []string{"6.6.6.6, 203.0.113.9"}, want: "203.0.113.9"},
		{name: "trusted hops skipped from the right", remote: "10.1.1.1:80", values: []string{"6.6.6.6, 203.0.113.9, 10.2.2.2", "192.0.2.1"}, want: "203.0.113.9"},
		{name: "all trusted: leftmost", remote: "10.1.1.1:80", values: []string{"10.9.9.9, 10.2.2.2"}, want: "10.9.9.9"},
		{name: "XFF with ports and IPv6", remote: "[2001:db8:1::5]:443", values: []string{"[2001:db8:2::7]:5000, 10.0.0.3:8080"}, want: "2001:db8:2::7"},
		{name: "XFF bare IPv6", remote: "10.0.0.1:1", values: []string{"2001:db8:2::7"}, want: "2001:db8:2::7"},
		{name: "mapped IPv4 peer", remote: "[::ffff:10.0.0.1]:1", values: []string{"203.0.113.9"}, want: "203.0.113.9"},
		{name: "garbage from trusted proxy", remote: "10.0.0.1:1", values: []string{"not-an-ip"}, want: `error: httplimit: no rate-limit key: X-Forwarded-For hop "not-an-ip" reported by trusted 10.0.0.1: node "not-an-ip" is not an address`},
		{name: "unknown stops the walk", remote: "10.0.0.1:1", values: []string{"unknown, 10.0.0.2"}, want: `error: httplimit: no rate-limit key: X-Forwarded-For hop "unknown" reported by trusted 10.0.0.2: node is "unknown"`},
		{name: "Forwarded", remote: "10.0.0.1:1", header: "Forwarded", values: []string{`for=6.6.6.6, for=203.0.113.60;proto=http;by=203.0.113.43`, `For="[2001:db8:1::17]:4711"`}, want: "203.0.113.60"},
		{name: "Forwarded quoted IPv6", remote: "10.0.0.1:1", header: "Forwarded", values: []string{`for="[2001:db8:cafe::17]:4711"`}, want: "2001:db8:cafe::17"},
		{name: "Forwarded obfuscated", remote: "10.0.0.1:1", header: "Forwarded", values: []string{`for=_hidden`}, want: `error: httplimit: no rate-limit key: Forwarded hop "_hidden" reported by trusted 10.0.0.1: node "_hidden" is obfuscated`},
		{name: "Forwarded malformed", remote: "10.0.0.1:1", header: "Forwarded", values: []string{`for="1.2.3.4`}, want: `error: httplimit: no rate-limit key: Forwarded from trusted proxy 10.0.0.1: quoted string at offset 4 is not closed`},
		{name: "XFF ignored when Forwarded is configured", remote: "10.0.0.1:1", header: "Forwarded", want: "10.0.0.1"},
		{name: "bad RemoteAddr", remote: "@", want: `error: httplimit: no rate-limit key: RemoteAddr "@": not an address`},
		{name: "X-Real-Ip", remote: "10.0.0.1:1", header: "X-Real-Ip", values: []string{"6.6.6.6", "203.0.113.5"}, want: "203.0.113.5"},
		{name: "X-Real-Ip untrusted peer", remote: "198.51.100.7:1", header: "X-Real-Ip", values: []string{"203.0.113.5"}, want: "198.51.100.7"},
		{name: "other header", remote: "10.0.0.1:1", header: "X-Client", values: []string{"203.0.113.5"},
			want: `error: httplimit: no rate-limit key: ClientIP.Header "X-Client" is none of X-Forwarded-For, Forwarded and X-Real-Ip`},
		{name: "too many trusted hops", remote: "10.0.0.1:1", values: []string{strings.Repeat("10.0.0.2, ", 33)},
			want: `error: httplimit: no rate-limit key: X-Forwarded-For from trusted proxy 10.0.0.2: proxy chain too long: more than 32 trusted hops`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tt.remote
			h := tt.header
			if h == "" {
				h = httplimit.HeaderXForwardedFor
			}
			for _, v := range tt.values {
				r.Header.Add(h, v)
			}
			if tt.header == "Forwarded" && tt.name == "XFF ignored when Forwarded is configured" {
				r.Header.Add(httplimit.HeaderXForwardedFor, "1.2.3.4")
			}
			a, err := httplimit.ClientIP{Trusted: trusted, Header: tt.header}.Addr(r)
			got := a.String()
			if err != nil {
				got = "error: " + err.Error()
				if !errors.Is(err, httplimit.ErrNoKey) {
					t.Errorf("error %v does not wrap ErrNoKey", err)
				}
			}
			if got != tt.want {
				t.Errorf("Addr(RemoteAddr %q, %s %q) = %s\nwant %s", tt.remote, h, tt.values, got, tt.want)
			}
		})
	}
}

func TestParsePrefixesErrors(t *testing.T) {
	for _, s := range []string{"10.0.0.0/33", "nope", "1.2.3.4.5"} {
		if _, err := httplimit.ParsePrefixes(s); err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("ParsePrefixes(%q) error = %v, want one naming it", s, err)
		}
	}
}

// TestTrustedProxiesOverHTTP runs the middleware behind a real socket whose
// peer is 127.0.0.1: spoofed X-Forwarded-For values from that peer are
// ignored unless 127.0.0.1 is a trusted proxy.
func TestTrustedProxiesOverHTTP(t *testing.T) {
	tests := []struct {
		name    string
		trusted []string
		want    []int
	}{
		// Untrusted peer: every request is 127.0.0.1's, whatever it claims.
		{"untrusted", []string{"10.0.0.0/8"}, []int{200, 200, 429, 429}},
		// Trusted: each claimed client has its own quota of 2.
		{"trusted", []string{"127.0.0.0/8", "::1"}, []int{200, 200, 200, 200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var keys []string
			mw, err := httplimit.New(sluice.New(newMemStore(t, memstoreClock(newClock(t0)))),
				[]httplimit.Policy{{Name: "ip", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Minute}}},
				httplimit.WithKey(httplimit.ClientIP{Trusted: mustPrefixes(t, tt.trusted...)}.Key),
				httplimit.WithObserver(httplimit.ObserverFunc(func(e httplimit.Event) { keys = append(keys, e.Decisions[0].Key) })))
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(mw.Handler(okHandler()))
			defer srv.Close()
			var got []int
			for i := range 4 {
				resp, _ := get(t, srv.Client(), srv.URL, httplimit.HeaderXForwardedFor, fmt.Sprintf("203.0.113.%d", i))
				got = append(got, resp.StatusCode)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("statuses (-want +got):\n%s", diff)
			}
			wantKeys := []string{"127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1"}
			if tt.name == "trusted" {
				wantKeys = []string{"203.0.113.0", "203.0.113.1", "203.0.113.2", "203.0.113.3"}
			}
			if diff := cmp.Diff(wantKeys, keys); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseForwarded(t *testing.T) {
	tests := []struct {
		give string
		want []string
		err  string
	}{
		{give: `for=192.0.2.43`, want: []string{"192.0.2.43"}},
		{give: `for=192.0.2.43, for=198.51.100.17`, want: []string{"192.0.2.43", "198.51.100.17"}},
		{give: `for="[2001:db8:cafe::17]:4711"`, want: []string{"[2001:db8:cafe::17]:4711"}},
		{give: `proto=https;by=203.0.113.43;FOR=192.0.2.60`, want: []string{"192.0.2.60"}},
		{give: `for="a,b;c\"d"`, want: []string{`a,b;c"d`}},
		{give: `proto=http, for=1.2.3.4`, want: []string{"", "1.2.3.4"}},
		{give: ` , for=1.2.3.4 ,, `, want: []string{"1.2.3.4"}},
		{give: ``, want: nil},
		{give: `for=1.2.3.4;for=5.6.7.8`, err: "element has two for= parameters (offset 12)"},
		{give: `for`, err: `parameter "for" at offset 0 has no '='`},
		{give: `for=`, err: `parameter "for" at offset 0 has an empty value`},
		{give: `for=[::1]`, err: `parameter "for" at offset 0 has an empty value`},
		{give: `for="x\`, err: `quoted string at offset 4 ends in '\'`},
	}
	for _, tt := range tests {
		got, err := httplimit.ParseForwarded(tt.give)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if diff := cmp.Diff(tt.want, got); diff != "" || gotErr != tt.err {
			t.Errorf("ParseForwarded(%q) = %q, %q; want %q, %q", tt.give, got, gotErr, tt.want, tt.err)
		}
	}
}

func FuzzParseForwarded(f *testing.F) {
	for _, s := range []string{
		`for=192.0.2.43`, `for="[2001:db8:cafe::17]:4711";proto=https`, `for=_hidden, for=unknown`,
		`for="a,b;c\"d"`, ` , for=1.2.3.4 ,, `, `for="x\`, `for=1.2.3.4:_port`, `for="[::1]"`, `by=1;for="\\"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fors, err := httplimit.ParseForwarded(s)
		if err != nil {
			if fors != nil {
				t.Fatalf("ParseForwarded(%q) returned %q with error %v", s, fors, err)
			}
			return
		}
		for _, v := range fors {
			a, err := httplimit.ParseNode(v)
			if err == nil && (!a.IsValid() || a.Zone() != "" || a.Is4In6()) {
				t.Fatalf("ParseNode(%q) = %v, a non-canonical address", v, a)
			}
		}
		// Through ClientIP with a trusted peer: never a panic, and either an
		// address or ErrNoKey.
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.1:1"
		r.Header.Set(httplimit.HeaderForwarded, s)
		a, err := httplimit.ClientIP{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Header: httplimit.HeaderForwarded}.Addr(r)
		if err == nil != a.IsValid() || (err != nil && !errors.Is(err, httplimit.ErrNoKey)) {
			t.Fatalf("Addr with Forwarded %q = %v, %v", s, a, err)
		}
	})
}

func TestClientIPKeyIPv6Bits(t *testing.T) {
	tests := []struct {
		remote string
		bits   int
		want   string
	}{
		{"[2001:db8:1:2:aaaa::1]:5", 64, "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:bbbb::9]:5", 64, "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:bbbb::9]:5", 48, "2001:db8:1::/48"},
		{"[2001:db8:1:2:bbbb::9]:5", 0, "2001:db8:1:2:bbbb::9"},
		{"192.0.2.7:5", 64, "192.0.2.7"},
		{"[::ffff:192.0.2.7]:5", 64, "192.0.2.7"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tt.remote
		got, err := httplimit.ClientIP{IPv6Bits: tt.bits}.Key(r)
		if err != nil || got != tt.want {
			t.Errorf("Key(%s, IPv6Bits %d) = %q, %v; want %q", tt.remote, tt.bits, got, err, tt.want)
		}
	}
}
