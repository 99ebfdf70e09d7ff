package clientip

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var testTrusted = mustPrefixes("10.0.0.0/8", "2001:db8:1::/48", "192.0.2.1", "::ffff:172.16.0.0/108")

func mustPrefixes(s ...string) []netip.Prefix {
	p, err := ParsePrefixes(s...)
	if err != nil {
		panic(err)
	}
	return p
}

func TestParsePrefixes(t *testing.T) {
	got := mustPrefixes("10.1.2.3/8", " 192.0.2.1 ", "::ffff:192.0.2.9", "::ffff:172.16.0.0/108", "fe80::1%eth0", "2001:db8::/32")
	want := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("192.0.2.9/32"),
		netip.MustParsePrefix("172.16.0.0/12"), netip.MustParsePrefix("fe80::1/128"), netip.MustParsePrefix("2001:db8::/32"),
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("ParsePrefixes (-want +got):\n%s", diff)
	}
	for _, s := range []string{"10.0.0.0/33", "nope", "1.2.3.4.5", ""} {
		if _, err := ParsePrefixes(s); err == nil || !strings.Contains(err.Error(), `"`+s+`"`) {
			t.Errorf("ParsePrefixes(%q) error = %v, want one naming it", s, err)
		}
	}
}

func TestWalk(t *testing.T) {
	peer := netip.MustParseAddr("10.0.0.1")
	long := slices.Repeat([]string{"10.0.0.9"}, MaxHops)
	tests := []struct {
		name   string
		header string
		lines  []string
		want   Result
		err    string
	}{
		{name: "no lines", header: XForwardedFor, want: Result{Addr: peer}},
		{name: "XFF lines right to left", header: XForwardedFor, lines: []string{"6.6.6.6, 203.0.113.9", "10.2.2.2, 192.0.2.1"},
			want: Result{Addr: netip.MustParseAddr("203.0.113.9"), Untrusted: true, Hops: 3}},
		{name: "mapped trusted prefix", header: XForwardedFor, lines: []string{"203.0.113.9, 172.16.5.5"},
			want: Result{Addr: netip.MustParseAddr("203.0.113.9"), Untrusted: true, Hops: 2}},
		{name: "empty elements skipped", header: XForwardedFor, lines: []string{",,203.0.113.9,, ", ""},
			want: Result{Addr: netip.MustParseAddr("203.0.113.9"), Untrusted: true, Hops: 1}},
		{name: "exactly MaxHops trusted", header: XForwardedFor, lines: long,
			want: Result{Addr: netip.MustParseAddr("10.0.0.9"), Hops: MaxHops}},
		{name: "MaxHops+1 trusted", header: XForwardedFor, lines: append(slices.Clone(long), "10.0.0.9"),
			err: "X-Forwarded-For from trusted proxy 10.0.0.9: proxy chain too long: more than 32 trusted hops"},
		{name: "MaxHops trusted then the client", header: Forwarded, lines: append([]string{"for=203.0.113.1"}, slices.Repeat([]string{"for=10.0.0.9"}, MaxHops-1)...),
			want: Result{Addr: netip.MustParseAddr("203.0.113.1"), Untrusted: true, Hops: MaxHops}},
		{name: "Forwarded long line", header: Forwarded, lines: []string{strings.Repeat("for=6.6.6.6, ", 1000) + strings.Repeat("for=10.0.0.9,", 5)},
			want: Result{Addr: netip.MustParseAddr("6.6.6.6"), Untrusted: true, Hops: 6}},
		{name: "Forwarded line left of the client is not parsed", header: Forwarded, lines: []string{`for="`, "for=203.0.113.9"},
			want: Result{Addr: netip.MustParseAddr("203.0.113.9"), Untrusted: true, Hops: 1}},
		{name: "MaxElements empty elements", header: XForwardedFor, lines: []string{"203.0.113.9" + strings.Repeat(",", MaxElements-2)},
			want: Result{Addr: netip.MustParseAddr("203.0.113.9"), Untrusted: true, Hops: 1}},
		{name: "MaxElements+1 empty elements", header: XForwardedFor, lines: []string{"203.0.113.9" + strings.Repeat(",", MaxElements-1)},
			err: "X-Forwarded-For from trusted proxy 10.0.0.1: proxy chain too long: more than 256 list elements and lines before the client"},
		{name: "MaxElements empty lines", header: XForwardedFor, lines: append([]string{"203.0.113.9"}, make([]string, MaxElements-2)...),
			want: Result{Addr: netip.MustParseAddr("203.0.113.9"), Untrusted: true, Hops: 1}},
		{name: "X-Real-Ip lines past MaxHops", header: XRealIP, lines: append([]string{"203.0.113.9"}, slices.Repeat([]string{"10.0.0.5"}, MaxElements)...),
			err: "X-Real-Ip from trusted proxy 10.0.0.5: proxy chain too long: more than 32 trusted hops"},
		{name: "longest Forwarded line", header: Forwarded, lines: []string{"for=203.0.113.9;x=" + strings.Repeat("a", MaxForwardedLine-18)},
			want: Result{Addr: netip.MustParseAddr("203.0.113.9"), Untrusted: true, Hops: 1}},
		{name: "Forwarded line too long", header: Forwarded, lines: []string{"for=203.0.113.9;x=" + strings.Repeat("a", MaxForwardedLine-17)},
			err: "Forwarded from trusted proxy 10.0.0.1: proxy chain too long: Forwarded line longer than 16384 bytes"},
		{name: "X-Real-Ip lines", header: XRealIP, lines: []string{"203.0.113.9", "[2001:db8:1::1]:80"},
			want: Result{Addr: netip.MustParseAddr("203.0.113.9"), Untrusted: true, Hops: 2}},
		{name: "X-Real-Ip empty line", header: XRealIP, lines: []string{" "},
			err: `X-Real-Ip hop "" reported by trusted 10.0.0.1: empty node`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Walk(peer, tt.header, tt.lines, testTrusted)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
				var he *HopError
				if !errors.As(err, &he) {
					t.Errorf("error %v is not a *HopError", err)
				}
			} else if got != tt.want {
				t.Errorf("Walk = %+v, want %+v", got, tt.want)
			}
			if gotErr != tt.err {
				t.Errorf("Walk error = %q, want %q", gotErr, tt.err)
			}
		})
	}
	if _, err := Walk(peer, XForwardedFor, append(slices.Clone(long), "10.0.0.9"), testTrusted); !errors.Is(err, ErrChainTooLong) {
		t.Errorf("Walk past MaxHops: error %v does not wrap ErrChainTooLong", err)
	}
}

func TestKey(t *testing.T) {
	tests := []struct {
		give string
		bits int
		want string
	}{
		{"2001:db8:1:2:aaaa::1", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:aaaa::1", 56, "2001:db8:1::/56"},
		{"2001:db8:1:2:aaaa::1", 128, "2001:db8:1:2:aaaa::1"},
		{"2001:db8:1:2:aaaa::1", 0, "2001:db8:1:2:aaaa::1"},
		{"fe80::1%eth0", 128, "fe80::1"},
		{"::ffff:192.0.2.7", 64, "192.0.2.7"},
		{"192.0.2.7", 64, "192.0.2.7"},
	}
	for _, tt := range tests {
		if got := Key(netip.MustParseAddr(tt.give), tt.bits); got != tt.want {
			t.Errorf("Key(%s, %d) = %q, want %q", tt.give, tt.bits, got, tt.want)
		}
	}
}

// walkAll is Walk written the plain way: every hop of every line parsed
// first, then walked, without a bound.
func walkAll(peer netip.Addr, name string, lines []string, trusted []netip.Prefix) (netip.Addr, bool, error) {
	var hops []string
	for _, l := range lines {
		switch name {
		case XForwardedFor:
			for h := range strings.SplitSeq(l, ",") {
				if h = strings.TrimSpace(h); h != "" {
					hops = append(hops, h)
				}
			}
		case Forwarded:
			fs, err := ParseForwarded(l)
			if err != nil {
				return netip.Addr{}, false, err
			}
			hops = append(hops, fs...)
		default:
			hops = append(hops, strings.TrimSpace(l))
		}
	}
	addr := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := ParseNode(hops[i])
		if err != nil {
			return netip.Addr{}, false, err
		}
		addr = a
		if !Contains(trusted, a) {
			return a, true, nil
		}
	}
	return addr, false, nil
}

// FuzzWalk holds Walk to walkAll on arbitrary header lines (split at
// '\n'): the same client whenever walkAll finds one within MaxHops
// hops without an error; never a panic; every address canonical.
func FuzzWalk(f *testing.F) {
	for _, s := range []string{
		"203.0.113.9", "6.6.6.6, 203.0.113.9\n10.2.2.2", "[2001:db8:1::5]:443, 10.0.0.3:8080", "unknown, 10.0.0.2",
		"for=6.6.6.6, for=203.0.113.60;proto=http\nFor=\"[2001:db8:1::17]:4711\"", `for="[2001:db8:cafe::17]:4711"`,
		"for=_hidden", `for="1.2.3.4`, "::ffff:10.0.0.1, fe80::1%eth0", " , ,\n\n", "1.2.3.4:_obf, [::1]:_x",
	} {
		for _, h := range []string{XForwardedFor, Forwarded, XRealIP} {
			f.Add(h, s)
		}
	}
	peer := netip.MustParseAddr("10.0.0.1")
	f.Fuzz(func(t *testing.T, header, text string) {
		lines := strings.Split(text, "\n")
		got, err := Walk(peer, header, lines, testTrusted)
		if err == nil && (!got.Addr.IsValid() || got.Addr.Zone() != "" || got.Addr.Is4In6()) {
			t.Fatalf("Walk(%s, %q) = %v, a non-canonical address", header, lines, got.Addr)
		}
		if got.Hops > MaxHops {
			t.Fatalf("Walk(%s, %q) read %d hops, more than %d", header, lines, got.Hops, MaxHops)
		}
		if err != nil {
			var he *HopError
			if !errors.As(err, &he) {
				t.Fatalf("Walk(%s, %q) error %v is not a *HopError", header, lines, err)
			}
		}
		want, untrusted, werr := walkAll(peer, header, lines, testTrusted)
		if werr == nil && err == nil && (got.Addr != want || got.Untrusted != untrusted) {
			t.Fatalf("Walk(%s, %q) = %+v, walkAll = %v, %v", header, lines, got, want, untrusted)
		}
		// Walk reads less than walkAll, so it may succeed where walkAll
		// fails (a malformed hop left of the client), never the reverse
		// unless the chain is longer than MaxHops.
		if werr == nil && err != nil && !errors.Is(err, ErrChainTooLong) {
			t.Fatalf("Walk(%s, %q) error %v, walkAll = %v", header, lines, err, want)
		}
	})
}

// FuzzParseForwardedKeep holds the bounded parse to the full one.
func FuzzParseForwardedKeep(f *testing.F) {
	f.Add(`for=1.1.1.1, for=2.2.2.2, for=3.3.3.3;by=x, proto=http`, 2)
	f.Add(`for="a,b;c\"d", for=_x`, 1)
	f.Fuzz(func(t *testing.T, s string, keep int) {
		keep = 1 + (keep&0xff)%40
		all, err := ParseForwarded(s)
		got, kerr := parseForwarded(s, keep)
		if (err == nil) != (kerr == nil) {
			t.Fatalf("ParseForwarded(%q) error %v, parseForwarded(keep %d) error %v", s, err, keep, kerr)
		}
		if len(all) > keep {
			all = all[len(all)-keep:]
		}
		if !slices.Equal(all, got) {
			t.Fatalf("parseForwarded(%q, %d) = %q, want %q", s, keep, got, all)
		}
	})
}
