package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestIdentityFlags(t *testing.T) {
	tests := []struct {
		args    []string
		trusted []string
		bits    int
		key     string
		err     string
	}{
		{args: nil, trusted: []string{"127.0.0.0/8", "::1/128"}, bits: 64},
		{args: []string{"--trusted-proxies", ""}, trusted: []string{}, bits: 64},
		{args: []string{"--trusted-proxies", " 10.0.0.0/8 , 192.0.2.1,", "--auth-ipv6-prefix", "128", "--auth-no-identity", "key:unidentified"},
			trusted: []string{"10.0.0.0/8", "192.0.2.1/32"}, bits: 128, key: "unidentified"},
		{args: []string{"--auth-ipv6-prefix", "1"}, trusted: []string{"127.0.0.0/8", "::1/128"}, bits: 1},
		{args: []string{"--trusted-proxies", "10.0.0.0/33"}, err: `--trusted-proxies: trusted proxy "10.0.0.0/33"`},
		{args: []string{"--trusted-proxies", "nginx"}, err: `--trusted-proxies: trusted proxy "nginx"`},
		{args: []string{"--auth-ipv6-prefix", "0"}, err: "--auth-ipv6-prefix 0: want 1 to 128"},
		{args: []string{"--auth-ipv6-prefix", "129"}, err: "--auth-ipv6-prefix 129: want 1 to 128"},
		{args: []string{"--auth-no-identity", "allow"}, err: `--auth-no-identity "allow": want deny or key:NAME`},
		{args: []string{"--auth-no-identity", "key:10.0.0.1"}, err: "NAME is an address"},
	}
	for _, tt := range tests {
		var g identityFlags
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		g.register(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		err := g.validate()
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: validate() = %v, want an error with %q", tt.args, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: validate() = %v", tt.args, err)
			continue
		}
		id := g.identity()
		got := []string{}
		for _, p := range id.Trusted {
			got = append(got, p.String())
		}
		if diff := cmp.Diff(tt.trusted, got); diff != "" || id.IPv6Bits != tt.bits || id.NoIdentityKey != tt.key {
			t.Errorf("%q: identity() = %v, %d, %q; want %v, %d, %q", tt.args, got, id.IPv6Bits, id.NoIdentityKey, tt.trusted, tt.bits, tt.key)
		}
	}
}

// TestServeIdentityFlags checks that serve validates the identity flags
// before it starts anything.
func TestServeIdentityFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--trusted-proxies", "10.0.0.0/8,nope"}, `sluice serve: --trusted-proxies: trusted proxy "nope"`},
		{[]string{"--auth-ipv6-prefix", "200"}, "sluice serve: --auth-ipv6-prefix 200: want 1 to 128"},
		{[]string{"--auth-no-identity", "key:"}, `sluice serve: --auth-no-identity "key:": NAME must have 1 to 64 characters`},
	} {
		var stderr strings.Builder
		if code := serve(append([]string{"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, tt.args...), io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("serve %q = %d, %q; want 2 and %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}
