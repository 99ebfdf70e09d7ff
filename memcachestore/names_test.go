package memcachestore

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func testStore(t *testing.T, o Options) *Store {
	t.Helper()
	if o.Servers == nil {
		o.Servers = []string{"127.0.0.1:1"}
	}
	s, err := New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestNames(t *testing.T) {
	s := testStore(t, Options{})
	minute := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Minute}
	fw := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Minute}
	odd := sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 1, Period: 1500 * time.Millisecond}
	now := int64(1_764_979_230_000_000) // 2025-12-06 00:00:30 UTC
	tests := []struct {
		key  string
		lim  sluice.Limit
		want string
	}{
		{"tenant42", minute, "sluice:tenant42:G1o"},
		{"a b\x00%c", minute, "sluice:a%20b%00%25c:G1o"},
		{"x:y", odd, "sluice:x:y:sw5eo"},
		{"k", fw, "sluice:k:F1o.hihs0"},
		{"\xff\x7f", minute.With(sluice.TokenBucket), "sluice:\xff%7F:B1o"},
	}
	for _, tt := range tests {
		got, err := s.Name(tt.key, tt.lim, now)
		if err != nil || got != tt.want {
			t.Errorf("Name(%q, %v) = %q, %v, want %q", tt.key, tt.lim, got, err, tt.want)
		}
	}
}

// TestNamesBounded: every name is a key memcached takes (at most 250
// bytes, no space or control character), also for the longest keys of
// the worst bytes, and different keys have different names.
func TestNamesBounded(t *testing.T) {
	s := testStore(t, Options{Prefix: strings.Repeat("p", MaxPrefixLen)})
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Hour + time.Microsecond}
	seen := map[string]string{}
	keys := []string{
		strings.Repeat("k", sluice.MaxKeyLen),
		strings.Repeat("k", sluice.MaxKeyLen-1) + "j",
		strings.Repeat(" ", sluice.MaxKeyLen),
		strings.Repeat("%", sluice.MaxKeyLen),
		strings.Repeat("%", sluice.MaxKeyLen-1),
		strings.Repeat("k", 150),
		strings.Repeat("k", 151),
		strings.Repeat("k", 200),
		strings.Repeat("k", 149) + "%",
		strings.Repeat("k", 149) + "%#",
		"a%#b",
	}
	for _, k := range keys {
		name, err := s.Name(k, lim, math.MaxInt64/2)
		if err != nil {
			t.Fatal(err)
		}
		if len(name) > maxName || !legalName(name) {
			t.Errorf("name of a %d-byte key: %d bytes %q, want at most %d legal bytes", len(k), len(name), name, maxName)
		}
		if prev, ok := seen[name]; ok {
			t.Errorf("keys %q and %q share the name %q", prev, k, name)
		}
		seen[name] = k
	}
	// A key that fits exactly is kept whole; one byte more is cut and hashed.
	room := maxName - MaxPrefixLen - 1 - len(appendSuffix(nil, lim, math.MaxInt64/2/lim.Period.Microseconds()))
	whole, _ := s.Name(strings.Repeat("w", room), lim, math.MaxInt64/2)
	cut, _ := s.Name(strings.Repeat("w", room+1), lim, math.MaxInt64/2)
	if strings.Contains(whole, "%#") || !strings.Contains(cut, "%#") || len(whole) != maxName || len(cut) > maxName {
		t.Errorf("at the limit: %q (%d), one more: %q (%d); want the first whole, the second hashed", whole, len(whole), cut, len(cut))
	}
}

func TestReferenceNames(t *testing.T) {
	s := testStore(t, Options{ReferenceKeys: true})
	fw := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Minute}
	now := int64(1_764_979_230_000_000)
	// The reference's name of domain "domain", entry key=value, prefix
	// "ratelimit_": its key ends with "_", then the window's start.
	if got, err := s.Name("ratelimit_domain_key_value_", fw, now); err != nil || got != "ratelimit_domain_key_value_1764979200" {
		t.Errorf("reference name = %q, %v", got, err)
	}
	// Other algorithms and periods keep the store's names.
	if got, _ := s.Name("k", fw.With(sluice.GCRA), now); got != "sluice:k:G1o" {
		t.Errorf("GCRA with ReferenceKeys = %q, want the store's name", got)
	}
	if got, _ := s.Name("k", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: 1500 * time.Millisecond}, now); !strings.HasPrefix(got, "sluice:k:f") {
		t.Errorf("a fixed window of 1.5s with ReferenceKeys = %q, want the store's name", got)
	}
	for _, k := range []string{"a b", "a\x00", strings.Repeat("k", 241)} {
		if _, err := s.Name(k, fw, now); !namesKey(err) {
			t.Errorf("reference name of %q: %v, want a *sluice.LimitError on Key", k, err)
		}
	}
}

func namesKey(err error) bool {
	le, ok := err.(*sluice.LimitError)
	return ok && le.Field == "Key"
}

func TestExptime(t *testing.T) {
	s := testStore(t, Options{ClockSkew: 2 * time.Second})
	now := int64(1_764_979_230_500_000)
	tests := []struct {
		ttl  int64
		want int64
	}{
		{0, 1 + 1 + 2},
		{1, 1 + 1 + 2},
		{1_000_000, 1 + 1 + 2},
		{1_000_001, 2 + 1 + 2},
		{(maxRelative - 3) * 1e6, maxRelative},
		{(maxRelative - 2) * 1e6, 1_764_979_230 + maxRelative + 1},
		{math.MaxInt64 / 2, maxUnix},
	}
	for _, tt := range tests {
		if got := s.Exptime(now, tt.ttl); got != tt.want {
			t.Errorf("Exptime(ttl %dµs) = %d, want %d", tt.ttl, got, tt.want)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true}, {"94                  ", 94, true}, {"18446744073709551615", math.MaxUint64, true},
		{"18446744073709551616", 0, false}, {"", 0, false}, {"-1", 0, false}, {"1x", 0, false}, {" 1", 0, false},
	} {
		if got, ok := atou([]byte(tt.in)); got != tt.want || ok != tt.ok {
			t.Errorf("atou(%q) = %d, %v, want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
	if c, ok := decodeCounter([]byte("10:2:3")); !ok || c.Start != 10 || c.Prev != 2 || c.Cur != 3 {
		t.Errorf("decodeCounter = %+v, %v", c, ok)
	}
	if tat, ok := decodeTAT([]byte("-1:7")); !ok || tat.At != -1 || tat.Frac != 7 {
		t.Errorf("decodeTAT = %+v, %v", tat, ok)
	}
	for _, bad := range []string{"", "1:2", "1:2:3:4", "1:-2:3", "a:b:c", "9223372036854775808:0:0"} {
		if _, ok := decodeCounter([]byte(bad)); ok {
			t.Errorf("decodeCounter(%q) ok, want refused", bad)
		}
	}
	for _, bad := range []string{"", "1:2:3", "1:-2", "x", "1:"} {
		if _, ok := decodeTAT([]byte(bad)); ok {
			t.Errorf("decodeTAT(%q) ok, want refused", bad)
		}
	}
	if _, ok := decodeCount([]byte("-3")); ok {
		t.Error("decodeCount(-3) ok, want refused")
	}
}

func TestOptionsRefused(t *testing.T) {
	ok := []string{"127.0.0.1:11211"}
	for _, tt := range []struct {
		o    Options
		want string
	}{
		{Options{}, "no servers"},
		{Options{Servers: ok, SRV: "_m._tcp.x"}, "both Servers and SRV"},
		{Options{Servers: make([]string, MaxServers+1)}, "more than 64"},
		{Options{Servers: []string{"host"}}, "not host:port"},
		{Options{SRV: "memcache.example"}, "not _service._proto.name"},
		{Options{Servers: ok, SRVRefresh: time.Second}, "SRVRefresh needs SRV"},
		{Options{SRV: "_m._tcp.x", SRVRefresh: time.Millisecond}, "SRVRefresh"},
		{Options{Servers: ok, MaxIdleConns: -1}, "MaxIdleConns"},
		{Options{Servers: ok, MaxConns: MaxConnsLimit + 1}, "MaxConns"},
		{Options{Servers: ok, MaxIdleConns: 10, MaxConns: 5}, "MaxIdleConns 10 is more than MaxConns 5"},
		{Options{Servers: ok, Timeout: -1}, "Timeout"},
		{Options{Servers: ok, Timeout: 2 * time.Minute}, "Timeout"},
		{Options{Servers: ok, Prefix: "a b"}, "Prefix"},
		{Options{Servers: ok, Prefix: strings.Repeat("p", MaxPrefixLen+1)}, "Prefix"},
		{Options{Servers: ok, MaxCASAttempts: MaxCASAttemptsLimit + 1}, "MaxCASAttempts"},
		{Options{Servers: ok, ClockSkew: -time.Second}, "ClockSkew"},
		{Options{Servers: ok, TLS: &TLS{CertFile: "c.pem"}}, "CertFile and KeyFile go together"},
		{Options{Servers: ok, TLS: &TLS{CAFile: "/nonexistent/ca.pem"}}, "TLS.CAFile"},
		{Options{Servers: ok, TLS: &TLS{Config: nil, ServerName: "x", CAFile: "/nonexistent"}}, "TLS.CAFile"},
	} {
		if _, err := New(t.Context(), tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tt.o, err, tt.want)
		}
	}
}
